"""Warm starts (issue 41 §1): a worker that ran a zoo job keeps a trainer ready, in its sandbox, with TensorFlow
imported and no GPU visible; the next zoo job starts in it, on its own GPU; one job per warm trainer; an upgrade,
a dead warm trainer or a job that cannot use it means a cold start, and no job is lost. A real worker on a FAKE
GPU (a fake nvidia-smi on PATH; none exists here)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from jobs.run import warm
from tests.support.live import alive, environ, fake_gpus, fake_nvidia_smi, group_gone, until, wait_job

# One xdist group with tests/jobs/test_warm.py's code-version test: a test here moves models/warm.py's time to make its
# worker's warm trainer stale, and a warm trainer another test's worker made meanwhile was let go as stale too (its
# job then started cold: "warm_start is False" in a full make test).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("warm")]

SPEC = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 4, "batch_size": 8, "log_every": 2}}


def parked(redis) -> bool:
    """Whether the worker waits for its next job (its connection blocked in RQ's BLMOVE): it looks at its warm
    trainer (lets a stale or dead one go, makes the next) just before each wait, so that look is behind it and the
    next is at the next job's fork. (RQ's `idle` state is set before that look, when the work-horse exits.)"""
    db = str(redis.connection_pool.connection_kwargs.get("db", 0))
    return any(
        c.get("cmd") == "blmove" and "b" in c.get("flags", "") and str(c.get("db")) == db for c in redis.client_list()
    )


def above(pid: int, stop: int) -> list[int]:
    """The processes above `pid`, up to (not with) `stop`."""
    chain = []
    while True:
        parent = int(Path(f"/proc/{chain[-1] if chain else pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if parent in (stop, 0, 1):
            return chain
        chain.append(parent)


def warm_trainers(home: Path) -> dict[int, dict[str, str]]:
    """The warm trainers of this test's worker (the `python -m models.warm` inside each sandbox) and what each
    one's environment was at its start."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            env = environ(int(entry))
        except OSError:
            continue
        if argv[1:4] == [b"-P", b"-m", b"models.warm"]:  # (not its shim, which runs it, nor bubblewrap)
            if Path(f"/proc/{entry}/cwd").resolve().is_relative_to(home / "warm"):
                found[int(entry)] = env
    return found


def log_of(client, job_id: int) -> str:
    return client.get(f"/api/v1/jobs/{job_id}/logs").get_data(as_text=True)


def test_a_zoo_job_starts_in_the_warm_trainer_its_worker_made_once_per_job_on_its_own_gpu(
    client, spawn, child_env, settings, tmp_path, redis
):
    fake_nvidia_smi(tmp_path / "bin", fake_gpus(2))
    env = {**child_env, "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}", "GPUDECK_WARM": "on"}
    worker = spawn("worker", "--gpus", "1", env=env)
    until(lambda: client.get("/api/v1/workers").json["workers"], 30, "the worker")  # (then jobs ask for a GPU)
    first = client.post("/api/v1/jobs", json=SPEC).json["id"]
    job, _ = wait_job(client, first, timeout=40)
    assert job["status"] == "succeeded" and job["warm_start"] is False, (job, worker.output()[-3000:])

    # Having run a zoo job, the worker keeps a trainer ready: sandboxed as the job user, no GPU visible, no job yet.
    ready = until(lambda: warm_trainers(settings.home), 60, "a warm trainer")
    (pid, seen), *more = ready.items()
    assert not more
    assert seen["CUDA_VISIBLE_DEVICES"] == "" and seen["GPUDECK_JOB_ID"] == "0"
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    assert status["Uid"].split()[0] != "0" or os.geteuid() != 0  # (the job user, where the worker is root)
    assert int(status["CapEff"], 16) == 0
    # what it costs is said: its worker's entry, /metrics (issue 65 #4)
    kept = until(lambda: client.get("/api/v1/workers").json["workers"][0]["warm"], 30, "the warm trainer reported")
    assert kept["pid"] == [pid, *above(pid, worker.proc.pid)][-1]  # (its sandbox's first process: the worker's child)
    assert kept["rss_bytes"] > 20 << 20  # (a Python with its imports under way: tens of MiB at least)
    text = client.get("/metrics").get_data(as_text=True)
    assert "gpudeck_warm_trainers 1.0" in text and 'gpudeck_warm_memory_bytes{worker="' in text, text[-2000:]

    second = client.post("/api/v1/jobs", json=SPEC).json["id"]
    job, _ = wait_job(client, second)
    assert job["status"] == "succeeded" and job["warm_start"] is True, (job, worker.output()[-3000:])
    text = log_of(client, second)
    assert "gpudeck: warm start" in text
    assert text.split("CUDA_VISIBLE_DEVICES=")[1].split()[0] == "1" == job["gpu_ids"][0]  # read when it began
    job_dir = settings.job_dir(second)
    assert (job_dir / "result.json").exists() and (job_dir / "log.txt").read_text().splitlines() == text.splitlines()
    assert not alive(pid)  # one job, then it exited
    again = until(lambda: warm_trainers(settings.home), 60, "the next warm trainer")
    assert pid not in again and len(again) == 1
    left = sorted(p.name for p in (settings.home / "warm").iterdir())
    assert len(left) == 1, left  # (the used one's folder is the job dir now; the next one's is there)

    # A warm trainer killed while it waits loses no job: the next one starts cold. (The one made at the last job's
    # start, with the worker idle: nothing else of the worker's moves it then.)
    until(lambda: parked(redis), 30, "the worker waiting for its next job")
    (pid,) = again
    sandbox = [pid, *above(pid, worker.proc.pid)]  # (it, its shim, its bubblewrap: the worker's child)
    os.kill(pid, signal.SIGKILL)
    until(lambda: not any(alive(p) for p in sandbox), 10, "the warm trainer and its sandbox gone")
    third = client.post("/api/v1/jobs", json=SPEC).json["id"]
    job, _ = wait_job(client, third)
    assert job["status"] == "succeeded" and job["warm_start"] is False, (job, worker.output()[-3000:])

    # An upgrade (the trainer's code changed on disk) lets the warm trainer go: the job starts cold, and succeeds.
    until(lambda: warm_trainers(settings.home), 60, "the warm trainer made at its start")
    until(lambda: parked(redis), 30, "the worker waiting for its next job")
    source = Path(warm.__file__).parents[2] / "models" / "warm.py"
    before = source.stat()
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    try:
        fourth = client.post("/api/v1/jobs", json=SPEC).json["id"]
        job, _ = wait_job(client, fourth)
    finally:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert job["status"] == "succeeded" and job["warm_start"] is False, job
    assert "gpudeck: warm start" not in log_of(client, fourth)
    assert "let go: the trainer's code changed since it was made" in worker.output()


def test_a_retried_job_starts_warm_from_its_checkpoint_a_canceled_one_stops_and_gpudeck_warm_off_keeps_none(
    client, spawn, child_env, settings, redis
):
    worker = spawn("worker", "--cpu", env={**child_env, "GPUDECK_WARM": "on"})
    first = client.post("/api/v1/jobs", json=SPEC).json["id"]
    assert wait_job(client, first)[0]["status"] == "succeeded"
    until(lambda: warm_trainers(settings.home), 60, "a warm trainer")
    retried = client.post(f"/api/v1/jobs/{first}/retry").json["id"]
    job, _ = wait_job(client, retried)
    assert job["status"] == "succeeded" and job["warm_start"] is True, job
    text = log_of(client, retried)
    assert f"resuming from the last checkpoint of job {first}" in text and "gpudeck: warm start" in text
    assert "resumed from checkpoints/ckpt-4 at step 4" in text  # (the trainer found them in its folder: the job dir)
    assert (settings.job_dir(retried) / "checkpoints" / "checkpoint").exists()

    # A warm-started job is stopped as a cold one: SIGTERM to its process group (bubblewrap's, which is the
    # worker's child, not its work-horse's), a checkpoint, its exit status read from bubblewrap's status pipe.
    long = {**SPEC, "params": {**SPEC["params"], "steps": 100000}}
    running = client.post("/api/v1/jobs", json=long).json["id"]
    job, _ = wait_job(client, running, lambda j: (j["progress"]["step"] or 0) >= 4)
    assert job["warm_start"] is True
    assert client.post(f"/api/v1/jobs/{running}/cancel").status_code == 200
    job, _ = wait_job(client, running, timeout=60)
    assert job["status"] == "canceled" and job["reason"] == "canceled", job
    assert "stopped at step" in log_of(client, running)
    until(lambda: group_gone(int(redis.hget(f"gpudeck:job:{running}", "pid"))), 10, "its process group gone")
    assert list((settings.job_dir(running) / "checkpoints").glob("ckpt-*.index"))

    # Its worker stopped, its warm trainer goes with it; a worker with GPUDECK_WARM=off keeps none (the worker
    # starts the next one as it forks a zoo job's work-horse: it would be there once the job ended).
    worker.stop(timeout=60)  # (its own end, not the test's SIGKILL, takes the warm trainer)
    until(lambda: not warm_trainers(settings.home), 30, "the warm trainer gone with its worker")
    spawn("worker", "--cpu", env={**child_env, "GPUDECK_WARM": "off"})
    third = client.post("/api/v1/jobs", json=SPEC).json["id"]
    job, _ = wait_job(client, third)
    assert job["status"] == "succeeded" and job["warm_start"] is False
    assert not warm_trainers(settings.home)
