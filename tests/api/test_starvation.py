"""Issue 23 #5: nobody starves the API without a token. Against a real `gpudeck api` (gunicorn, 2 processes of 256
threads): 600 half-sent requests (slowloris) and then 520 clients that never read a download, each with the
issue's numbers; /healthz answers in under 2 s all along, the half-sent ones are closed once their head is late,
and the downloads beyond a client address's share are refused with 429 instead of holding threads."""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack
from urllib.parse import urlparse

import pytest
import requests

from api.guard import HEAD_S
from jobs import control
from tests.support.live import start_api

pytestmark = pytest.mark.slow


def healthz_times(url: str, n: int = 5) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        assert requests.get(f"{url}/healthz", timeout=10).status_code in (200, 503)
        times.append(time.monotonic() - t0)
    return times


def test_slow_senders_and_slow_readers_starve_nothing(spawn, child_env, settings, redis):
    url = start_api(spawn, child_env)
    host, port = urlparse(url).hostname, urlparse(url).port
    rec, _ = control.submit(redis, {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}})
    job_dir = settings.job_dir(rec["id"])
    job_dir.mkdir(parents=True)
    (job_dir / "big.bin").write_bytes(b"\0" * (8 << 20))  # far more than a socket's buffers hold
    with ExitStack() as stack:
        slow = []
        for _ in range(600):
            s = stack.enter_context(socket.create_connection((host, port), timeout=10))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finished
            slow.append(s)
        assert max(healthz_times(url)) < 2.0
        time.sleep(HEAD_S + 3)
        closed = 0
        for s in slow:
            s.settimeout(0.2)
            try:
                closed += s.recv(1) == b""
            except (TimeoutError, OSError):
                pass
        assert closed == len(slow), f"{closed} of {len(slow)} half-sent requests closed after {HEAD_S:g}s"

        readers, refused = [], 0
        for _ in range(520):
            s = stack.enter_context(socket.create_connection((host, port), timeout=10))
            s.sendall(f"GET /api/v1/jobs/{rec['id']}/files/big.bin HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            readers.append(s)  # and never read
        assert max(healthz_times(url)) < 2.0
        for s in readers:
            s.settimeout(2)
            try:
                refused += s.recv(64).startswith(b"HTTP/1.1 429")
            except (TimeoutError, OSError):
                pass
        assert refused >= 520 - 2 * 56, refused  # beyond one address's share of each process: 429 at once
        assert max(healthz_times(url)) < 2.0
