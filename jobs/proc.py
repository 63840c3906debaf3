"""Starting gpudeck's own Python modules as child processes."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def python_module(module: str, *args: str) -> list[str]:
    """argv for `python -m module args`, without the current directory on sys.path (Python >= 3.11),
    so a user's own `models/` or `api/` folder where they ran gpudeck cannot shadow ours."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, "-m", module, *args]


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
