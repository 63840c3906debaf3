"""Sharing a box for real: `gpudeck up` on FAKE GPUs (a fake nvidia-smi on PATH: we have none), real workers,
real trainers and scripts. GPUs are allocated per job; a waiting big job is not starved; a high-priority job
preempts low ones, which resume from their checkpoints with curves that neither repeat nor skip a step."""

import os
import pwd
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests

from tests.support.live import fake_nvidia_smi, until
from tests.support.readme import run_block
from tests.support.stack import Up

pytestmark = pytest.mark.slow


def fake_gpus(n: int, foreign: Path | None = None) -> str:
    """A FAKE nvidia-smi for a host with `n` H100s; the processes it lists on them are the lines of `foreign`
    (`PID, NAME, MiB, GPU-UUID`) while that file exists: what somebody started by hand."""
    listing = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:04d})\\n" for i in range(n))
    rows = "".join(f"{i}, GPU-{i:04d}, NVIDIA H100 80GB HBM3, 0, 0, 81559, 40, 70.0, 700.00\\n" for i in range(n))
    apps = f"cat '{foreign}' 2>/dev/null" if foreign else "true"
    return f"""case "$*" in
  *-L*) printf '{listing}' ;;
  *--query-gpu*) printf '{rows}' ;;
  *--query-compute-apps*) {apps} ;;
esac
exit 0
"""


class Api:
    """The stack's API over HTTP, as a client would call it."""

    def __init__(self, url: str):
        self.url, self.session = url, requests.Session()

    def get(self, path: str) -> requests.Response:
        return self.session.get(self.url + path, timeout=30)

    def post(self, path: str, json: dict | None = None) -> requests.Response:
        return self.session.post(self.url + path, json=json, timeout=30)


@pytest.fixture
def stack_of(tmp_path, child_env):
    made = []

    def start(gpus: int, **env: str) -> Api:
        fake_nvidia_smi(tmp_path / "bin", fake_gpus(gpus, tmp_path / "foreign.csv"))
        environ = {
            **child_env,
            "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}",
            "GPUDECK_COMMAND_JOBS": "1",
            **env,
        }
        up = Up(tmp_path / "home", environ, tmp_path / "up.log")
        made.append(up)
        client = Api(up.url)
        until(lambda: len(client.get("/api/v1/workers").json()["workers"]) == gpus, 60, "a worker per GPU")
        return client

    yield start
    for up in made:
        up.kill()


def sleeper(seconds: int, gpus: int, **spec) -> dict:
    """A command job that says which GPUs it got, then sleeps."""
    command = f'echo "gpus=$CUDA_VISIBLE_DEVICES count=$GPU_COUNT"; sleep {seconds}'
    return {"command": command, "gpus": gpus, **spec}


def status(client, job_id: int) -> dict:
    return client.get(f"/api/v1/jobs/{job_id}").json()


def test_four_gpus_serve_a_2_gpu_job_and_two_1_gpu_jobs_and_a_3_gpu_job_is_not_starved(stack_of, tmp_path):
    client = stack_of(4)
    big = client.post("/api/v1/jobs", json={"command": "echo hi", "gpus": 5})
    assert big.status_code == 400 and "the largest host" in big.json()["details"]["fields"]["gpus"]
    pair = client.post("/api/v1/jobs", json=sleeper(300, 2)).json()["id"]
    ones = [client.post("/api/v1/jobs", json=sleeper(300, 1)).json()["id"] for _ in range(2)]
    for job_id in (pair, *ones):
        until(lambda i=job_id: status(client, i)["status"] == "running", 60, f"job {job_id} running")
    got = {i: status(client, i)["gpu_ids"] for i in (pair, *ones)}
    assert sorted(g for ids in got.values() for g in ids) == ["0", "1", "2", "3"]  # all at once, no GPU twice
    log = until(lambda: "gpus=" in (text := client.get(f"/api/v1/jobs/{pair}/logs").text) and text, 30, "its log")
    assert f"gpus={','.join(got[pair])} count=2" in log  # one process, both GPUs
    workers = client.get("/api/v1/workers").json()["workers"]
    assert sorted(w["job_id"] for w in workers) == sorted([pair, pair, *ones])  # the pair's second GPU is held
    held = {g["index"]: g["held_by"] for h in client.get("/api/v1/gpus").json()["hosts"] for g in h["gpus"]}
    assert {v["job_id"] for v in held.values() if v} == {pair, *ones}

    three = client.post("/api/v1/jobs", json=sleeper(1, 3)).json()["id"]
    stream = [client.post("/api/v1/jobs", json=sleeper(1, 1)).json()["id"] for _ in range(2)]
    client.post(f"/api/v1/jobs/{ones[0]}/cancel")  # one GPU frees: kept for the 3-GPU job, not the stream
    until(lambda: status(client, ones[0])["status"] == "canceled", 60, "the cancel")
    time.sleep(3)  # (rounds run every second: a stream job would have been placed by now)
    assert [status(client, i)["status"] for i in (three, *stream)] == ["queued"] * 3
    assert status(client, three)["queue_position"] == 1
    client.post(f"/api/v1/jobs/{pair}/cancel")
    job = until(lambda: (j := status(client, three))["status"] in ("running", "succeeded") and j, 60, "3 GPUs")
    assert len(job["gpu_ids"]) == 3 and status(client, stream[0])["status"] in ("queued", "starting", "running")
    for i in (*stream, three):
        until(lambda i=i: status(client, i)["status"] == "succeeded", 90, f"job {i}")
    client.post(f"/api/v1/jobs/{ones[1]}/cancel")
    until(lambda: status(client, ones[1])["status"] == "canceled", 60, "the cancel")

    # somebody's notebook, started by hand, fills GPU 0: no job goes there while it does
    notebook = subprocess.Popen(["sleep", "300"])
    foreign = tmp_path / "foreign.csv"
    try:
        foreign.write_text(f"{notebook.pid}, python3, 30822, GPU-0000\n")
        owner = pwd.getpwuid(os.getuid()).pw_name
        waiting = f"waiting: pid {notebook.pid} ({owner}) uses 30.1 GiB of GPU 0"
        until(lambda: waiting in [w["state"] for w in client.get("/api/v1/workers").json()["workers"]], 30, waiting)
        four = [client.post("/api/v1/jobs", json=sleeper(300, 1)).json()["id"] for _ in range(4)]
        until(lambda: sum(status(client, i)["status"] == "running" for i in four) == 3, 60, "three running")
        assert "0" not in {g for i in four for g in status(client, i)["gpu_ids"] or []}
        gpus = {g["index"]: g for h in client.get("/api/v1/gpus").json()["hosts"] for g in h["gpus"]}
        assert gpus[0]["processes"] == [
            {"pid": notebook.pid, "name": "python3", "used_memory_mib": 30822, "job_id": None, "user": owner}
        ]
        foreign.unlink()  # the notebook ended: the fourth job takes GPU 0
        until(lambda: all(status(client, i)["status"] == "running" for i in four), 60, "all four running")
    finally:
        notebook.kill()
        notebook.wait()
    for i in four:
        client.post(f"/api/v1/jobs/{i}/cancel")


STEPPER = """
import json, os, sys, time
job = os.environ["JOB_DIR"]
ckpt = os.path.join(job, "ckpt.txt")
step = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
print("attempt", os.environ["GPUDECK_ATTEMPT"], "from step", step, flush=True)
with open(os.path.join(job, "metrics.jsonl"), "a") as out:
    while step < int(sys.argv[1]):
        time.sleep(0.1)
        if os.environ["GPUDECK_ATTEMPT"] == "1" and step >= int(sys.argv[2]):
            continue  # (its first attempt holds here until it is preempted, however fast the box runs it)
        step += 1
        out.write(json.dumps({"step": step, "loss": 1.0 / step}) + "\\n")
        out.flush()
        with open(ckpt + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(ckpt + ".tmp", ckpt)
"""


def test_a_high_job_preempts_low_ones_which_resume_from_their_checkpoints(stack_of):
    client = stack_of(2, GPUDECK_PREEMPT_AFTER="0")
    zoo = {
        "model": "resnet20",
        "dataset": "synthetic:16x16x3",
        "params": {"steps": 100000, "batch_size": 16, "log_every": 5},
        "checkpoint_every": 20,
        "priority": "low",
    }
    trainer = client.post("/api/v1/jobs", json=zoo).json()["id"]
    script = client.post(
        "/api/v1/jobs", json={"command": ["python", "-c", STEPPER, "150", "40"], "priority": "low", "total_steps": 150}
    ).json()["id"]
    until(lambda: (status(client, trainer)["progress"]["step"] or 0) >= 25, 120, "the trainer past step 25")
    until(lambda: (status(client, script)["progress"]["step"] or 0) >= 20, 60, "the script past step 20")

    t0 = time.monotonic()
    high = client.post("/api/v1/jobs", json=sleeper(2, 2, priority="high")).json()["id"]
    until(lambda: status(client, high)["status"] in ("running", "succeeded"), 60, "the high job running")
    waited = time.monotonic() - t0
    print(f"\nhigh-priority job started {waited:.1f}s after it was submitted (preempting two)")
    assert waited < 30 + 5  # the stop grace, and a few seconds

    for victim in (trainer, script):
        job = until(lambda v=victim: (j := status(client, v))["preemptions"] == 1 and j, 30, f"job {victim}")
        assert job["message"].startswith(f"preempted by job {high} (high) at step "), job
    assert "resumes from the checkpoint of step" in status(client, trainer)["message"]
    assert "GPUDECK_ATTEMPT" in status(client, script)["message"]
    until(lambda: status(client, high)["status"] == "succeeded", 60, "the high job done")

    # the victims go on where they stopped
    done = until(lambda: (j := status(client, script))["status"] == "succeeded" and j, 120, "the script done")
    assert done["attempt"] == 2 and done["preemptions"] == 1
    steps = [p["step"] for p in client.get(f"/api/v1/jobs/{script}/metrics").json()["train"]]
    assert steps == list(range(1, 151))  # no step twice, none missing
    assert "attempt 2 from step" in client.get(f"/api/v1/jobs/{script}/logs").text

    until(lambda: status(client, trainer)["status"] == "running", 120, "the trainer back")
    until(lambda: (status(client, trainer)["progress"]["step"] or 0) >= 60, 120, "the trainer past step 60")
    points = [p["step"] for p in client.get(f"/api/v1/jobs/{trainer}/metrics").json()["train"]]
    assert points == sorted(set(points)), points  # no step twice
    assert max(b - a for a, b in zip(points, points[1:])) <= 20, points  # no gap beyond one checkpoint interval
    assert "resumed from" in client.get(f"/api/v1/jobs/{trainer}/logs").text
    client.post(f"/api/v1/jobs/{trainer}/cancel")


def test_the_readme_section_as_written(stack_of, child_env, tmp_path):
    client = stack_of(2, GPUDECK_PREEMPT_AFTER="0")
    env = {
        **child_env,
        "GPUDECK_API": client.url,
        "PATH": f"{os.path.dirname(sys.executable)}:{child_env['PATH']}",
    }
    (tmp_path / "readme").mkdir()
    out = run_block("walkthrough-sharing", urlparse(client.url).port, tmp_path / "readme", env)
    listed, shown, reprioritized, first, share = out[5], out[6], out[7], out[10], out[11]
    assert "after 2" in listed and "#1 in line" in listed, listed
    assert "#1 in" in shown and "starts" in shown, shown
    assert "job 4: high" in reprioritized
    assert "preempted  once" in first and "preempted by job 4 (high)" in first, first  # (not "1 times": #67)
    assert client.get("/api/v1/jobs/3").json()["status"] == "succeeded"
    assert "on GPUs 0,1" in client.get("/api/v1/jobs/1/logs").text
    assert share.splitlines()[0].split() == ["OWNER", "GPU-HOURS", "SHARE", "GPUS", "RUNNING", "QUEUED", "IDLE-GPU-H"]


def test_backfill_starts_a_short_job_at_once_beside_a_reserved_big_one(stack_of, child_env, tmp_path):
    """Issue 39: the README's backfill example, as written, on two fake GPUs."""
    client = stack_of(2)
    env = {**child_env, "GPUDECK_API": client.url, "PATH": f"{os.path.dirname(sys.executable)}:{child_env['PATH']}"}
    (tmp_path / "readme").mkdir()
    out = run_block("walkthrough-backfill", urlparse(client.url).port, tmp_path / "readme", env)
    first, big, short = (status(client, i) for i in (1, 2, 3))
    assert short["status"] == "succeeded" and big["status"] == "succeeded", (short, big)
    stamp = lambda job, key: datetime.fromisoformat(job[key].replace("Z", "+00:00")).timestamp()  # noqa: E731
    assert stamp(short, "ended_at") <= stamp(big, "started_at")  # the short one ran in the gap, before the big one
    assert stamp(first, "ended_at") <= stamp(big, "started_at") + 1  # which started once job 1 gave its GPU back
    shown = out[4]  # `gpudeck show 2` while it waited: its reservation, and what it is expected to take
    assert "queued" in shown and "starts" in shown and "expected  10s (as declared)" in shown, shown
