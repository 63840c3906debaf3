"""Starting gpudeck's own Python modules as child processes, and ending every process a job started."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Protocol

PR_SET_PDEATHSIG = 1


class Started(Protocol):
    """An attempt's process as the work-horse watches it: a subprocess.Popen it started, or a warm trainer it was
    handed (jobs.run.warm.Adopted). `pid` leads its process group."""

    pid: int
    stdout: IO[bytes] | None

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


SHIM = "jobs.run.shim"
"""The module a job's sandbox starts first, by name (usage tells its processes apart by SHIM_FILE)."""
SHIM_FILE = str(Path(__file__).resolve().with_name("shim.py"))
"""The shim's file: run as `python -I -S SHIM_FILE …` (jobs.run.sandbox.wrap), with no module search path, site or
variable of the job's before it drops its privileges."""


def python_module(module: str, *args: str) -> list[str]:
    """argv for `python -m module args`, without the current directory on sys.path (Python >= 3.11),
    so a user's own `models/` or `api/` folder where they ran gpudeck cannot shadow ours."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, "-m", module, *args]


SPAWNING = threading.Lock()
"""Held while a thread starts a child process that the thread then waits on (output_of), and by a worker while it
forks a work-horse (jobs.worker): a fork without exec copies every descriptor of the process, so a work-horse forked
while the GPU sampler's thread started `dmesg` kept that Popen's exec-error pipe open for its whole job, and the
sampler's round waited on it for as long (a running job's CPU % and GPU samples stopped coming). The forked child
gets it free (its copy was taken by the fork's thread, which goes on in the child and never lets it go)."""


def _free_in_child() -> None:
    if SPAWNING.locked():
        SPAWNING.release()


os.register_at_fork(after_in_child=_free_in_child)


def output_of(argv: list[str], timeout: float) -> str:
    """What `argv` prints on stdout, as `subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
    check=True).stdout` gives it, but never after more than `timeout`: it runs in a session of its own, its output
    goes to a file rather than a pipe, and on timeout its whole process group is killed. (subprocess.run kills only
    the process and then waits for its pipes' end: a child it left holding them — a wedged nvidia-smi's helper, a
    script's `tr` stuck reading a process's /proc — kept the GPU sampler's round waiting for good.) Raises OSError,
    subprocess.TimeoutExpired or subprocess.CalledProcessError as subprocess.run does."""
    with tempfile.TemporaryFile() as out:
        with SPAWNING:  # (until the child has exec'd: Popen returns then)
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL, start_new_session=True
            )
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        if code != 0:
            raise subprocess.CalledProcessError(code, argv)
        out.seek(0)
        return out.read().decode(errors="replace")


def pdeathsig() -> None:
    """preexec_fn: the child gets SIGTERM when the thread that started it exits (Linux prctl)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def kill_marked(name: str, value: str, sig: int = signal.SIGKILL) -> list[int]:
    """Signal every process of ours whose environment holds `name=value` (what a job started, even outside its
    process group); the pids signalled."""
    mark = f"{name}={value}".encode()
    hit = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if mark not in f.read().split(b"\0"):
                    continue
            os.kill(int(entry), sig)
            hit.append(int(entry))
        except (OSError, ProcessLookupError):  # gone, or not ours to read
            continue
    return hit


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux prctl): a job's process that double-forks
    or calls setsid still ends up below the work-horse, where end_descendants finds it. False where not possible."""
    return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1) == 0


def _parents() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        out[int(entry)] = int(stat.rsplit(b")", 1)[1].split()[1])  # (the name may hold spaces and parentheses)
    return out


def descendants(pid: int) -> set[int]:
    """Every living process below `pid`."""
    parents = _parents()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier and p not in found}
        found |= frontier
    return found


def end_descendants(keep: frozenset[int] = frozenset(), rounds: int = 50) -> int:
    """SIGKILL every process below this one but `keep`, again and again until none is left (a process that forks
    every few milliseconds cannot outrun it: each round kills what the last one missed, and an orphan comes up to
    this process, a subreaper, to be reaped). `keep` is neither killed nor reaped (a child whose exit status is
    still to be read). How many were killed."""
    killed = 0
    for _ in range(rounds):
        below = descendants(os.getpid()) - keep
        if not below:
            break
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.005)
        for pid in below:  # our children among them (the others come up to us once their parents are gone)
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
    return killed


def running(pid: int, marker: bytes | None = None) -> bool:
    """Whether a process (not necessarily our child) runs: not a zombie, and, given `marker`, with it in its
    command line (a recycled pid is not the one we started)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes() if marker is not None else b""
    except OSError:
        return False
    return state not in ("Z", "X") and (marker is None or marker in cmd)


def stop_pid(pid: int, grace: float, alive=running) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds if `alive(pid)` still holds, to a process that is not our
    child (nothing to wait on: it is watched through /proc)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    if alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def listening_pids(port: int) -> set[int]:
    """The processes holding a socket that listens on TCP `port` (IPv4 or IPv6), read from /proc: who would receive
    what is sent there."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    found: set[int] = set()
    for entry in os.listdir("/proc") if inodes else ():
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
            if any(os.readlink(f"/proc/{entry}/fd/{fd}") in inodes for fd in fds):
                found.add(int(entry))
        except OSError:
            continue
    return found
