"""`make bench-gpu`: what this box's GPUs do with gpudeck (issue 44 §4), for the first real GPU box. `gpudeck up` on
the host's own GPUs (no fake here), one ResNet-56 job per GPU at once on synthetic CIFAR-sized data with mixed
precision and XLA (GPUDECK_GPU_BENCH_STEPS, 300, batch 128): each job's images/s and GPU, the total, whether each
ran on its own GPU and saw it (TensorFlow's `gpus_seen`), and `gpudeck doctor --no-job`. Where nvidia-smi lists no
GPU it says so and skips: a CPU says nothing about a GPU box."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from jobs.gpus import list_gpus
from jobs.run.proc import python_module
from tests.support.live import until
from tests.support.stack import Up

STEPS = int(os.environ.get("GPUDECK_GPU_BENCH_STEPS", "300"))


def test_resnet56_on_every_gpu_at_once_with_mixed_precision_and_xla(tmp_path):
    gpus = list_gpus()
    if not gpus:
        pytest.skip("nvidia-smi lists no GPU here: make bench-gpu measures a GPU box")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUDECK_", "REDIS_URL"))}
    env |= {"PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "PYTHONUNBUFFERED": "1"}
    up = Up(tmp_path / "home", env, tmp_path / "up.log")
    try:
        until(lambda: len(requests.get(f"{up.url}/api/v1/workers", timeout=10).json()["workers"]) == len(gpus), 120)
        params = {"steps": STEPS, "batch_size": 128, "mixed_precision": True, "xla": True, "log_every": 50}
        spec = {"model": "resnet56", "dataset": "synthetic", "params": params, "gpus": 1, "name": "bench-gpu"}
        ids = [requests.post(f"{up.url}/api/v1/jobs", json=spec, timeout=30).json()["id"] for _ in gpus]
        jobs = [requests.get(f"{up.url}/api/v1/jobs/{i}/wait?timeout=3600", timeout=3700).json() for i in ids]
        doctor = subprocess.run(
            python_module("tui.cli", "doctor", "--no-job"),
            env=env | {"GPUDECK_API": up.url},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        up.kill()
    print(f"\nResNet-56, batch 128, {STEPS} steps, mixed precision + XLA, one job per GPU at once:")
    total = 0.0
    for job in jobs:
        result = job.get("result") or {}
        rate = result.get("images_per_sec") or 0.0
        total += rate
        print(f"  job {job['id']}: {job['status']} on GPU {','.join(job.get('gpu_ids') or [])}, "
              f"{rate:,.0f} images/s, TensorFlow saw {result.get('gpus_seen')} GPU(s)")  # fmt: skip
    print(f"  total {total:,.0f} images/s on {len(gpus)} GPU(s)")
    print(doctor.stdout)
    assert all(j["status"] == "succeeded" for j in jobs), [j.get("message") for j in jobs]
    assert sorted(g for j in jobs for g in j["gpu_ids"]) == sorted(g["index"] for g in gpus)  # each its own
    assert all((j.get("result") or {}).get("gpus_seen") == 1 for j in jobs)  # pinned: exactly its GPU
