"""A session's terminal on its worker, Redis-free: the pseudo-terminal its shell runs on, and the relay that lets
`gpudeck session attach` clients (models.terminal's wire, on 127.0.0.1) type into it and see it, several at once,
for as long as the shell lives. The relay knows who is attached and when somebody last typed: what a session's
idle rule reads (jobs.run.sessionrun)."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import pty
import secrets
import selectors
import socket
import struct
import termios
import threading
import time

from models import terminal

log = logging.getLogger(__name__)

SCROLLBACK_BYTES = 16_384
"""The newest output a client is shown when it attaches (the prompt, what the shell printed meanwhile)."""
SEND_TIMEOUT_S = 5.0
"""A client that takes nothing for this long is dropped (the others and the shell go on)."""


def open_pty(rows: int = 24, cols: int = 80) -> tuple[int, int]:
    """(master, slave) of a new pseudo-terminal of that size."""
    master, slave = pty.openpty()
    set_size(master, rows, cols)
    return master, slave


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def controlling_terminal() -> None:
    """In a child, after setsid and before exec: its stdin (the slave) becomes its controlling terminal, so a
    shell there has job control and Ctrl-C reaches what runs in its foreground."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Relay:
    """Serves the master side of a pseudo-terminal to attach clients until the terminal is gone (every process
    holding its slave ended). `log_w`: a pipe the relay writes its own lines to (who attached, what it says) and
    closes at the end: the job's log and the end of the attempt for jobs.run.pump."""

    def __init__(self, master: int, log_w: int, secret: str | None = None):
        self.master = master
        self.log_w = log_w
        self.secret = secret or secrets.token_urlsafe(24)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.scrollback = bytearray()
        self.clients: dict[socket.socket, bytearray] = {}
        self.pending: dict[socket.socket, bytearray] = {}  # connected, hello not read yet
        self.last_seen = time.monotonic()
        """When somebody was last attached or typed (monotonic)."""
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._said: list[bytes] = []
        self._hangup = False
        self.done = threading.Event()
        self._sel = selectors.DefaultSelector()
        self._thread = threading.Thread(target=self._loop, name="gpudeck-terminal", daemon=True)

    def start(self) -> Relay:
        self._thread.start()
        return self

    @property
    def attached(self) -> int:
        return len(self.clients)

    def idle_s(self) -> float:
        """Seconds since somebody was last attached or typed (0 while attached)."""
        if self.clients:
            return 0.0
        return time.monotonic() - self.last_seen

    def say(self, text: str) -> None:
        """A line from gpudeck on the terminal (every attached client, and whoever attaches next) and in the log;
        nothing once the terminal is gone."""
        with self._lock:
            self._said.append(text.encode())
            self._wake(b"s")

    def hangup(self) -> None:
        """End the terminal: its master closes, the shell gets SIGHUP (a stop of the session)."""
        with self._lock:
            self._hangup = True
            self._wake(b"h")

    def note(self, line: str) -> None:
        """A line in the job's log only (while the terminal lives)."""
        with self._lock:
            if not self.done.is_set():
                self._log(line.encode())

    def _wake(self, what: bytes) -> None:
        if not self.done.is_set():  # (under the lock: the loop closes its descriptors under it too)
            os.write(self._wake_w, what)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # -- the loop ------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        sel = self._sel
        sel.register(self.master, selectors.EVENT_READ, "master")
        sel.register(self.listener, selectors.EVENT_READ, "listen")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while True:
                for key, _ in sel.select(1.0):
                    if key.data == "master":
                        try:
                            chunk = os.read(self.master, 65536)
                        except OSError as exc:  # EIO: no process holds the slave any more
                            if exc.errno != errno.EIO:
                                raise
                            chunk = b""
                        if not chunk:
                            return
                        self._out(chunk)
                    elif key.data == "listen":
                        try:
                            conn, _ = self.listener.accept()
                        except OSError:  # (the client gave up before we took it)
                            continue
                        conn.settimeout(SEND_TIMEOUT_S)
                        self.pending[conn] = bytearray()
                        sel.register(conn, selectors.EVENT_READ, "client")
                    elif key.data == "wake":
                        os.read(self._wake_r, 4096)
                        with self._lock:
                            said, self._said = self._said, []
                        for line in said:
                            self._out(b"\r\ngpudeck: " + line + b"\r\n")
                            self._log(line)
                        if self._hangup:
                            return
                    else:
                        self._from_client(key.fileobj)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 (a relay that breaks ends the session as a hang-up; the horse goes on)
            log.exception("session terminal relay failed")
        finally:
            for conn in [*self.clients, *self.pending]:
                conn.close()
            self.clients.clear()
            self.pending.clear()
            sel.close()
            self.listener.close()
            with self._lock:  # (no say, hangup or note writes to a descriptor closed here, or reused)
                os.close(self.master)  # (the shell, if any is left, is hung up)
                os.close(self.log_w)  # the attempt's "output" ends: jobs.run.pump returns once the process has too
                for fd in (self._wake_r, self._wake_w):
                    os.close(fd)
                self.done.set()

    def _out(self, chunk: bytes) -> None:
        self.scrollback += chunk
        del self.scrollback[: max(0, len(self.scrollback) - SCROLLBACK_BYTES)]
        for conn in list(self.clients):
            try:
                conn.sendall(chunk)
            except OSError:
                self._drop(conn)

    def _log(self, line: bytes) -> None:
        try:
            os.write(self.log_w, line + b"\n")
        except OSError:
            pass

    def _drop(self, conn: socket.socket) -> None:
        """A client gone (or refused): out of the loop's selector, closed; the session goes on."""
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        if self.clients.pop(conn, None) is not None:
            self.last_seen = time.monotonic()
            self._log(b"gpudeck: a client detached (%d attached)" % len(self.clients))
        self.pending.pop(conn, None)
        conn.close()

    def _from_client(self, conn: socket.socket) -> None:
        try:
            chunk = conn.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        if conn in self.pending:
            buffer = self.pending[conn]
            buffer += chunk
            if b"\n" not in buffer:
                if len(buffer) > 1024:
                    self._drop(conn)
                return
            line, _, rest = bytes(buffer).partition(b"\n")
            said = terminal.parse_hello(line)
            if said is None or not secrets.compare_digest(said[0].encode(), self.secret.encode()):
                try:
                    conn.sendall(b"NO wrong secret: ask the API for this session's (gpudeck session attach ID)\n")
                except OSError:
                    pass
                self._drop(conn)
                return
            del self.pending[conn]
            self.clients[conn] = bytearray(rest)
            self.last_seen = time.monotonic()
            self._log(b"gpudeck: a client attached (%d attached)" % len(self.clients))
            set_size(self.master, said[1], said[2])
            tail = bytes(self.scrollback)
            cut = tail.find(b"\n") if len(tail) >= SCROLLBACK_BYTES else -1  # (a full one: from a line's start)
            try:
                conn.sendall(b"OK\n" + tail[cut + 1 :])
            except OSError:  # (gone already: the session goes on)
                self._drop(conn)
                return
            chunk = b""
        buffer = self.clients[conn]
        buffer += chunk
        try:
            for kind, payload in terminal.frames(buffer):
                if kind == terminal.DATA:
                    self.last_seen = time.monotonic()
                    os.write(self.master, payload)
                else:
                    size = terminal.parse_size(payload)
                    if size is not None:
                        set_size(self.master, *size)
        except ValueError:
            self._drop(conn)
