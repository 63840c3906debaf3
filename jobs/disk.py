"""Disk space under GPUDECK_HOME: what is free, what jobs, datasets and Redis take, and the GPUDECK_MIN_FREE
floor below which new jobs and uploads are refused (507) and workers take no new job, so a full disk stops new
work before it breaks running work."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

from jobs.archives import tree_bytes
from jobs.errors import InsufficientStorage
from jobs.settings import Settings
from models.sourcetree import human

USED_TTL_S = 60.0
"""How long a measure of what each kind takes is reused (it walks every job dir)."""

_used: dict[Path, tuple[float, dict[str, int]]] = {}
_used_lock = threading.Lock()


def space(path: Path) -> tuple[int, int]:
    """(free, total) bytes of the filesystem holding `path` (its nearest existing parent when it is not there
    yet). Free is what an unprivileged process may still write."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    usage = shutil.disk_usage(path)
    return usage.free, usage.total


def low(settings: Settings) -> int | None:
    """The free bytes under GPUDECK_HOME when they are below GPUDECK_MIN_FREE (None: enough, or no floor)."""
    if settings.min_free <= 0:
        return None
    free, _ = space(settings.home)
    return free if free < settings.min_free else None


def ensure_room(settings: Settings, what: str) -> None:
    """Refuse `what` (a new job, an upload) with InsufficientStorage while the home is below its floor."""
    free = low(settings)
    if free is None:
        return
    raise InsufficientStorage(
        f"only {human(free)} is free under {settings.home}, below GPUDECK_MIN_FREE ({human(settings.min_free)}): "
        f"{what} refused until there is room. Delete ended jobs (gpudeck rm --status failed,canceled "
        "--older-than 30d, or set GPUDECK_RETENTION) or dataset versions (gpudeck datasets rm NAME VERSION)",
        {"free_bytes": free, "min_free_bytes": settings.min_free},
    )


def used(settings: Settings, redis_dir: Path | None = None) -> dict[str, int]:
    """Bytes under the home taken by job dirs, dataset versions and Redis's data files (measured at most once a
    USED_TTL_S per home)."""
    now = time.monotonic()
    with _used_lock:
        hit = _used.get(settings.home)
        if hit and now - hit[0] < USED_TTL_S:
            return hit[1]
    out = {
        "jobs": tree_bytes(settings.jobs_dir),
        "datasets": tree_bytes(settings.datasets_dir),
        "redis": tree_bytes(redis_dir) if redis_dir is not None else 0,
    }
    with _used_lock:
        _used[settings.home] = (now, out)
    return out


def report(settings: Settings) -> dict[str, Any]:
    """What /healthz says about the disk: free and total bytes under the home, the floor, and whether it is low."""
    free, total = space(settings.home)
    return {
        "path": str(settings.home),
        "free_bytes": free,
        "total_bytes": total,
        "min_free_bytes": settings.min_free,
        "low": settings.min_free > 0 and free < settings.min_free,
    }
