"""Benchmark: POST /api/v1/jobs per second, and GET /api/v1/jobs p50/p95 with 10,000 stored jobs, under the
production server (gunicorn, as `gpudeck api` runs it), side by side with rq-dashboard's job listing of the same
10,000 RQ jobs on the same Redis, served by the same gunicorn settings. Not run by `make test`.

Run: make bench PYTEST_ARGS="-k api"   (installs rq-dashboard, prints the figures)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from redis import Redis
from rq import Queue

from jobs.redis_server import EmbeddedRedis, free_port
from jobs.run.proc import python_module

N_JOBS = int(os.environ.get("BENCH_JOBS", "10000"))
CLIENTS = 8
SAMPLES = 300
SPEC = {"model": "resnet20", "dataset": "synthetic", "params": {"steps": 10, "batch_size": 32}}


def _wait(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, f"{url} did not start"
        try:
            if requests.get(url, timeout=1).status_code < 500:
                return
        except requests.RequestException:
            time.sleep(0.1)


def _latencies(session: requests.Session, url: str, n: int = SAMPLES) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        resp = session.get(url, timeout=30)
        times.append((time.perf_counter() - t0) * 1000)
        assert resp.status_code == 200, resp.text[:300]
    times.sort()
    return statistics.median(times), times[int(0.95 * len(times)) - 1]


@pytest.mark.timeout(1800)
def test_api_post_rate_and_list_latency_with_10k_jobs_vs_rq_dashboard(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis", port=free_port(), appendonly=False)
    redis_url = server.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDECK_")}
    env.update(REDIS_URL=redis_url, GPUDECK_HOME=str(tmp_path / "home"))
    api_port, dash_port = free_port(), free_port()
    api = subprocess.Popen(
        python_module("tui.cli", "api", "--port", str(api_port)),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    dash = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-w", "2", "-k", "gthread", "--threads", "8", "-b", f"127.0.0.1:{dash_port}"]
        + ["--chdir", str(Path(__file__).parent), "rqdash_app:app"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api_url, dash_url = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{dash_port}"
    try:
        _wait(f"{api_url}/healthz", api)
        _wait(f"{dash_url}/0/data/queues.json", dash)

        # Baseline for submissions: RQ's own enqueue from Python, no HTTP, no validation.
        redis = Redis.from_url(redis_url)
        q = Queue("baseline", connection=redis)
        t0 = time.perf_counter()
        for _ in range(1000):
            q.enqueue_call("jobs.task.run_job", args=(0,))
        rq_rate = 1000 / (time.perf_counter() - t0)
        q.empty()

        local = __import__("threading").local()

        def post(_: int) -> int:
            if not hasattr(local, "s"):
                local.s = requests.Session()
            resp = local.s.post(f"{api_url}/api/v1/jobs", json=SPEC, timeout=30)
            return resp.status_code

        t0 = time.perf_counter()
        with ThreadPoolExecutor(CLIENTS) as pool:
            codes = list(pool.map(post, range(N_JOBS)))
        post_s = time.perf_counter() - t0
        assert codes.count(201) == N_JOBS
        assert Queue("cpu", connection=redis).count == N_JOBS

        s = requests.Session()
        results = {
            "gpudeck GET /api/v1/jobs?limit=50 (newest page)": _latencies(s, f"{api_url}/api/v1/jobs?limit=50"),
            "gpudeck GET /api/v1/jobs?limit=50&cursor=5000 (middle)": _latencies(
                s, f"{api_url}/api/v1/jobs?limit=50&cursor=5000"
            ),
            "gpudeck GET /api/v1/jobs?status=queued&model=resnet20&limit=50": _latencies(
                s, f"{api_url}/api/v1/jobs?status=queued&model=resnet20&limit=50"
            ),
            "rq-dashboard /0/data/jobs/cpu/queued/50/asc/1.json (first page)": _latencies(
                s, f"{dash_url}/0/data/jobs/cpu/queued/50/asc/1.json"
            ),
            # 30 samples: this one takes seconds per request at 10,000 jobs.
            "rq-dashboard /0/data/jobs/cpu/queued/50/asc/100.json (middle)": _latencies(
                s, f"{dash_url}/0/data/jobs/cpu/queued/50/asc/100.json", n=30
            ),
        }
        dash_page = s.get(f"{dash_url}/0/data/jobs/cpu/queued/50/asc/1.json", timeout=30).json()
        assert len(dash_page["jobs"]) == 50  # rq-dashboard really lists the same jobs
        print(
            f"\nPOST /api/v1/jobs: {N_JOBS} jobs in {post_s:.1f} s = {N_JOBS / post_s:.0f} jobs/s "
            f"({CLIENTS} client threads on the same 2 cores); RQ enqueue in-process, no HTTP: {rq_rate:.0f} jobs/s"
        )
        print(f"GET with {N_JOBS} stored jobs, {SAMPLES} sequential requests each unless noted (ms):")
        for name, (p50, p95) in results.items():
            print(f"  {name:<66} p50 {p50:6.2f}  p95 {p95:6.2f}")
        ours = results["gpudeck GET /api/v1/jobs?limit=50 (newest page)"][0]
        theirs = results["rq-dashboard /0/data/jobs/cpu/queued/50/asc/1.json (first page)"][0]
        print(f"  p50 ratio gpudeck newest page / rq-dashboard first page: {ours / theirs:.2f}")
    finally:
        for p in (api, dash):
            p.terminate()
            p.wait(15)
        server.stop()
