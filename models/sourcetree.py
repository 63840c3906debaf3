"""The content digest of a source tree, computed the same way by `gpudeck run` (before it uploads) and by the
API (after it extracts the upload), so the same tree always has the same `src:<sha256>` ref whatever archive
carried it, and a client can ask whether the server already holds it.

It lives in `models`, the one package every other may import (like `models.protocol`); it imports nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

REF_PREFIX = "src:"
REF = re.compile(r"src:([0-9a-f]{64})")


def files(root: Path) -> list[str]:
    """Every regular file and symlink under `root`, as sorted POSIX paths relative to it (folders are implied)."""
    found = []
    for here, dirs, names in os.walk(root):
        rel = os.path.relpath(here, root)
        for name in names + [d for d in dirs if os.path.islink(os.path.join(here, d))]:
            found.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
    return sorted(found)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def digest(root: Path, names: list[str] | None = None) -> str:
    """sha256 over `names` (default: `files(root)`), each as its path, kind, executable bit and content hash (a
    symlink: its target). Timestamps, owners and archive order do not count."""
    h = hashlib.sha256()
    for name in sorted(files(root) if names is None else names):
        path = root / name
        if path.is_symlink():
            line = f"l\0{name}\0{os.readlink(path)}\n"
        else:
            x = "x" if os.stat(path).st_mode & 0o111 else "-"
            line = f"f\0{name}\0{x}\0{_file_sha256(path)}\n"
        h.update(line.encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def ref(sha256: str) -> str:
    """The ref a job names a stored source by."""
    return REF_PREFIX + sha256


def parse_ref(value: str) -> str | None:
    """The sha256 of a `src:<sha256>` ref, or None when `value` is not one."""
    m = REF.fullmatch(value)
    return m.group(1) if m else None


def human(n: float) -> str:
    """A byte count for people: 532 B, 1.4 MiB, 3.0 GiB (source sizes, downloads, disk space)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
