"""Benchmark (issue 46 §3): what uploading checkpoints to an object store costs training. Not run by `make test`.

Run: make bench PYTEST_ARGS="-k artifacts_upload -s"
ResNet-20 on synthetic CIFAR-sized data, GPUDECK_UPLOAD_BENCH_STEPS (400) steps of batch 32, a checkpoint every
GPUDECK_UPLOAD_BENCH_EVERY (100) steps, through one CPU worker with GPUDECK_ARTIFACTS off and one with it on,
GPUDECK_UPLOAD_BENCH_PAIRS (4) interleaved pairs; the trainer's own images/s (its result) on ÷ off, per pair and
the median. The store is moto's S3 server on 127.0.0.1 in a process of its own at nice 15 (a store elsewhere
costs this box nothing; one here at the trainer's priority measures moto's CPU, not gpudeck's).
"""

from __future__ import annotations

import os
import statistics

import pytest

from tests.support.live import until
from tests.support.s3 import s3_store

STEPS = int(os.environ.get("GPUDECK_UPLOAD_BENCH_STEPS", "400"))
PAIRS = int(os.environ.get("GPUDECK_UPLOAD_BENCH_PAIRS", "4"))
EVERY = int(os.environ.get("GPUDECK_UPLOAD_BENCH_EVERY", "100"))
SPEC = {
    "model": "resnet20",
    "dataset": "synthetic",
    "params": {"steps": STEPS, "batch_size": 32, "log_every": 25},
    "checkpoint_every": EVERY,
    "gpus": 0,
}


@pytest.mark.timeout(7200)
def test_artifacts_upload_overhead_on_training(client, spawn, child_env):
    rates: dict[bool, list[float]] = {False: [], True: []}
    uploaded = []
    with s3_store(process=True) as s3:
        for _ in range(PAIRS):
            for on in (False, True):
                env = {**child_env, **(s3.env if on else {}), "GPUDECK_WARM": "off"}
                worker = spawn("worker", "--cpu", env=env)
                until(lambda: client.get("/api/v1/workers").json["workers"], 30, "the worker")
                job_id = client.post("/api/v1/jobs", json=SPEC).json["id"]
                job = client.get(f"/api/v1/jobs/{job_id}/wait?timeout=1800").json
                assert job["status"] == "succeeded", job
                rates[on].append(job["result"]["images_per_sec"])
                if on:
                    assert job["artifacts"]["error"] is None, job["artifacts"]
                    uploaded.append(job["artifacts"]["files"])
                worker.stop()
                until(lambda: not client.get("/api/v1/workers").json["workers"], 30, "the worker gone")
    ratios = [on / off for off, on in zip(rates[False], rates[True])]
    print(f"\nResNet-20, {STEPS} steps of 32, a checkpoint every {EVERY} steps, images/s (the trainer's):")
    for n, (off, on) in enumerate(zip(rates[False], rates[True])):
        print(f"  pair {n + 1}: off {off:.1f}  on {on:.1f}  on/off {on / off:.3f}")
    print(f"  median on/off {statistics.median(ratios):.3f}; files uploaded per job {uploaded}")
