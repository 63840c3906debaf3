"""Benchmark: what several users cost (issue 15), each against a baseline in the same run.

1. Auth per request: GET /api/v1/jobs p50/p95 on an API whose Redis holds 1,000 named tokens (each request sends
   one of them) against the same API on a Redis without tokens (nobody is asked), requests interleaved in
   blocks. Target: at most 1 ms added at p95.
2. Scheduling with quotas: submit -> start (the record's started_at - created_at) of one-GPU jobs of a user
   under a quota (--max-gpus 1, one job at a time) against the same jobs of a user without one, on one worker
   pinned to a FAKE GPU (none exists here), interleaved. Target: p50 unchanged within noise.

Not run by `make test`. Run: make bench PYTEST_ARGS="-k users"
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import pytest
import requests
from redis import Redis

from jobs import tokens
from jobs.redis_server import EmbeddedRedis, free_port
from jobs.run.proc import python_module

N_TOKENS = 1000
BLOCKS, PER_BLOCK = 10, 100
N_PAIRS = int(os.environ.get("GPUDECK_BENCH_PAIRS", "15"))
MODEL = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}, "gpus": 0, "name": "listed"}
QUICK = {"command": [sys.executable, "-c", "pass"], "gpus": 1}


def _env(tmp_path, redis_url: str, name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUDECK_", "REDIS_URL"))}
    env.update(REDIS_URL=redis_url, GPUDECK_HOME=str(tmp_path / name), PYTHONUNBUFFERED="1")
    return env


def _start(argv: list[str], env: dict[str, str], log) -> subprocess.Popen:
    return subprocess.Popen(python_module("tui.cli", *argv), env=env, stdout=log, stderr=subprocess.STDOUT)


def _up(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, f"{url} did not start"
        try:
            if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            time.sleep(0.1)


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[max(0, int(q * len(values)) - 1)]


@pytest.mark.timeout(900)
def test_auth_cost_with_1000_named_tokens_and_submit_to_start_under_a_quota(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis", port=free_port(), appendonly=False)
    base_url = server.start().rsplit("/", 1)[0]
    procs: list[subprocess.Popen] = []
    log = open(tmp_path / "stack.log", "wb")  # noqa: SIM115 - closed below
    try:
        # -- 1. auth per request ------------------------------------------------------------------
        plain_url, named_url = f"{base_url}/0", f"{base_url}/1"
        named_redis = Redis.from_url(named_url)
        made = [tokens.create(named_redis, f"user{i:04d}") for i in range(N_TOKENS)]
        apis = {}
        for kind, redis_url in (("none", plain_url), ("named", named_url)):
            port = free_port()
            procs.append(_start(["api", "--port", str(port)], _env(tmp_path, redis_url, kind), log))
            apis[kind] = f"http://127.0.0.1:{port}"
        for kind, url in apis.items():
            _up(url, procs[-1 if kind == "named" else -2])
        headers = {"none": {}, "named": {"Authorization": f"Bearer {made[N_TOKENS // 2]}"}}
        sessions = {kind: requests.Session() for kind in apis}
        for kind, url in apis.items():
            for _ in range(50):
                sessions[kind].post(f"{url}/api/v1/jobs", json=MODEL, headers=headers[kind], timeout=10)
        times: dict[str, list[float]] = {"none": [], "named": []}
        for block in range(BLOCKS):
            for kind in ("none", "named") if block % 2 == 0 else ("named", "none"):
                for _ in range(PER_BLOCK):
                    t0 = time.perf_counter()
                    resp = sessions[kind].get(f"{apis[kind]}/api/v1/jobs?limit=20", headers=headers[kind], timeout=10)
                    times[kind].append((time.perf_counter() - t0) * 1000)
                    assert resp.status_code == 200 and len(resp.json()["jobs"]) == 20
        for kind in ("none", "named"):
            print(
                f"\nGET /api/v1/jobs?limit=20, auth {kind}: p50 {statistics.median(times[kind]):.2f} ms, "
                f"p95 {_pct(times[kind], 0.95):.2f} ms over {len(times[kind])}"
            )
        added = _pct(times["named"], 0.95) - _pct(times["none"], 0.95)
        print(f"named-token auth with {N_TOKENS} tokens stored adds {added:+.2f} ms at p95 (target <= 1 ms)")
        for p in procs:
            p.terminate()
            p.wait(10)
        procs.clear()

        # -- 2. submit -> start under a quota -----------------------------------------------------
        redis_url = f"{base_url}/2"
        redis = Redis.from_url(redis_url)
        limited = {"Authorization": f"Bearer {tokens.create(redis, 'alice', max_gpus=1)}"}
        free = {"Authorization": f"Bearer {tokens.create(redis, 'bob')}"}
        env = _env(tmp_path, redis_url, "quota")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        procs.append(_start(["api", "--port", str(port)], env, log))
        procs.append(_start(["worker", "--gpus", "0"], env, log))
        _up(url, procs[0])
        session = requests.Session()

        def start_latency(who: dict) -> float:
            job_id = session.post(f"{url}/api/v1/jobs", json=QUICK, headers=who, timeout=10).json()["id"]
            job = session.get(f"{url}/api/v1/jobs/{job_id}/wait?timeout=60", headers=who, timeout=70).json()
            assert job["status"] == "succeeded", job
            raw = redis.hmget(f"gpudeck:job:{job_id}", "created_at", "started_at")
            return (float(raw[1]) - float(raw[0])) * 1000

        start_latency(free)  # (the worker's first job warms it up)
        pairs = []
        for i in range(N_PAIRS):
            order = (free, limited) if i % 2 == 0 else (limited, free)
            got = {id(w): start_latency(w) for w in order}
            pairs.append((got[id(free)], got[id(limited)]))
        base, ours = [b for b, _ in pairs], [o for _, o in pairs]
        print(
            f"\nsubmit -> start p50: no quota {statistics.median(base):.0f} ms, under a quota "
            f"{statistics.median(ours):.0f} ms (ratio {statistics.median(ours) / statistics.median(base):.2f}; "
            f"p95 {_pct(base, 0.95):.0f} / {_pct(ours, 0.95):.0f} ms) over {N_PAIRS} pairs"
        )
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        log.close()
        server.stop()
