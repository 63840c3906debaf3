"""`python -m jobs.shim FD -- ARGV…`: the first process of a job inside its sandbox (jobs.sandbox).

bubblewrap ignores SIGTERM (so that it outlives a stop and hands on the job's exit status), and that disposition
would be inherited; the shim gives the job SIGTERM's default back, starts it in the same process group (a stop
is a SIGTERM to that group, from the work-horse), and waits for it. FD is the read end of the work-horse's
lifeline: when the work-horse dies (killed, crashed), the pipe reads end-of-file and the shim asks the job to
stop as a cancel does — SIGTERM, so a trainer checkpoints, then SIGKILL after GRACE_ENV seconds — so a job never
outlives the work-horse that answers for it. It exits with the job's status (a signal's death as 128 + N, which
bubblewrap passes on as it is).

It imports nothing but the standard library: it runs before anything of the job.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

GRACE_ENV = "GPUDECK_STOP_GRACE"
"""Seconds the job has after SIGTERM (models.protocol's name for the trainer's own grace)."""


def main(argv: list[str]) -> int:
    fd, sep, *command = argv
    if sep != "--" or not command:
        print("usage: python -m jobs.shim FD -- COMMAND…", file=sys.stderr)
        return 2
    lifeline = int(fd)
    job = subprocess.Popen(command, pass_fds=_inherited(lifeline), preexec_fn=_default_term)
    os.set_blocking(lifeline, False)
    stopping_since: float | None = None
    grace = float(os.environ.get(GRACE_ENV) or 30) + 5
    while job.poll() is None:
        if stopping_since is None:
            ready, _, _ = select.select([lifeline], [], [], 0.5)
            if ready and _closed(lifeline):  # the work-horse is gone: stop as a cancel would
                stopping_since = time.monotonic()
                _signal_group(signal.SIGTERM)
        elif time.monotonic() - stopping_since > grace:
            _signal_group(signal.SIGKILL)
            break
        else:
            time.sleep(0.2)
    code = job.wait()
    if stopping_since is not None:  # the work-horse, which ends what a job leaves, is gone: the shim does
        _end_the_rest()
    return 128 - code if code < 0 else code


def _end_the_rest(limit_s: float = 2.0) -> None:
    """SIGKILL every other process of the sandbox's PID namespace (what the job left outside its process group: a
    daemon that called setsid, a double fork), until none is left or `limit_s` passed. Only inside bubblewrap's
    namespace, whose PID 1 is bubblewrap's: outside it, this would be every process of the machine."""
    try:
        if b"bwrap" not in open("/proc/1/cmdline", "rb").read():
            return
    except OSError:
        return
    me = os.getpid()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def _inherited(lifeline: int) -> tuple[int, ...]:
    """The descriptors the job inherits as they were given to the shim (the trainer's events pipe), not the
    lifeline itself."""
    fds = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd != lifeline:
            try:
                os.fstat(fd)
                fds.append(fd)
            except OSError:
                pass
    return tuple(fds)


def _default_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _closed(fd: int) -> bool:
    try:
        return os.read(fd, 1) == b""
    except BlockingIOError:
        return False


def _signal_group(sig: int) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (the shim itself waits on)
    try:
        os.killpg(0, sig)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
