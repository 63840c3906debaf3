"""Uploaded datasets: archives extracted (jobs.archives) into `$GPUDECK_HOME/datasets/<name>/<version>/`, and
the registry of versions in Redis. A written version is never changed; jobs name it `name:version` or `name`
(the newest)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from redis import Redis

from jobs import archives
from jobs.errors import Conflict, NotFound, TooLarge, Unprocessable, ValidationError
from jobs.keys import DATASETS_KEY, dataset_key, dataset_order_key, dataset_upload_key
from jobs.settings import Settings
from jobs.store import JobStore, iso
from models.catalog import NAME, STORED, parse_dataset


# -- the registry ------------------------------------------------------------------------------
def _check_names(name: Any, version: Any) -> tuple[str, str]:
    errors = {}
    rule = f"must match {NAME} (letters, digits, '.', '_', '-'; at most 64)"
    if not isinstance(name, str) or not STORED.fullmatch(name) or ":" in name:
        errors["name"] = f"{rule}, got {name!r}"
    elif name == "synthetic":
        errors["name"] = "synthetic is reserved for generated data"
    if not isinstance(version, str) or not STORED.fullmatch(version) or ":" in version:
        errors["version"] = f"{rule}, got {version!r}"
    if errors:
        raise ValidationError(errors)
    return name, version


def upload(
    redis: Redis, settings: Settings, name: Any, version: Any, fileobj: IO[bytes] | None, owner: str | None = None
) -> dict[str, Any]:
    """Extract an uploaded archive as dataset `name:version` (by `owner`) and register it; the version must be
    new."""
    name, version = _check_names(name, version)
    if fileobj is None:
        raise ValidationError({"file": "is required: the archive (tar, tar.gz, tgz or zip) as a multipart file"})
    if redis.hexists(dataset_key(name), version):
        raise Conflict(f"dataset {name}:{version} already exists; versions are immutable, upload a new version")
    claim = dataset_upload_key(name, version)
    if not redis.set(claim, "1", nx=True, ex=6 * 3600):
        raise Conflict(f"dataset {name}:{version} is being uploaded by another request")
    staging = settings.datasets_dir / ".staging" / uuid.uuid4().hex
    final = settings.datasets_dir / name / version
    try:
        if final.exists():
            raise Conflict(f"dataset {name}:{version} already exists on disk at {final}")
        staging.mkdir(parents=True)
        try:
            stats = archives.extract(fileobj, staging, settings.dataset_max_bytes, settings.dataset_max_files)
        except archives.ArchiveRefused as exc:
            cls = TooLarge if exc.too_large else Unprocessable
            raise cls(f"archive refused: {exc}", {"field": "file"}) from None
        from models.datasets import FORMATS, detect

        found = detect(staging)
        if found is None:
            raise Unprocessable(
                f"archive refused: no dataset found in it; expected one of: {FORMATS}", {"field": "file"}
            )
        fmt, root = found
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, final)  # atomic: a version is either absent or complete
        meta = {
            "name": name,
            "version": version,
            "format": fmt,
            "root": str(root.relative_to(staging)),
            "files": stats.files,
            "size_bytes": stats.size_bytes,
            "created_at": time.time(),
            "owner": owner,
        }
        with redis.pipeline() as pipe:
            pipe.hset(dataset_key(name), version, json.dumps(meta))
            pipe.zadd(dataset_order_key(name), {version: meta["created_at"]})
            pipe.zadd(DATASETS_KEY, {name: meta["created_at"]}, nx=True)
            pipe.execute()
        return view(meta)
    finally:
        redis.delete(claim)
        if staging.exists():
            archives.remove(staging)


USERS_NAMED = 100
"""Most jobs a refused delete names."""


def delete(
    redis: Redis, settings: Settings, name: Any, version: Any, may: Callable[[str | None], None] | None = None
) -> dict[str, Any]:
    """Remove dataset version `name:version` (its files and its entry); Conflict naming the jobs while a queued or
    running job uses it (a job pins the version when it is submitted)."""
    name, version = _check_names(name, version)
    raw = redis.hget(dataset_key(name), version)
    if raw is None:
        raise NotFound(f"dataset {name}:{version} does not exist", {"name": name, "version": version})
    if may is not None:
        may(json.loads(raw).get("owner"))  # (Forbidden unless this caller may delete its owner's version)
    ref = f"{name}:{version}"
    users = JobStore(redis).list(
        limit=USERS_NAMED,
        where=lambda rec: rec["status"] in ("queued", "starting", "running") and rec.spec.dataset == ref,
    )
    if users:
        ids = [r["id"] for r in users]
        raise Conflict(
            f"dataset {ref} is used by queued or running job{'s' if len(ids) > 1 else ''} "
            f"{', '.join(map(str, ids))}: cancel them or let them end, then delete it",
            {"jobs": ids},
        )
    with redis.pipeline() as pipe:
        pipe.hdel(dataset_key(name), version)
        pipe.zrem(dataset_order_key(name), version)
        pipe.execute()
    if not redis.hlen(dataset_key(name)):
        redis.zrem(DATASETS_KEY, name)
    aside = settings.datasets_dir / ".staging" / f"deleted-{uuid.uuid4().hex}"
    freed = archives.discard(settings.datasets_dir / name / version, aside)
    return {"name": name, "version": version, "deleted": True, "bytes_freed": freed}


def view(meta: dict[str, Any]) -> dict[str, Any]:
    """A version as clients see it."""
    return {
        "name": meta["name"],
        "version": meta["version"],
        "ref": f"{meta['name']}:{meta['version']}",
        "format": meta["format"],
        "files": meta["files"],
        "size_bytes": meta["size_bytes"],
        "created_at": iso(meta["created_at"]),
        "owner": meta.get("owner"),
    }


def versions(redis: Redis, name: str) -> list[dict[str, Any]]:
    """One dataset's versions, newest first (raw metadata)."""
    order = [v.decode() for v in redis.zrevrange(dataset_order_key(name), 0, -1)]
    raw = redis.hgetall(dataset_key(name))
    return [json.loads(raw[v.encode()]) for v in order if v.encode() in raw]


def describe(redis: Redis, name: str) -> dict[str, Any]:
    """One dataset with every version, newest first; NotFound when it was never uploaded."""
    metas = versions(redis, name)
    if not metas:
        raise NotFound(f"dataset {name!r} does not exist", {"name": name})
    return {"name": name, "latest": metas[0]["version"], "versions": [view(m) for m in metas]}


def list_all(redis: Redis) -> list[dict[str, Any]]:
    """Every dataset, by name."""
    names = sorted(n.decode() for n in redis.zrange(DATASETS_KEY, 0, -1))
    return [describe(redis, n) for n in names]


def pin(redis: Redis, name: str, version: str | None) -> tuple[str | None, str | None]:
    """(`name:version` with the newest version filled in, None) or (None, what is wrong)."""
    metas = versions(redis, name)
    if not metas:
        return None, f"no dataset named {name!r} has been uploaded (POST /api/v1/datasets)"
    if version is None:
        return f"{name}:{metas[0]['version']}", None
    if not any(m["version"] == version for m in metas):
        known = ", ".join(m["version"] for m in metas)
        return None, f"dataset {name!r} has no version {version!r}; versions: {known}"
    return f"{name}:{version}", None


def local_path(redis: Redis, settings: Settings, ref: str) -> Path:
    """Where the dataset `name:version` lies under this host's GPUDECK_HOME (shared storage across hosts)."""
    name, _, version = ref.partition(":")
    raw = redis.hget(dataset_key(name), version)
    root = json.loads(raw)["root"] if raw else "."
    return (settings.datasets_dir / name / version / root).resolve()


def local_dir(redis: Redis, settings: Settings, dataset: str | None) -> Path | None:
    """Where a job's dataset lies on this host (None: it names none, or generated data)."""
    if not dataset:
        return None
    ref = parse_dataset(dataset)
    if ref.kind == "synthetic":
        return None
    if ref.kind == "stored":
        return local_path(redis, settings, dataset)
    return Path(ref.path or dataset)
