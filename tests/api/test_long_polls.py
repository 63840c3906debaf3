"""Long polls (log follows, waits) against a real gunicorn API: clients that go away give their threads back,
the API keeps answering while hundreds are open, and one client address cannot take every slot.

Connections are raw sockets, each from a loopback address of its own choosing (127.0.0.0/8 is all local on
Linux), so a test can be many clients at once without threads."""

from __future__ import annotations

import socket
import time

import pytest
import requests

from jobs.redis_server import free_port
from tests.support.live import QUEUED, open_poll, status_of, submit_job, until, wait_http

pytestmark = pytest.mark.slow


def healthz_times(url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
        out.append(time.monotonic() - t0)
    return out


def test_two_hundred_abandoned_and_two_hundred_live_long_polls_leave_the_api_answering(spawn, child_env):
    port = free_port()
    api = spawn("api", "--port", str(port), env=child_env)  # the default: 2 processes
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz", api)
    job = submit_job(url, QUEUED)
    paths = [f"/api/v1/jobs/{job}/logs?follow=1", f"/api/v1/jobs/{job}/wait?timeout=600"]

    # 200 clients that ask and go away (curl --max-time 2), from 20 addresses
    for i in range(200):
        sock = open_poll(port, paths[i % 2], f"127.0.1.{i % 20 + 1}")
        time.sleep(0.002)
        sock.close()
    # 200 that stay, from 10 other addresses
    live = [open_poll(port, paths[i % 2], f"127.0.2.{i % 10 + 1}") for i in range(200)]
    follows = live[::2]
    assert [status_of(s) for s in follows] == [200] * len(follows)  # every live follow was admitted

    times = sorted(healthz_times(url, 40))  # each within 5 s, or requests raises
    print(f"/healthz with 200 live long polls open: p50 {times[20] * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms")
    # the waits are still open: nothing has answered them
    for sock in live[1::2]:
        sock.settimeout(0)
        with pytest.raises(BlockingIOError):
            sock.recv(1)
    for sock in live:
        sock.close()


def test_a_client_address_has_a_share_a_process_a_total_and_a_closed_poll_frees_its_slot(spawn, child_env):
    """One process of 48 threads: 16 long polls at most (32 threads stay for short requests), 4 per address."""
    port = free_port()
    api = spawn("api", "--port", str(port), "--workers", "1", "--threads", "48", env=child_env)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz", api)
    job = submit_job(url, QUEUED)
    follow, wait = f"/api/v1/jobs/{job}/logs?follow=1", f"/api/v1/jobs/{job}/wait?timeout=600"

    def code(source: str, path: str = follow) -> int:
        """The status a new long poll from `source` gets (the connection is closed again)."""
        sock = open_poll(port, path, source)
        try:
            return status_of(sock)
        finally:
            sock.close()

    a = [open_poll(port, follow, "127.0.3.1") for _ in range(4)]
    assert [status_of(s) for s in a] == [200] * 4
    assert code("127.0.3.1", wait) == 429  # a fifth from the same address
    b = open_poll(port, follow, "127.0.3.2")
    assert status_of(b) == 200  # another address is not held to the first one's share

    # follows whose client went away give their slots back within a couple of seconds
    for sock in a:
        sock.close()
    t0 = time.monotonic()

    def four_again() -> list[socket.socket] | None:
        again = [open_poll(port, follow, "127.0.3.1") for _ in range(4)]
        if [status_of(s) for s in again] == [200] * 4:
            return again
        for s in again:
            s.close()
        return None

    a = until(four_again, 15, "the closed follows' four slots freed", every=2.5)  # a try holds slots ~1 s
    print(f"the slots of four closed follows were free again after {time.monotonic() - t0:.1f}s")

    # so do waits (which answer nothing until they end): four hold the share of their address…
    waits = [open_poll(port, wait, "127.0.3.3") for _ in range(4)]
    until(lambda: code("127.0.3.3") == 429, 10, "four open waits holding their address's share", every=0.2)
    for sock in waits:  # …and give it back when their clients go
        sock.close()
    until(lambda: code("127.0.3.3") == 200, 10, "a closed wait's slot freed", every=0.2)

    # the process's total: 4 + 1 held (once the probes above are noticed gone), 11 more make 16; the next
    # address is refused
    until(lambda: requests.get(f"{url}/healthz", timeout=10).json()["long_polls"]["open"] == 5, 10, "5 open")
    more = [open_poll(port, follow, f"127.0.4.{i // 4 + 1}") for i in range(11)]
    assert [status_of(s) for s in more] == [200] * 11
    refused = requests.get(f"{url}{follow}", timeout=10)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "5"
    assert "already serves 16 long polls" in refused.json()["message"]
    assert healthz_times(url, 10)  # with every long poll taken, short requests still have their threads
    for sock in [*a, b, *more]:
        sock.close()
