"""Long polls (`/logs?follow=1`, `/wait`) under gunicorn's thread workers: each holds a server thread while it is
open, so an API process admits at most `threads - RESERVED_THREADS` of them (short requests always find a free
thread), at most a quarter of those from one client address (one script cannot take them all), and each one
looks at its client's socket about once a second and ends as soon as the client has gone (an abandoned long poll
gives its thread back in a second or two, not when its job or timeout ends).

Why threads and not an event loop (gevent): the API's other routes do real work in the request (archive
extraction, hashing an upload, parsing a long run's metrics), which would stall every connection of an
event-loop process; a thread that waits on a socket costs a stack and no CPU, so a few hundred of them per
process are cheap.
"""

from __future__ import annotations

import select
import socket
import threading
from collections import Counter

from jobs.errors import TooMany

THREADS = 256
"""Server threads per API process (`gpudeck api --threads`)."""
RESERVED_THREADS = 32
"""Threads of each process that long polls never take."""
PER_CLIENT_SHARE = 4
"""One client address may hold 1/PER_CLIENT_SHARE of a process's long polls."""
RETRY_AFTER_S = 5

_POLLRDHUP = getattr(select, "POLLRDHUP", 0)
_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL | _POLLRDHUP


class Slots:
    """The long polls one process admits: `total` in all, `per_client` per client address."""

    def __init__(self, threads: int = THREADS) -> None:
        self.total = max(1, threads - RESERVED_THREADS)
        self.per_client = max(1, self.total // PER_CLIENT_SHARE)
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()

    def acquire(self, client: str) -> None:
        """Take a slot for `client`, or TooMany saying which limit was hit and what to do instead."""
        with self._lock:
            if sum(self._held.values()) >= self.total:
                why = f"this API process already serves {self.total} long polls (log follows, waits and downloads)"
            elif self._held[client] >= self.per_client:
                why = (
                    f"{client} already holds {self.per_client} long polls (log follows, waits and downloads) of this "
                    "API process"
                )
            else:
                self._held[client] += 1
                return
        raise TooMany(
            f"{why}; poll with offset= or a shorter wait, close the ones you no longer read, or try again later "
            "(a download resumes with a Range)",
            {"retry_after_s": RETRY_AFTER_S},
        )

    def release(self, client: str) -> None:
        with self._lock:
            self._held[client] -= 1
            if self._held[client] <= 0:
                del self._held[client]

    def held(self) -> int:
        with self._lock:
            return sum(self._held.values())


def held_while_sent(response, slots: Slots, client: str):
    """`response` with a slot of `slots` taken for `client` until it has been sent (or its client went): a
    download or a follow holds a thread that long (TooMany when no slot is free)."""
    slots.acquire(client)
    released = threading.Event()

    def release() -> None:  # once, whether the body ran to its end, was closed, or never started
        if not released.is_set():
            released.set()
            slots.release(client)

    response.call_on_close(release)
    return response


def client_gone(environ: dict) -> bool:
    """True once the client of this request has closed its connection (or reset it). Looks without reading or
    blocking: a socket with nothing to read is a client still waiting; one that is readable and yields no byte
    at a peek has sent its FIN. Outside gunicorn (the test client) there is no socket and nobody goes away."""
    sock = environ.get("gunicorn.socket")
    if sock is None:
        return False
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN | _POLLRDHUP)
        events = poller.poll(0)
        if not events:
            return False
        if events[0][1] & _GONE:
            return True
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):  # closed under us: gone
        return True
