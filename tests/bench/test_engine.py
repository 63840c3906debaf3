"""Benchmarks of the job engine (not run by `make test`); figures printed for the closing note.

Run: make bench PYTEST_ARGS="-k engine"
1. submit -> training process started: p50 and p95 over 50 jobs on one idle worker.
2. short jobs through one worker: jobs per second.
3. training images/s with log and metric streaming on (through a worker, a metric point every step)
   vs off (the same trainer run standalone, output to a file), interleaved over GPUDECK_BENCH_PAIRS (5) pairs;
   each run's slowest log window and longest gap between points tell a stall from a slow machine.
   Target overhead <= 3%.
"""

import json
import statistics
import subprocess
import time

import pytest

from jobs.run.proc import python_module
from jobs.store import JobStore
from tests.support import ratio

TINY = {"model": "resnet20", "dataset": "synthetic:8x8x3", "params": {"steps": 1, "batch_size": 8}}


def wait(client, job_id: int) -> dict:
    """Block in the API's /wait (it re-reads the record 4 times a second), not a busy client-side poll that
    would take CPU from the training being measured."""
    job = client.get(f"/api/v1/jobs/{job_id}/wait?timeout=3600").json
    assert job["status"] == "succeeded", job
    return job


@pytest.mark.timeout(1800)
def test_engine_submit_to_process_start_latency(client, worker, redis):
    store = JobStore(redis)
    lat = []
    for _ in range(50):
        job_id = client.post("/api/v1/jobs", json=TINY).json["id"]
        wait(client, job_id)
        rec = store.get(job_id)
        lat.append(rec["spawned_at"] - rec["created_at"])
    lat.sort()
    p95 = lat[int(0.95 * len(lat)) - 1]
    print(
        f"\nsubmit -> trainer process started over {len(lat)} jobs: p50 {statistics.median(lat) * 1000:.1f} ms, "
        f"p95 {p95 * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms"
    )


@pytest.mark.timeout(1800)
def test_engine_short_jobs_per_second(client, worker):
    n = 20
    t0 = time.monotonic()
    ids = [client.post("/api/v1/jobs", json=TINY).json["id"] for _ in range(n)]
    for i in ids:
        wait(client, i)
    took = time.monotonic() - t0
    print(
        f"\n{n} one-step jobs through one worker: {took:.1f} s, {n / took:.3f} jobs/s "
        f"({took / n:.2f} s a job, mostly the trainer's TensorFlow start-up)"
    )


@pytest.mark.timeout(3600)
def test_engine_streaming_overhead(client, worker, tmp_path):
    spec = {
        "model": "resnet20",
        "dataset": "synthetic",
        "params": {"steps": 150, "batch_size": 128, "log_every": 1, "seed": 0},
    }
    runs = iter(range(10**6))
    notes: list[str] = []

    def standalone() -> float:
        name = f"off{next(runs)}"
        (tmp_path / f"{name}.json").write_text(json.dumps(spec))
        with open(tmp_path / f"{name}.log", "w") as out:
            subprocess.run(
                python_module(
                    "models.train", "--spec", str(tmp_path / f"{name}.json"), "--job-dir", str(tmp_path / name)
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                check=True,
            )
        points = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        notes.append(f"off: {ratio.windows([p for p in points if 'loss' in p])}")
        return json.loads((tmp_path / name / "result.json").read_text())["images_per_sec"]

    def streamed() -> float:
        job_id = client.post("/api/v1/jobs", json=spec).json["id"]
        job = wait(client, job_id)
        train = client.get(f"/api/v1/jobs/{job_id}/metrics").json["train"]
        assert len(train) == 150
        notes.append(f"on:  {ratio.windows(train)}")
        return job["result"]["images_per_sec"]

    samples = ratio.interleave(standalone, streamed)
    print("\nimages/s with a metric point every step, streamed through a worker vs standalone (off/on):")
    print(ratio.summary(samples, "on/off"))
    print("\n".join(notes))
