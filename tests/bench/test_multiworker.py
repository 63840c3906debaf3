"""Benchmarks of multi-worker jobs (not run by `make test`); figures printed for the closing note.

Run: make bench PYTEST_ARGS="-k multiworker"   (two CPU workers on this box)
1. submit -> every trainer started: a 2-task job (placement, rendezvous, TF_CONFIG) next to a single job
   through the same workers, p50 / p95 over 10 jobs each.
2. training images/s of a 2-task MultiWorkerMirrored job next to the same job as one task, same global batch
   (on one 2-core box the tasks share the cores: this measures gpudeck's and the collectives' overhead),
   interleaved over GPUDECK_BENCH_PAIRS (5) pairs.
"""

import statistics

import pytest

from jobs import gang
from jobs.record import Kept
from jobs.store import JobStore
from tests.support import ratio

TINY = {"model": "resnet20", "dataset": "synthetic:8x8x3:4", "params": {"steps": 1, "batch_size": 8}}


@pytest.fixture
def two_workers(spawn, child_env):
    return [spawn("worker", "--cpu", "--name", f"bench{i}.cpu", env=child_env) for i in range(2)]


def run(client, spec: dict) -> dict:
    job = client.post("/api/v1/jobs", json=spec).json
    job = client.get(f"/api/v1/jobs/{job['id']}/wait?timeout=3600").json
    assert job["status"] == "succeeded", job
    return job


def spawn_latency(redis, job: dict) -> float:
    rec = JobStore(redis).get(job["id"])
    if not Kept(rec["spec"]).multi_worker:
        return rec["spawned_at"] - rec["created_at"]
    return max(t["spawned_at"] for t in gang.tasks(redis, job["id"], rec["spec"]["workers"])) - rec["created_at"]


def summary(lat: list[float]) -> str:
    lat = sorted(lat)
    return f"p50 {statistics.median(lat) * 1000:.0f} ms, p95 {lat[int(0.95 * len(lat)) - 1] * 1000:.0f} ms"


@pytest.mark.timeout(1800)
def test_multiworker_submit_to_all_trainers_started(client, two_workers, redis):
    single = [spawn_latency(redis, run(client, TINY)) for _ in range(10)]
    multi = [spawn_latency(redis, run(client, {**TINY, "workers": 2})) for _ in range(10)]
    print(
        f"\nsubmit -> every trainer started: single job {summary(single)}; 2-task job {summary(multi)}; "
        f"ratio of p50s {statistics.median(multi) / statistics.median(single):.2f}"
    )


@pytest.mark.timeout(3600)
def test_multiworker_training_throughput(client, two_workers):
    spec = {"model": "resnet20", "dataset": "synthetic", "params": {"steps": 80, "batch_size": 64, "log_every": 20}}
    samples = ratio.interleave(
        lambda: run(client, spec)["result"]["images_per_sec"],
        lambda: run(client, {**spec, "workers": 2})["result"]["images_per_sec"],
    )
    print(f"\nresnet20 batch 64 on 2 cores, two tasks vs one task: {ratio.summary(samples)}")
