"""A project's own Python environment: when a command job's source holds `uv.lock` + `pyproject.toml`, or a
`requirements.txt` (or the job names a requirements file), its work-horse builds a virtual environment for it with
uv, once per content: `$GPUDECK_HOME/envs/<digest>/`, the digest of those files, the worker's Python and whether
it is isolated. Later jobs with the same files reuse it.

- Shared only when what it holds comes from a package index alone: a requirements file of plain `name[extras]
  <specifiers> ; markers` lines (and index options), a uv.lock whose every package comes from a registry. Anything
  read from the job's source — a local path, `-e .`, a local wheel, `-r`/`-c` another file, `--find-links ./dir`,
  a path, directory or editable source (the project itself), a VCS or URL source, a line gpudeck cannot read — puts
  the source's digest and the job's owner into the key: one user's build never runs in another user's job.

- Built in the job's sandbox (jobs.run.buildenv: the build runs the project's code), which may write that folder only.
- One build per environment and host: the work-horse holds `envs/.<digest>.lock` exclusively (flock) while it
  builds, and shared while its job runs with it; another waiting for it beats and answers stop requests meanwhile,
  then reuses what was built. An environment a running job holds is never removed.
- Never half-built: the folder is used only once the work-horse marked it ready (`.gpudeck-ready`), which it does
  after a build that succeeded; a folder found unmarked (a build killed midway) is removed and built again.
- Bounded: GPUDECK_ENV_MAX_BYTES and GPUDECK_ENV_MAX_AGE; the least recently used environment is removed first.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import site
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from jobs import jobfiles
from jobs.archives import tree_bytes
from jobs.record import Kept
from jobs.run.proc import python_module
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
    local: bool = False
    """It holds what the job's source carries (its key has the source's digest and the owner)."""
    texts: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    """The files' texts as read (jobs.jobfiles), the requirements file or uv.lock first."""


REQUIREMENT = re.compile(
    r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\s*(?:\[[A-Za-z0-9._,\s-]*\])?\s*"
    r"(?:\(?\s*(?:(?:===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)+\)?)?\s*(?:;[^@]*)?$"
)
"""A requirement an index serves: a name, extras, version specifiers, markers (no URL, no path)."""
INDEX_OPTIONS = ("-i", "--index-url", "--extra-index-url", "--no-index", "--pre", "--prefer-binary",
                 "--only-binary", "--no-binary", "--trusted-host")  # fmt: skip
"""Options of a requirements file that read nothing of the job's source."""


def index_only_requirements(text: str) -> bool:
    """Whether every line of a requirements file names what a package index serves (module doc)."""
    for raw in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        line = re.sub(r"\s--hash[=\s]\S+", "", line).strip()
        if line.startswith("-"):
            if line.split("=", 1)[0].split()[0] not in INDEX_OPTIONS:
                return False
            continue
        if not REQUIREMENT.match(line):
            return False
    return True


def index_only_lock(text: str) -> bool:
    """Whether every package of a uv.lock (its text) comes from a registry (the project itself virtual, not built)."""
    import tomllib

    try:
        packages = tomllib.loads(text).get("package", [])
    except ValueError:
        return False
    return all(set((p.get("source") or {}).keys()) <= {"registry", "virtual"} for p in packages)


UV_CONFIG = ("uv.toml", "pyproject.toml")
"""Where uv finds configuration (an index, find-links, sources) from the build's working directory up: the source
copy and the job dir above it, both the job's to write."""


def uv_configured(src: Path) -> bool:
    """Whether the source (or its job dir, which an earlier attempt wrote) carries uv configuration that the build
    would read: a `uv.toml`, or `[tool.uv]` in a `pyproject.toml`. Such a build is the owner's own (issue 62 #4: a
    `uv.toml` beside another user's index-only requirements pointed uv at the uploader's own wheel)."""
    for folder in (src, src.parent):
        for name in UV_CONFIG:
            try:
                text = jobfiles.read_text(folder, name, 4 << 20)
            except FileNotFoundError:
                continue
            except OSError:
                return True  # (a link, a FIFO: not read, and not shared)
            if name == "uv.toml" or re.search(r"^\s*\[\s*tool\s*\.\s*uv\b", text, re.M) or "tool.uv" in text:
                return True
    return False


def need(spec: Kept, src: Path, owner: str | None = None) -> Need | None:
    """The environment a command job's source asks for (None: none; it runs with the worker's Python); `owner`'s
    own when it holds anything of the source, or uv configuration (module doc). Every file read through no link
    (jobs.jobfiles): the source copy is the job's."""
    isolated = spec.isolated_env
    found = _found(spec, src, isolated)
    if found is None:
        return None
    first = found.texts[0]
    local = uv_configured(src) or not (
        index_only_requirements(first) if found.kind == "requirements" else index_only_lock(first)
    )
    if not local:
        return found
    h = hashlib.sha256(f"{found.digest}\0{spec.source or ''}\0{owner or ''}\0".encode())
    return dataclasses.replace(found, digest=h.hexdigest()[:32], local=True)


def _found(spec: Kept, src: Path, isolated: bool) -> Need | None:
    named = spec.requirements
    try:
        if named:
            try:
                return _need("requirements", src / named, src, [named], isolated)
            except OSError:
                raise Unusable(f"requirements {named!r}: no such file in the job's source (a regular file)") from None
        if jobfiles.is_file(src, "uv.lock") and jobfiles.is_file(src, "pyproject.toml"):
            return _need("uv.lock", src, src, ["uv.lock", "pyproject.toml"], isolated)
        if jobfiles.is_file(src, "requirements.txt"):
            return _need("requirements", src / "requirements.txt", src, ["requirements.txt"], isolated)
    except jobfiles.Refused as exc:
        raise Unusable(f"{exc.rel}: {exc.why}") from None
    return None


def _need(kind: str, path: Path, src: Path, names: list[str], isolated: bool) -> Need:
    h = hashlib.sha256(f"{kind}\0{sys.version}\0{sys.prefix}\0{isolated}\0".encode())
    texts = []
    for name in names:
        data = jobfiles.read_bytes(src, name, 64 << 20)
        h.update(PurePosixPath(name).name.encode() + b"\0" + data + b"\0")
        texts.append(data.decode("utf-8", errors="replace"))
    text = texts[0]
    if kind == "requirements":
        packages = sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith(("#", "-")))
    else:
        packages = max(0, text.count("[[package]]") - 1)  # (the project itself is one of them)
    return Need(h.hexdigest()[:32], kind, path, packages, isolated, texts=tuple(texts))


def envs_dir(settings: Settings) -> Path:
    return settings.home / "envs"


def folder(settings: Settings, need: Need) -> Path:
    return envs_dir(settings) / need.digest


def is_ready(path: Path) -> bool:
    return jobfiles.is_file(path, READY)


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
    """The builder's command line (run in the job's sandbox, which may write `path` only); Unusable where no uv is
    to be had (gpudeck[envs], or uv on PATH)."""
    argv = python_module("jobs.run.buildenv", "--uv", uv_bin(), "--env", str(path), "--python", sys.executable)
    argv += ["--packages", str(need.packages)]
    argv += ["--requirements", str(need.path)] if need.kind == "requirements" else ["--project", str(need.path)]
    if not need.isolated:
        for sp in site.getsitepackages():
            argv += ["--worker-site", sp]
    return argv


UV_MISSING = (
    "the job's source asks for its own environment ({what}), which gpudeck builds with uv, and this worker has none: "
    "pip install 'gpudeck[envs]' where the workers run (or put uv on their PATH), or name a registered environment "
    "with env_name"
)


def uv_bin() -> str:
    """uv's binary: the `uv` package's (gpudeck[envs]), else one on PATH; Unusable where neither is."""
    try:
        import uv

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise Unusable(UV_MISSING.format(what="requirements.txt or uv.lock")) from None
        return found


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


def mark_ready(path: Path, need: Need, job_id: int, owner: str | None = None) -> None:
    """`owner`: whose job built it (whose share of GPUDECK_ENV_MAX_BYTES it counts in)."""
    meta = {"kind": need.kind, "packages": need.packages, "isolated": need.isolated, "python": sys.version.split()[0],
            "built_at": time.time(), "built_by": job_id, "owner": owner, "local": need.local}  # fmt: skip
    jobfiles.write_text(path, READY, json.dumps(meta))  # (a new file renamed over any link the build left)


def used(path: Path, job_id: int) -> None:
    """Note that a job uses the environment now (what the LRU bound and the listing read)."""
    try:
        jobs = json.loads(jobfiles.read_bytes(path, USED, 1 << 20)).get("jobs", [])
    except (OSError, ValueError, AttributeError):
        jobs = []
    jobs = [*[j for j in jobs if j != job_id], job_id][-20:]
    jobfiles.write_text(path, USED, json.dumps({"last_used": time.time(), "jobs": jobs}))


def listing(settings: Settings) -> list[dict[str, Any]]:
    """The ready environments, the most recently used first: digest, size, when built and last used, by whom."""
    out = []
    root = envs_dir(settings)
    for path in root.iterdir() if root.is_dir() else []:
        if not path.is_dir() or not is_ready(path):
            continue
        try:
            meta = json.loads(jobfiles.read_bytes(path, READY, 1 << 20))
            use = json.loads(jobfiles.read_bytes(path, USED, 1 << 20)) if jobfiles.is_file(path, USED) else {}
        except (OSError, ValueError):
            continue
        out.append({"digest": path.name, "path": str(path), "size_bytes": tree_bytes(path), **meta,
                    "last_used": use.get("last_used", meta.get("built_at")), "jobs": use.get("jobs", [])})  # fmt: skip
    return sorted(out, key=lambda e: -(e["last_used"] or 0))


def prune(settings: Settings, keep: str, owner: str | None = None) -> list[str]:
    """Remove the environments past GPUDECK_ENV_MAX_AGE since their last use, then, while all of them take more than
    GPUDECK_ENV_MAX_BYTES, the least recently used ones of `owner` (who just built one) first, then of whoever
    holds more than an even share of the bound; never another's within their share (one user's builds cannot
    push out everybody else's), never `keep` (the one a job is about to use) nor one whose lock another
    work-horse holds. The digests removed."""
    envs = listing(settings)
    total = sum(e["size_bytes"] for e in envs)
    held: dict[str | None, int] = {}
    for e in envs:
        held[e.get("owner")] = held.get(e.get("owner"), 0) + e["size_bytes"]
    share = (settings.env_max_bytes or 0) / max(1, len(held))
    removed = []
    now = time.time()
    order = sorted(reversed(envs), key=lambda e: e.get("owner") != owner)  # (stable: the least recently used first)
    for e in order:
        too_old = settings.env_max_age_s is not None and now - (e["last_used"] or 0) > settings.env_max_age_s
        too_big = settings.env_max_bytes is not None and total > settings.env_max_bytes
        fair = e.get("owner") == owner or held.get(e.get("owner"), 0) > share
        if e["digest"] == keep or not (too_old or (too_big and fair)):
            continue
        fd = os.open(envs_dir(settings) / f".{e['digest']}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            jobfiles.unlink(Path(e["path"]), READY)  # (unusable first, then gone)
            shutil.rmtree(e["path"], ignore_errors=True)
        finally:
            os.close(fd)
        total -= e["size_bytes"]
        held[e.get("owner")] = held.get(e.get("owner"), 0) - e["size_bytes"]
        removed.append(e["digest"])
    return removed
