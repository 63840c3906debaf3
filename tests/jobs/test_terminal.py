"""A session's terminal relay (jobs.run.terminal) with a real shell on a real pseudo-terminal, and real attach clients
(tui.attach's connect, models.terminal's frames): no Redis, no worker."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
import time

import pytest

from jobs.run import terminal
from models import terminal as wire
from tests.support.live import until
from tui.attach import AttachError, attach, connect


@pytest.fixture
def relay():
    master, slave = terminal.open_pty()
    log_r, log_w = os.pipe()
    shell = subprocess.Popen(
        ["/bin/sh", "-i"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=terminal.controlling_terminal,
        env={"PATH": os.environ["PATH"], "PS1": "$ "},
    )
    os.close(slave)
    r = terminal.Relay(master, log_w).start()
    yield r, shell, log_r
    if shell.poll() is None:
        shell.kill()
    shell.wait(10)
    r.join(10)
    os.close(log_r)


def received(sock: socket.socket, words: bytes, timeout: float = 10.0) -> bytes:
    sock.settimeout(0.2)
    seen = b""

    def more() -> bool:
        nonlocal seen
        try:
            seen += sock.recv(65536)
        except TimeoutError:
            pass
        return words in seen

    until(more, timeout, lambda: f"{words!r} from the terminal; it sent {seen[-500:]!r}", every=0)
    return seen


def test_clients_with_the_secret_share_the_terminal_and_the_shell_sees_their_window(relay):
    r, _, _ = relay
    with pytest.raises(AttachError, match="wrong secret"):
        connect(r.port, "not-it", 24, 80)
    half = socket.create_connection(("127.0.0.1", r.port))
    half.sendall(b"GPUDECK-ATT")  # gone mid-hello: the relay goes on
    half.close()
    one, two = connect(r.port, r.secret, 40, 100), connect(r.port, r.secret, 40, 100)
    assert r.attached == 2 and r.idle_s() == 0
    one.sendall(wire.frame(wire.RESIZE, wire.size_payload(33, 91)))
    one.sendall(wire.frame(wire.DATA, b"stty size; echo shared-$((6*7))\r"))
    assert b"33 91" in received(two, b"shared-42")  # what one typed, the other sees; the shell sees the new size
    two.close()
    until(lambda: r.attached == 1, 10, "one client left")
    late = connect(r.port, r.secret, 24, 80)  # one attaching later is shown what happened meanwhile
    received(late, b"shared-42")
    one.close()
    late.close()
    until(lambda: r.attached == 0, 10, "nobody attached")
    time.sleep(0.2)
    assert r.idle_s() >= 0.2


def test_what_was_typed_while_attaching_reaches_the_shell(relay):
    """A user types before the session's terminal is theirs (the prompt not shown yet): attach keeps that type-ahead
    on its own terminal and sends it, not a raw mode that flushes it."""
    r, _, _ = relay
    watcher = connect(r.port, r.secret, 24, 80)
    mine, theirs = terminal.open_pty()  # (the user's terminal: `theirs` is attach's stdin, in cooked mode)
    out_r, out_w = os.pipe()
    os.write(mine, b"echo ahead-$((6*7))\r")
    time.sleep(0.2)  # (the line typed and echoed on the user's terminal before attach takes it)
    seen: list[bytes] = []

    def watch() -> None:  # (attach runs in the main thread: it handles SIGWINCH)
        try:
            seen.append(received(watcher, b"ahead-42"))
        finally:
            os.write(mine, wire.DETACH_KEY)

    watching = threading.Thread(target=watch)
    watching.start()
    try:
        ended = attach(r.port, r.secret, theirs, out_w)
    finally:
        watching.join(20)
        watcher.close()
        for fd in (mine, theirs, out_r, out_w):
            os.close(fd)
    assert seen and ended.detached


def test_a_client_that_vanishes_while_the_shell_writes_ends_nothing(relay):
    r, shell, _ = relay
    gone = connect(r.port, r.secret, 24, 80)
    stays = connect(r.port, r.secret, 24, 80)
    stays.sendall(wire.frame(wire.DATA, b"i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i+1)); done\r"))
    gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    gone.close()  # (a reset, mid-output: the relay's next send to it fails)
    received(stays, b"line-2999")
    until(lambda: r.attached == 1, 10, "the vanished client dropped")
    stays.sendall(wire.frame(wire.DATA, b"echo still-$((2*21))\r"))
    received(stays, b"still-42")
    assert shell.poll() is None and not r.done.is_set()
    stays.close()


def test_the_relay_ends_with_the_shell_and_its_lines_are_the_log(relay):
    r, shell, log_r = relay
    client = connect(r.port, r.secret, 24, 80)
    r.say("session 7 idle: released in 10s")
    received(client, b"gpudeck: session 7 idle: released in 10s")
    client.sendall(wire.frame(wire.DATA, b"exit\r"))
    assert shell.wait(10) == 0
    assert r.done.wait(10)  # every holder of the terminal gone: the relay ends, its log pipe closes
    log = b""
    while chunk := os.read(log_r, 65536):
        log += chunk
    assert b"a client attached (1 attached)" in log and b"session 7 idle: released in 10s" in log
    client.close()


def test_a_hangup_ends_the_shell_and_nothing_is_written_after(relay):
    r, shell, _ = relay
    time.sleep(0.3)  # (the shell up)
    r.hangup()
    assert r.done.wait(10)
    assert shell.wait(10) != 0  # SIGHUP
    spare_r, spare_w = os.pipe()  # (its closed descriptors' numbers may be reused: nothing may reach them)
    try:
        r.say("too late")
        r.note("too late")
        r.hangup()
        os.set_blocking(spare_r, False)
        with pytest.raises(BlockingIOError):
            os.read(spare_r, 100)
    finally:
        os.close(spare_r)
        os.close(spare_w)
