"""Source snapshots of command jobs, stored by the sha256 of their content under `$GPUDECK_HOME/sources/<sha256>/`.

An upload is extracted safely (jobs.archives), hashed (models.sourcetree, the same digest `gpudeck run` computes
before it uploads), and kept once: the same tree uploaded again stores nothing new. A server folder named as a
job's source is snapshotted the same way when the job is submitted, so later edits never change a queued job.
A stored snapshot is never changed; each job runs in its own copy (jobs.run.runner).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import IO, Any

from redis import Redis

from jobs import archives
from jobs.errors import NotFound, TooLarge, Unprocessable, ValidationError
from jobs.keys import source_key
from jobs.settings import Settings
from jobs.store import iso
from models import sourcetree

GIT_COMMIT = re.compile(r"[0-9a-f]{7,64}")


def _git(commit: Any, dirty: Any) -> dict[str, Any]:
    """The git state the uploader reported (optional form fields), validated."""
    out: dict[str, Any] = {}
    if commit not in (None, ""):
        if not isinstance(commit, str) or not GIT_COMMIT.fullmatch(commit):
            raise ValidationError({"git_commit": f"must be a hex commit id of 7 to 64 characters, got {commit!r}"})
        out["git_commit"] = commit
    if dirty not in (None, ""):
        if str(dirty).lower() not in ("1", "true", "0", "false"):
            raise ValidationError({"git_dirty": f"must be true or false, got {dirty!r}"})
        out["git_dirty"] = str(dirty).lower() in ("1", "true")
    return out


def _keep(redis: Redis, settings: Settings, staging: Path, extra: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Move a complete tree in staging to its content address (unless that exists) and record it."""
    names = sourcetree.files(staging)
    sha = sourcetree.digest(staging, names)
    final = settings.sources_dir / sha
    created = False
    if not final.exists():
        try:
            os.rename(staging, final)  # atomic: a snapshot is absent or complete
            created = True
        except OSError:  # the same tree arrived through another request first
            if not final.exists():
                raise
    size = sum(os.lstat(final / n).st_size for n in names)
    raw = redis.get(source_key(sha))
    meta = json.loads(raw) if raw else {"sha256": sha, "files": len(names), "size_bytes": size}
    meta.setdefault("created_at", time.time())
    meta.update({k: v for k, v in extra.items() if v is not None})
    redis.set(source_key(sha), json.dumps(meta))
    return view(meta), created


def upload(
    redis: Redis, settings: Settings, fileobj: IO[bytes] | None, git_commit: Any = None, git_dirty: Any = None
) -> tuple[dict[str, Any], bool]:
    """Store an uploaded archive's tree; (its view, whether it was new)."""
    if fileobj is None:
        raise ValidationError({"file": "is required: the source folder as a tar (any compression) or zip archive"})
    git = _git(git_commit, git_dirty)
    staging = settings.sources_dir / ".staging" / uuid.uuid4().hex
    staging.mkdir(parents=True)
    try:
        try:
            archives.extract(fileobj, staging, settings.source_max_bytes, settings.source_max_files)
        except archives.ArchiveRefused as exc:
            hint = " (GPUDECK_SOURCE_MAX_BYTES / GPUDECK_SOURCE_MAX_FILES)" if exc.too_large else ""
            raise (TooLarge if exc.too_large else Unprocessable)(
                f"source archive refused: {exc}{hint}", {"field": "file"}
            ) from None
        return _keep(redis, settings, staging, git)
    finally:
        if staging.exists():
            archives.remove(staging)


def snapshot_folder(redis: Redis, settings: Settings, folder: str) -> dict[str, Any]:
    """Store a server folder's tree as it is now (symlinks kept as links); its view, with `path`."""
    staging = settings.sources_dir / ".staging" / uuid.uuid4().hex
    staging.parent.mkdir(parents=True, exist_ok=True)
    try:
        names = sourcetree.files(Path(folder))
        size = sum(os.lstat(os.path.join(folder, n)).st_size for n in names)
        if len(names) > settings.source_max_files or size > settings.source_max_bytes:
            raise TooLarge(
                f"source folder {folder} holds {len(names)} files, {size} bytes: over the limit of "
                f"{settings.source_max_files} files, {settings.source_max_bytes} bytes (GPUDECK_SOURCE_MAX_*)",
                {"field": "source"},
            )
        shutil.copytree(folder, staging, symlinks=True)
        return _keep(redis, settings, staging, {"path": folder})[0]
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def get(redis: Redis, sha: str) -> dict[str, Any]:
    """The view of a stored snapshot, or NotFound."""
    raw = redis.get(source_key(sha))
    if raw is None:
        raise NotFound(f"source src:{sha} is not stored; upload it with POST /api/v1/sources", {"ref": f"src:{sha}"})
    return view(json.loads(raw))


def exists(redis: Redis, sha: str) -> bool:
    """Whether the snapshot is stored."""
    return bool(redis.exists(source_key(sha)))


def view(meta: dict[str, Any]) -> dict[str, Any]:
    """A snapshot as clients see it."""
    out = {
        "ref": sourcetree.ref(meta["sha256"]),
        "sha256": meta["sha256"],
        "files": meta["files"],
        "size_bytes": meta["size_bytes"],
        "created_at": iso(meta["created_at"]),
    }
    for key in ("git_commit", "git_dirty", "path"):
        if key in meta:
            out[key] = meta[key]
    return out


def local_path(settings: Settings, sha: str) -> Path:
    """Where the snapshot lies under this host's GPUDECK_HOME (shared storage across hosts)."""
    return settings.sources_dir / sha
