"""`gpudeck session attach`'s side of a session's terminal (models.terminal's wire; jobs.run.terminal serves it):
this terminal in raw mode, its keystrokes and size to the session, the session's output here, until the session's
shell is gone (the session ended) or Ctrl-] (detached: the session goes on)."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import sys
import termios
import tty
from dataclasses import dataclass

from models import terminal


class AttachError(Exception):
    """The session's terminal could not be reached, or refused this client."""


@dataclass
class Attached:
    """How an attachment ended: `detached` (Ctrl-]) or the session's terminal closed."""

    detached: bool


def local_host(host: str) -> bool:
    """Whether a session on `host` (the worker's name for its host, or the address it advertises) runs on this
    machine, to be attached to directly rather than through ssh: one of this machine's names, the name this
    machine's workers advertise where the client shares their environment, or an address one of its interfaces
    has (a socket can be bound to it)."""
    if host in {socket.gethostname(), socket.getfqdn(), "localhost"}:
        return True
    if host == os.environ.get("GPUDECK_ADVERTISE_HOST"):  # (a client in the shell that runs this host's workers)
        return True
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        return False
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((address, 0))
            return True
        except OSError:
            continue
    return False


def _size(fd: int) -> tuple[int, int]:
    try:
        cols, rows = os.get_terminal_size(fd)
        return rows, cols
    except OSError:
        return 24, 80


def connect(port: int, secret: str, rows: int, cols: int, host: str = "127.0.0.1") -> socket.socket:
    """A connection to a session's terminal that the session accepted."""
    try:
        sock = socket.create_connection((host, port), timeout=10)
    except OSError as exc:
        raise AttachError(f"cannot reach the session's terminal at {host}:{port}: {exc.strerror or exc}") from None
    sock.sendall(terminal.hello(secret, rows, cols))
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        answer += chunk
    if answer != b"OK\n":
        sock.close()
        raise AttachError(f"the session refused: {answer.decode(errors='replace').strip()[3:] or 'it has ended'}")
    sock.settimeout(None)
    return sock


def attach(port: int, secret: str, stdin: int | None = None, stdout: int | None = None) -> Attached:
    """Attach this process's terminal to a session's until it ends or the user detaches."""
    stdin = sys.stdin.fileno() if stdin is None else stdin
    stdout = sys.stdout.fileno() if stdout is None else stdout
    sock = connect(port, secret, *_size(stdin))
    on_tty = os.isatty(stdin)
    saved = termios.tcgetattr(stdin) if on_tty else None
    wake_r, wake_w = os.pipe()
    previous = signal.signal(signal.SIGWINCH, lambda *_: os.write(wake_w, b"w")) if on_tty else None
    sel = selectors.DefaultSelector()
    sel.register(stdin, selectors.EVENT_READ, "in")
    sel.register(sock, selectors.EVENT_READ, "out")
    sel.register(wake_r, selectors.EVENT_READ, "winch")
    try:
        if on_tty:  # (TCSANOW, not setraw's default TCSAFLUSH: what was typed while attaching is kept and sent)
            tty.setraw(stdin, termios.TCSANOW)
        while True:
            for key, _ in sel.select():
                if key.data == "out":
                    chunk = sock.recv(65536)
                    if not chunk:
                        return Attached(detached=False)
                    os.write(stdout, chunk)
                elif key.data == "in":
                    chunk = os.read(stdin, 65536)
                    if not chunk:  # (input closed: a script's end) the session goes on
                        return Attached(detached=True)
                    if terminal.DETACH_KEY in chunk:
                        before = chunk.split(terminal.DETACH_KEY, 1)[0]
                        if before:
                            sock.sendall(terminal.frame(terminal.DATA, before))
                        return Attached(detached=True)
                    sock.sendall(terminal.frame(terminal.DATA, chunk))
                else:
                    os.read(wake_r, 64)
                    sock.sendall(terminal.frame(terminal.RESIZE, terminal.size_payload(*_size(stdin))))
    except OSError:  # the connection broke: the session (or its worker) went away
        return Attached(detached=False)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        if previous is not None:
            signal.signal(signal.SIGWINCH, previous)
        sel.close()
        sock.close()
        os.close(wake_r)
        os.close(wake_w)
