"""Benchmark: stored data through the API (`gpudeck api`, gunicorn, real HTTP), each against a baseline in the
same run: a 1 GiB file downloaded with curl vs `cat FILE > /dev/null` (target >= 0.8x; both from the page
cache, warmed first), `gpudeck rm` of 10,000 ended jobs vs `rm -rf` of the same job dirs, and the listing of a job
dir of 10,000 files vs `find -printf` of it. Not run by `make test`.

Run: make bench PYTEST_ARGS="-k storage"
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import threading
import time

import pytest
import requests
from redis import Redis

from jobs import control
from jobs.keys import job_key
from jobs.redis_server import EmbeddedRedis, free_port
from jobs.run.proc import python_module
from jobs.settings import Settings
from jobs.store import JobStore
from tests.support.policy import DEFAULTS

SPEC = {"model": "lenet", "dataset": "synthetic", "params": {"steps": 10}}
N_JOBS = int(os.environ.get("BENCH_JOBS", "10000"))
N_FILES = 10_000
BIG = int(os.environ.get("BENCH_DOWNLOAD_BYTES", str(1 << 30)))


def _floor_server(path) -> tuple[str, threading.Thread]:
    """The least any HTTP server can do on this box: a bare HTTP/1.0 answer with the file sent by sendfile(2),
    four times, on a free port (what curl then takes is the cost of loopback TCP and the client themselves)."""
    sock = socket.create_server(("127.0.0.1", 0))
    size = os.path.getsize(path)

    def serve() -> None:
        for _ in range(4):
            conn, _ = sock.accept()
            with conn, open(path, "rb") as f:
                conn.recv(65536)
                conn.sendall(f"HTTP/1.0 200 OK\r\nContent-Length: {size}\r\n\r\n".encode())
                conn.sendfile(f)
        sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{sock.getsockname()[1]}/big.bin", thread


def _timed(argv: list[str], **kw) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t0


@pytest.fixture
def stack(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis", port=free_port(), appendonly=False)
    redis_url = server.start()
    settings = Settings(home=tmp_path / "home", redis_url=redis_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDECK_")}
    port = free_port()
    env.update(REDIS_URL=redis_url, GPUDECK_HOME=str(settings.home), GPUDECK_API=f"http://127.0.0.1:{port}")
    api = subprocess.Popen(
        python_module("tui.cli", "api", "--port", str(port)),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = env["GPUDECK_API"]
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline and api.poll() is None, "the API did not start"
        time.sleep(0.1)
    yield settings, Redis.from_url(redis_url), url, env
    api.terminate()
    api.wait(15)
    server.stop()


def _ended_job(redis: Redis) -> int:
    rec, _ = control.submit(redis, SPEC, DEFAULTS)
    store = JobStore(redis)
    store.transition(rec["id"], ("queued",), status="running", started_at=time.time() - 10)
    store.transition(rec["id"], ("running",), status="failed", ended_at=time.time() - 5, reason="exit_nonzero")
    return rec["id"]


@pytest.mark.timeout(1800)
def test_storage_download_rm_and_listing_vs_their_plain_baselines(stack):
    settings, redis, url, env = stack
    job = _ended_job(redis)
    job_dir = settings.job_dir(job)
    job_dir.mkdir(parents=True)
    big = job_dir / "big.bin"
    with open(big, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(BIG >> 20):
            f.write(chunk)

    # 1. Download: curl through the API vs cat, both from the page cache (each warmed by a first run).
    _timed(["cat", str(big)])
    cat_s = statistics.median(_timed(["bash", "-c", f"cat {big} > /dev/null"]) for _ in range(3))
    target = f"{url}/api/v1/jobs/{job}/files/big.bin"
    _timed(["curl", "-sf", "-o", "/dev/null", target])
    curl_s = statistics.median(_timed(["curl", "-sf", "-o", "/dev/null", target]) for _ in range(3))
    floor_url, floor = _floor_server(big)
    _timed(["curl", "-sf", "-o", "/dev/null", floor_url])
    floor_s = statistics.median(_timed(["curl", "-sf", "-o", "/dev/null", floor_url]) for _ in range(3))
    floor.join(10)
    gib = BIG / (1 << 30)
    print(
        f"\ndownload {gib:.2f} GiB: curl via the API {curl_s:.2f} s ({gib / curl_s:.2f} GiB/s); "
        f"cat {cat_s:.2f} s ({gib / cat_s:.2f} GiB/s): {cat_s / curl_s:.2f}x of cat; "
        f"curl from a bare sendfile server {floor_s:.2f} s ({gib / floor_s:.2f} GiB/s): {floor_s / curl_s:.2f}x of it"
    )
    big.unlink()

    # 2. Listing a job dir of 10,000 files vs find.
    for i in range(N_FILES):
        (job_dir / f"d{i % 100:02d}").mkdir(exist_ok=True)
        (job_dir / f"d{i % 100:02d}" / f"f{i}.txt").write_bytes(b"x" * (i % 97))
    find_s = statistics.median(_timed(["find", str(job_dir), "-type", "f", "-printf", "%P %s %T@\n"]) for _ in range(5))
    listing = []
    for _ in range(5):
        t0 = time.perf_counter()
        resp = requests.get(f"{url}/api/v1/jobs/{job}/files", timeout=60)
        listing.append(time.perf_counter() - t0)
        assert resp.status_code == 200 and len(resp.json()["files"]) == N_FILES
    list_s = statistics.median(listing)
    print(f"listing {N_FILES} files: API {list_s * 1000:.0f} ms, find {find_s * 1000:.0f} ms ({list_s / find_s:.1f}x)")

    # 3. gpudeck rm of 10,000 ended jobs (each with a small job dir) vs rm -rf of the same dirs.
    pipe_ids = [_ended_job(redis) for _ in range(N_JOBS)]
    for job_id in pipe_ids:
        d = settings.job_dir(job_id)
        d.mkdir(parents=True, exist_ok=True)
        (d / "log.txt").write_bytes(b"line\n" * 20)
        (d / "spec.json").write_text("{}")
    copy = settings.home / "copy"
    subprocess.run(["cp", "-a", str(settings.jobs_dir), str(copy)], check=True)
    rm_rf_s = _timed(["rm", "-rf", str(copy)])
    t0 = time.perf_counter()
    out = subprocess.run(
        python_module("tui.cli", "rm", "--status", "failed", "--older-than", "0s"),
        env=env,
        capture_output=True,
        text=True,
        timeout=1700,
    )
    rm_s = time.perf_counter() - t0
    assert out.returncode == 0 and out.stdout.startswith(f"deleted {N_JOBS + 1} jobs"), out.stdout + out.stderr
    assert not any(redis.exists(job_key(i)) for i in pipe_ids[:100])
    print(
        f"gpudeck rm of {N_JOBS + 1} jobs: {rm_s:.1f} s ({rm_s / (N_JOBS + 1) * 1000:.2f} ms a job); "
        f"rm -rf of the same job dirs {rm_rf_s:.1f} s"
    )
