"""Benchmark: `make up` (venv present) to API ready, and submit -> first training step. Not run by `make test`.

Run: make bench PYTEST_ARGS="-k startup"   (prints the figures)
"""

import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

import requests

from jobs.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_make_up_to_ready_and_submit_to_first_step(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "GPUDECK_HOME")}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        ["make", "-s", "up", f"ARGS=--port {port} --home {tmp_path / 'home'}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.02)
        ready = time.monotonic() - t0
        first_steps = []
        for _ in range(5):
            spec = {
                "model": "resnet20",
                "dataset": "synthetic",
                "params": {"steps": 2, "batch_size": 32, "log_every": 1},
            }
            submitted = time.time()
            job = requests.post(f"{url}/api/v1/jobs", json=spec).json()
            requests.get(f"{url}/api/v1/jobs/{job['id']}/wait?timeout=300")
            first = requests.get(f"{url}/api/v1/jobs/{job['id']}/metrics").json()["train"][0]
            first_steps.append(first["time"] - submitted)
        print(f"\nmake up -> API ready: {ready:.2f} s")
        print(
            f"submit -> first training step done: median {statistics.median(first_steps):.2f} s "
            f"(min {min(first_steps):.2f}, max {max(first_steps):.2f}, n={len(first_steps)})"
        )
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)
