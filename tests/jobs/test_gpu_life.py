"""A job's GPUs over its life (issue 44 §3, part): what nvidia-smi read of the GPUs a job holds, every sample,
added up on its record and its owner's idle GPU-hours, against a real Redis with the samples the test gives."""

from __future__ import annotations

from jobs import usage
from jobs.forecast import share_table
from jobs.store import JobStore
from jobs.views import job_view
from tests.support.policy import DEFAULTS


def test_a_jobs_gpu_utilization_over_its_life_and_its_owners_idle_gpu_hours(redis, client):
    store = JobStore(redis)
    store.create(1, {"model": "lenet", "gpus": 1}, "gpus-1", extra={"owner": "alice"})
    store.create(2, {"model": "lenet", "gpus": 2}, "gpus-2", extra={"owner": "bob"})
    held = {1: ("alice", ["0"]), 2: ("bob", ["1", "2"])}
    for util0, util2 in ((90, 1), (90, 3), (2, 50), (2, 50)):  # four samples, 2 s apart
        gpus = [
            {"index": 0, "utilization": util0},
            {"index": 1, "utilization": None},  # ([N/A]: not counted)
            {"index": 2, "utilization": util2},
        ]
        usage.account(redis, "box", held, gpus, 2.0)
    alice, bob = job_view(store.get(1))["gpu_life"], job_view(store.get(2))["gpu_life"]
    assert alice == {"mean_percent": 46.0, "idle_percent": 50.0, "gpu_seconds": 8.0}, alice
    assert bob == {"mean_percent": 26.0, "idle_percent": 50.0, "gpu_seconds": 8.0}, bob
    store.create(3, {"model": "lenet", "gpus": 1}, "gpus-1")
    assert job_view(store.get(3))["gpu_life"] is None  # (no reading yet)
    table = {o["owner"]: o["idle_gpu_hours"] for o in share_table(redis, DEFAULTS)}
    assert table == {"alice": round(4 / 3600, 3), "bob": round(4 / 3600, 3)}, table  # (two idle samples each)
    assert usage.idle_gpu_hours(redis) == {"alice": 4 / 3600, "bob": 4 / 3600}
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'gpudeck_idle_gpu_seconds_total{owner="alice"} 4.0' in metrics
    assert 'gpudeck_idle_gpu_seconds_total{owner="bob"} 4.0' in metrics
