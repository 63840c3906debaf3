"""Starting gpudeck's own Python modules as child processes."""

from __future__ import annotations

import ctypes
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
