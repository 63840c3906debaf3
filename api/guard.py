"""gunicorn's thread worker, guarded against clients that send or read slowly (issue 23 #5).

- **Slow senders** (slowloris: a request's head trickled in a byte at a time): gunicorn's thread worker parses a
  request's head in a server thread, blocking, so a few hundred half-sent requests took every thread and
  `/healthz` with them. Here the head is gathered by the worker's event loop, which costs no thread: a connection
  reaches a thread only once its head is complete (or over HEAD_MAX bytes, for the parser to refuse), and one
  whose head is not complete HEAD_S after it started sending is closed.
- **Slow readers** (a download nobody reads): every send and receive of a served connection gives up after
  IO_TIMEOUT_S without progress, so such a client holds its thread that long at most; downloads also take one of
  the stream slots long polls take (api.longpoll), so one address cannot hold more than its share at once.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time
from collections import deque
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn.workers.gthread import ThreadWorker

HEAD_S = 10.0
"""A request's head (request line and headers) must be complete this long after it began to arrive."""
HEAD_MAX = 64 * 1024
"""Bytes of a head gathered at most: past this the parser has enough to refuse it (431/400)."""
IO_TIMEOUT_S = 30.0
"""A served connection's send or receive that makes no progress for this long ends the connection."""


class GuardedThreadWorker(ThreadWorker):
    """ThreadWorker whose connections reach a thread only with a complete request head."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.heading: deque = deque()

    def enqueue_req(self, conn) -> None:
        if getattr(conn, "head_ready", False) or conn.is_http2 or self._buffered_head(conn):
            conn.head_ready = False  # (the next request on this connection is gathered again)
            super().enqueue_req(conn)
            return
        if not getattr(conn, "timed", False):  # at the kernel's level: gunicorn sets the socket blocking itself
            limit = struct.pack("ll", int(IO_TIMEOUT_S), 0)
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
            conn.timed = True
        conn.sock.setblocking(False)
        conn.head = bytearray()
        conn.head_deadline = time.monotonic() + HEAD_S
        self.heading.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_head_bytes, conn))

    @staticmethod
    def _buffered_head(conn) -> bool:
        """A request read ahead on a kept-alive connection, already whole in the parser's buffer."""
        return conn.parser is not None and b"\r\n\r\n" in conn.parser.unreader.buf.getvalue()

    def _on_head_bytes(self, conn, sock) -> None:
        try:
            chunk = sock.recv(HEAD_MAX)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client went away
            self._drop(conn)
            return
        conn.head += chunk
        if b"\r\n\r\n" not in conn.head and len(conn.head) < HEAD_MAX:
            return
        self._unlist(conn)
        if conn.parser is None:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader.unread(bytes(conn.head))
        conn.head = bytearray()
        conn.data_ready = conn.head_ready = True
        super().enqueue_req(conn)

    def _unlist(self, conn) -> None:
        try:
            self.poller.unregister(conn.sock)
        except (OSError, KeyError, ValueError):
            pass
        try:
            self.heading.remove(conn)
        except ValueError:
            pass

    def _drop(self, conn) -> None:
        self._unlist(conn)
        self.nr_conns -= 1
        conn.close()

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        while self.heading and self.heading[0].head_deadline <= now:
            self._drop(self.heading[0])
