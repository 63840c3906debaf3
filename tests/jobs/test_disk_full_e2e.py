"""A full disk, for real: GPUDECK_HOME on a small tmpfs that a file fills, a real API and worker, a real model job
training into it. Where this machine may not mount one (no root or CAP_SYS_ADMIN), the test says so and skips."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
import requests

from jobs.run.proc import python_module
from tests.support.live import descendants, environ, start_api

pytestmark = pytest.mark.slow

SPEC = {
    "model": "lenet",
    "dataset": "synthetic:8x8x1",
    "checkpoint_every": 4,
    "params": {"steps": 8, "batch_size": 8, "lr": 0.02, "seed": 1},
}
"""Eight steps, a checkpoint at step 4 and at the end: lenet's checkpoint (weights and momentum) is about 25 MiB
whatever the batch (small steps: two epochs of 64-image steps cost ~5 CPU-s more for the same two saves)."""
ROOM = 40 << 20
"""What the filler leaves: the first checkpoint and the logs fit, the second does not."""


@pytest.fixture
def small_home(settings):
    """GPUDECK_HOME on a 96 MiB tmpfs (unmounted after the stack stopped: this fixture comes first)."""
    settings.home.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96m", "gpudeck-test", str(settings.home)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem to fill here ({mounted.stderr.strip()}); needs root")
    yield settings.home
    subprocess.run(["umount", "-l", str(settings.home)], check=False)


def _fill(home, leave: int):
    filler = home / "filler.bin"
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, shutil.disk_usage(home).free - leave)
    return filler


def test_a_job_that_fills_the_disk_ends_disk_full_keeps_its_checkpoint_and_its_retry_resumes(
    small_home, spawn, child_env
):
    env = dict(child_env, GPUDECK_MIN_FREE="30M")
    api = start_api(spawn, env)
    spawn("worker", "--cpu", env=env)
    filler = _fill(small_home, ROOM)
    job_id = requests.post(f"{api}/api/v1/jobs", json=SPEC, timeout=10).json()["id"]
    job = requests.get(f"{api}/api/v1/jobs/{job_id}/wait?timeout=240", timeout=260).json()

    assert (job["status"], job["reason"]) == ("failed", "disk_full"), job
    assert "retry" in job["message"] and any("No space left on device" in line for line in job["log_tail"])
    kept = (small_home / "jobs" / str(job_id) / "checkpoints" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-4"' in kept  # the first, whole; no half-written one named
    assert not (small_home / "jobs" / str(job_id) / "model.keras").exists()
    assert job["disk_bytes"] > 20 << 20

    # Below GPUDECK_MIN_FREE now: the stack answers, says so, and refuses new work with the way out.
    health = requests.get(f"{api}/healthz", timeout=10).json()
    assert health["disk"]["low"] is True and health["redis"] == "ok", health
    refused = requests.post(f"{api}/api/v1/jobs", json=SPEC, timeout=10)
    assert refused.status_code == 507 and "gpudeck rm" in refused.json()["message"], refused.text

    filler.unlink()  # space freed
    assert requests.get(f"{api}/healthz", timeout=10).json()["disk"]["low"] is False
    retry = requests.post(f"{api}/api/v1/jobs/{job_id}/retry", timeout=10)
    assert retry.status_code == 201 and retry.json()["resumes"] == job_id, retry.text
    again = requests.get(f"{api}/api/v1/jobs/{retry.json()['id']}/wait?timeout=240", timeout=260).json()
    assert again["status"] == "succeeded", again
    assert again["result"]["steps"] == 8
    text = requests.get(f"{api}/api/v1/jobs/{again['id']}/logs", timeout=10).text
    assert f"resuming from the last checkpoint of job {job_id}" in text
    assert "resumed from checkpoints/ckpt-4 at step 4" in text  # the trainer restored it: it loads
    health = requests.get(f"{api}/healthz", timeout=10).json()  # the stack stayed up through it all
    assert (health["redis"], health["workers"], health["workers_alive"]) == ("ok", 1, 1), health


FILL = (
    "import os\n"
    "with open(os.path.join(os.environ['JOB_DIR'], 'fill'), 'wb') as f:\n"
    "    try:\n"
    "        while True:\n"
    "            f.write(b'x' * (1 << 20)); f.flush()\n"
    "    except OSError as exc:\n"
    "        print('filled:', exc.strerror, flush=True); raise SystemExit(1)\n"
)
"""A script that fills the disk, then fails with ENOSPC's words."""

STUBBORN = (
    "import os, time\n"
    "print('writing', flush=True)\n"
    "while True:\n"
    "    try:\n"
    "        with open(os.path.join(os.environ['JOB_DIR'], 'out'), 'ab') as f:\n"
    "            f.write(b'y' * 65536)\n"
    "    except OSError:\n"
    "        pass\n"
    "    time.sleep(0.1)\n"
)
"""A script that goes on writing whatever the disk says (a trainer that shrugs off a failed save): only a cancel
ends it."""


def test_a_full_disk_under_the_default_up_with_redis_on_it_is_ridden_out_and_rm_frees_it(
    small_home, tmp_path, child_env
):
    """Issue 23 #6: `gpudeck up` with its Redis (and its append-only file) on the full disk too. Redis refuses
    writes; the worker rides it out (no crash, no restart), the filling job waits to be recorded; a job that goes on
    writing can still be canceled (202: its worker hears it, Redis cannot record it yet); `gpudeck rm` of an ended
    job frees its files first, Redis writes again, the filling job ends disk_full, once, not retried, and the
    canceled one canceled."""
    from tests.support.stack import Up

    env = {k: v for k, v in child_env.items() if k != "REDIS_URL"}
    env.update(GPUDECK_MIN_FREE="0", GPUDECK_COMMAND_JOBS="1")
    stack = Up(small_home, env, tmp_path / "up.log", args=("--cpu-workers", "2"))
    try:
        api = stack.url
        big = requests.post(f"{api}/api/v1/jobs", json={"command": "head -c 12000000 /dev/zero > $JOB_DIR/big"}).json()
        assert (
            requests.get(f"{api}/api/v1/jobs/{big['id']}/wait?timeout=60", timeout=70).json()["status"] == "succeeded"
        )
        stubborn = requests.post(f"{api}/api/v1/jobs", json={"command": ["python", "-c", STUBBORN]}, timeout=10).json()
        deadline = time.monotonic() + 60
        while requests.get(f"{api}/api/v1/jobs/{stubborn['id']}", timeout=10).json()["status"] != "running":
            assert time.monotonic() < deadline, "the writing job did not start"
            time.sleep(0.2)
        filling = requests.post(f"{api}/api/v1/jobs", json={"command": ["python", "-c", FILL]}, timeout=10).json()
        deadline = time.monotonic() + 60
        while shutil.disk_usage(small_home).free > (1 << 20):
            assert time.monotonic() < deadline, "the disk did not fill"
            time.sleep(0.2)
        time.sleep(5)  # Redis cannot write its append-only file now: the worker rides it out
        assert requests.get(f"{api}/api/v1/jobs/{filling['id']}", timeout=10).status_code == 200  # reads answer
        queued = requests.post(f"{api}/api/v1/jobs", json={"command": "true"}, timeout=10)
        assert queued.status_code == 503 and queued.json()["error"] == "redis_cannot_write", queued.text
        canceled = requests.post(f"{api}/api/v1/jobs/{stubborn['id']}/cancel", timeout=10)
        assert canceled.status_code == 202 and "disk is full" in canceled.json()["message"], canceled.text
        deadline = time.monotonic() + 30
        while any(environ(p).get("GPUDECK_JOB_ID") == str(stubborn["id"]) for p in descendants(stack.proc.pid)):
            assert time.monotonic() < deadline, "the canceled job's process goes on while the disk is full"
            time.sleep(0.2)
        gone = subprocess.run(
            [*python_module("tui.cli", "rm", str(big["id"])), "--api", api], env=env, capture_output=True, text=True
        )
        assert gone.returncode == 0 and "deleted 1 job" in gone.stdout, gone.stdout + gone.stderr
        job = requests.get(f"{api}/api/v1/jobs/{filling['id']}/wait?timeout=60", timeout=70).json()
        worker_log = (small_home / "logs" / "worker-cpu0.log").read_text(errors="replace")
        assert (job["status"], job["reason"], job["attempt"]) == ("failed", "disk_full", 1), (job, worker_log[-4000:])
        stopped = requests.get(f"{api}/api/v1/jobs/{stubborn['id']}/wait?timeout=60", timeout=70).json()
        assert (stopped["status"], stopped["attempt"]) == ("canceled", 1), stopped
        assert "restarting" not in stack.output() and "exited (" not in stack.output(), stack.output()[-3000:]
    finally:
        stack.kill()
        shutil.copytree(small_home / "logs", tmp_path / "logs", dirs_exist_ok=True)  # (the tmpfs goes: keep them)
