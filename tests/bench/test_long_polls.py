"""Short requests while hundreds of long polls are open (issue 17 #1): /healthz and a job read, p50/p95 with 200
abandoned and 200 live long polls against the same API with none open (the baseline, measured in the same run,
interleaved). Bar: p95 <= 50 ms under load.

    make bench PYTEST_ARGS="-k long_polls"
"""

from __future__ import annotations

import statistics
import time

import requests

from jobs.redis_server import free_port
from tests.support.live import QUEUED, open_poll, status_of, submit_job, wait_http

PROBES = 200


def probe(session: requests.Session, urls: list[str]) -> list[float]:
    out = []
    for i in range(PROBES):
        t0 = time.perf_counter()
        assert session.get(urls[i % len(urls)], timeout=5).status_code == 200
        out.append(time.perf_counter() - t0)
    return out


def pct(times: list[float], q: float) -> float:
    return statistics.quantiles(times, n=100)[int(q) - 1] * 1000


def test_short_requests_stay_fast_with_400_long_polls(spawn, child_env):
    port = free_port()
    api = spawn("api", "--port", str(port), env=child_env)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz", api)
    job = submit_job(url, QUEUED)
    urls = [f"{url}/healthz", f"{url}/api/v1/jobs/{job}"]
    paths = [f"/api/v1/jobs/{job}/logs?follow=1", f"/api/v1/jobs/{job}/wait?timeout=600"]
    session = requests.Session()
    rows = []
    for round_ in range(3):
        base = probe(session, urls)
        for i in range(200):  # abandoned: asked, then gone
            open_poll(port, paths[i % 2], f"127.0.1.{i % 20 + 1}").close()
        live = [open_poll(port, paths[i % 2], f"127.0.2.{i % 10 + 1}") for i in range(200)]
        assert [status_of(s) for s in live[::2]] == [200] * 100
        loaded = probe(session, urls)
        open_ = requests.get(f"{url}/healthz", timeout=5).json()["long_polls"]
        for s in live:
            s.close()
        rows.append((pct(base, 50), pct(base, 95), pct(loaded, 50), pct(loaded, 95)))
        print(
            f"round {round_}: none open p50 {rows[-1][0]:.1f} ms p95 {rows[-1][1]:.1f} ms | 200 abandoned + 200 live "
            f"p50 {rows[-1][2]:.1f} ms p95 {rows[-1][3]:.1f} ms (answering process held {open_['open']})"
        )
        time.sleep(3)  # the closed ones are noticed gone
    p95 = statistics.median(r[3] for r in rows)
    ratio = statistics.median(r[3] / r[1] for r in rows)
    print(f"p95 under load: median {p95:.1f} ms over 3 rounds; loaded/idle p95 ratio {ratio:.2f}")
    assert p95 <= 50
