"""A project's own Python environment: when a command job's source holds `uv.lock` + `pyproject.toml`, or a
`requirements.txt` (or the job names a requirements file), its work-horse builds a virtual environment for it with
uv, once per content: `$GPUDECK_HOME/envs/<digest>/`, the digest of those files, the worker's Python and whether
it is isolated. Later jobs with the same files reuse it.

- Built in the job's sandbox (jobs.buildenv: the build runs the project's code), which may write that folder only.
- One build per environment and host: the work-horse holds `envs/.<digest>.lock` exclusively (flock) while it
  builds, and shared while its job runs with it; another waiting for it beats and answers stop requests meanwhile,
  then reuses what was built. An environment a running job holds is never removed.
- Never half-built: the folder is used only once the work-horse marked it ready (`.gpudeck-ready`), which it does
  after a build that succeeded; a folder found unmarked (a build killed midway) is removed and built again.
- Bounded: GPUDECK_ENV_MAX_BYTES and GPUDECK_ENV_MAX_AGE; the least recently used environment is removed first.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import site
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.archives import tree_bytes
from jobs.proc import python_module
from jobs.settings import Settings

READY = ".gpudeck-ready"
"""JSON: what the environment was built from, for which Python, when, by which job."""
USED = ".gpudeck-used"
"""JSON: when it was last used and by which jobs (the newest 20)."""
LOCK_POLL_S = 0.5


class Unusable(Exception):
    """The job names a requirements file its source does not have."""


@dataclass(frozen=True)
class Need:
    """What a job's source asks for: a requirements file or a uv project, and its digest."""

    digest: str
    kind: str
    """`requirements` or `uv.lock`."""
    path: Path
    """The requirements file, or the project folder."""
    packages: int
    isolated: bool


def need(spec: dict[str, Any], src: Path) -> Need | None:
    """The environment a command job's source asks for (None: none; it runs with the worker's Python)."""
    isolated = bool(spec.get("isolated_env"))
    named = spec.get("requirements")
    if named:
        path = (src / named).resolve()
        if not path.is_relative_to(src.resolve()) or not path.is_file():
            raise Unusable(f"requirements {named!r}: no such file in the job's source")
        return _need("requirements", path, [path], isolated)
    if (src / "uv.lock").is_file() and (src / "pyproject.toml").is_file():
        return _need("uv.lock", src, [src / "uv.lock", src / "pyproject.toml"], isolated)
    if (src / "requirements.txt").is_file():
        return _need("requirements", src / "requirements.txt", [src / "requirements.txt"], isolated)
    return None


def _need(kind: str, path: Path, files: list[Path], isolated: bool) -> Need:
    h = hashlib.sha256(f"{kind}\0{sys.version}\0{sys.prefix}\0{isolated}\0".encode())
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    text = files[0].read_text(errors="replace")
    if kind == "requirements":
        packages = sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith(("#", "-")))
    else:
        packages = max(0, text.count("[[package]]") - 1)  # (the project itself is one of them)
    return Need(h.hexdigest()[:32], kind, path, packages, isolated)


def envs_dir(settings: Settings) -> Path:
    return settings.home / "envs"


def folder(settings: Settings, need: Need) -> Path:
    return envs_dir(settings) / need.digest


def is_ready(path: Path) -> bool:
    return (path / READY).is_file()


def open_lock(settings: Settings, need: Need) -> int:
    """The environment's lock file, open: a job using it holds it shared, a build (or a removal) exclusive."""
    envs_dir(settings).mkdir(parents=True, exist_ok=True)
    return os.open(envs_dir(settings) / f".{need.digest}.lock", os.O_RDWR | os.O_CREAT, 0o600)


def acquire(fd: int, exclusive: bool, waiting: Callable[[], bool]) -> bool:
    """Take the lock (shared or exclusive), polling while others hold it; `waiting()` is called meanwhile (a
    heartbeat) and gives up when it returns False (a stop request)."""
    while True:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if not waiting():
                return False
            time.sleep(LOCK_POLL_S)


def build_argv(settings: Settings, need: Need, path: Path) -> list[str]:
    """The builder's command line (run in the job's sandbox, which may write `path` only)."""
    import uv

    argv = python_module("jobs.buildenv", "--uv", uv.find_uv_bin(), "--env", str(path), "--python", sys.executable)
    argv += ["--packages", str(need.packages)]
    argv += ["--requirements", str(need.path)] if need.kind == "requirements" else ["--project", str(need.path)]
    if not need.isolated:
        for sp in site.getsitepackages():
            argv += ["--worker-site", sp]
    return argv


def index_paths() -> list[Path]:
    """What uv reads of the operator's package index on this host, for the build's sandbox to show: local
    UV_FIND_LINKS folders, UV_CONFIG_FILE, the service user's uv.toml (its home is hidden in the sandbox)."""
    paths = [Path(p) for p in os.environ.get("UV_FIND_LINKS", "").replace(",", " ").split() if p.startswith("/")]
    if os.environ.get("UV_CONFIG_FILE"):
        paths.append(Path(os.environ["UV_CONFIG_FILE"]))
    paths.append(Path(os.path.expanduser("~/.config/uv")))
    return [p for p in paths if p.exists()]


def start_build(path: Path) -> None:
    """Clear what an earlier build killed midway left (never marked ready) before building again."""
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)  # (the folder the sandbox binds writable)


def mark_ready(path: Path, need: Need, job_id: int) -> None:
    meta = {"kind": need.kind, "packages": need.packages, "isolated": need.isolated, "python": sys.version.split()[0],
            "built_at": time.time(), "built_by": job_id}  # fmt: skip
    (path / READY).write_text(json.dumps(meta))


def used(path: Path, job_id: int) -> None:
    """Note that a job uses the environment now (what the LRU bound and the listing read)."""
    try:
        jobs = json.loads((path / USED).read_text()).get("jobs", [])
    except (OSError, ValueError):
        jobs = []
    jobs = [*[j for j in jobs if j != job_id], job_id][-20:]
    tmp = path / f"{USED}.{os.getpid()}"
    tmp.write_text(json.dumps({"last_used": time.time(), "jobs": jobs}))
    os.replace(tmp, path / USED)


def listing(settings: Settings) -> list[dict[str, Any]]:
    """The ready environments, the most recently used first: digest, size, when built and last used, by whom."""
    out = []
    root = envs_dir(settings)
    for path in root.iterdir() if root.is_dir() else []:
        if not path.is_dir() or not is_ready(path):
            continue
        try:
            meta = json.loads((path / READY).read_text())
            use = json.loads((path / USED).read_text()) if (path / USED).is_file() else {}
        except (OSError, ValueError):
            continue
        out.append({"digest": path.name, "path": str(path), "size_bytes": tree_bytes(path), **meta,
                    "last_used": use.get("last_used", meta.get("built_at")), "jobs": use.get("jobs", [])})  # fmt: skip
    return sorted(out, key=lambda e: -(e["last_used"] or 0))


def prune(settings: Settings, keep: str) -> list[str]:
    """Remove the environments past GPUDECK_ENV_MAX_AGE since their last use, then the least recently used ones
    while all of them take more than GPUDECK_ENV_MAX_BYTES; never `keep` (the one a job is about to use) nor one
    whose lock another work-horse holds. The digests removed."""
    envs = listing(settings)
    total = sum(e["size_bytes"] for e in envs)
    removed = []
    now = time.time()
    for e in reversed(envs):  # the least recently used first
        too_old = settings.env_max_age_s is not None and now - (e["last_used"] or 0) > settings.env_max_age_s
        too_big = settings.env_max_bytes is not None and total > settings.env_max_bytes
        if e["digest"] == keep or not (too_old or too_big):
            continue
        fd = os.open(envs_dir(settings) / f".{e['digest']}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            (Path(e["path"]) / READY).unlink(missing_ok=True)  # (unusable first, then gone)
            shutil.rmtree(e["path"], ignore_errors=True)
        finally:
            os.close(fd)
        total -= e["size_bytes"]
        removed.append(e["digest"])
    return removed
