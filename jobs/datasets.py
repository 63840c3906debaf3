"""Uploaded datasets: safe archive extraction into `$GPUDECK_HOME/datasets/<name>/<version>/`, and the registry
of versions in Redis. A written version is never changed; jobs name it `name:version` or `name` (the newest)."""

from __future__ import annotations

import json
import lzma
import os
import shutil
import stat
import tarfile
import time
import uuid
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from redis import Redis

from jobs.errors import Conflict, NotFound, TooLarge, Unprocessable, ValidationError
from jobs.keys import DATASETS_KEY, dataset_key, dataset_order_key, dataset_upload_key
from jobs.settings import Settings
from jobs.store import iso
from models.catalog import NAME, STORED

CHUNK = 1 << 20


class ArchiveRefused(Exception):
    """The archive is unsafe or over a limit; nothing of it is kept."""

    def __init__(self, message: str, too_large: bool = False):
        super().__init__(message)
        self.too_large = too_large


@dataclass
class Extracted:
    files: int = 0  # regular files and links (folders not counted)
    size_bytes: int = 0


class _Extractor:
    """Writes archive entries under `dest` and refuses anything that could land outside it: absolute names,
    `..`, writing through a symlink, links resolving outside, device files and fifos, and archives whose
    expanded size or entry count passes the limits (counted on the bytes actually written, not on headers)."""

    def __init__(self, dest: Path, max_bytes: int, max_files: int):
        self.dest = dest.resolve()
        self.max_bytes, self.max_files = max_bytes, max_files
        self.stats = Extracted()
        self.entries = 0
        self.links: list[Path] = []

    def target(self, name: str) -> Path:
        """The path an entry name maps to, refusing unsafe names and paths through symlinks."""
        self.entries += 1
        if self.entries > self.max_files:
            raise ArchiveRefused(f"the archive has more than {self.max_files} entries (the limit)", too_large=True)
        if "\x00" in name or name.startswith("/"):
            raise ArchiveRefused(f"entry {name!r} has an absolute path")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise ArchiveRefused(f"entry {name!r} points outside the archive (..)")
        if not parts:
            return self.dest
        here = self.dest
        for part in parts[:-1]:
            here = here / part
            if here.is_symlink():
                raise ArchiveRefused(f"entry {name!r} would be written through the symlink {part!r}")
        return self.dest.joinpath(*parts)

    def mkdir(self, name: str) -> None:
        path = self.target(name)
        if path.is_symlink():
            raise ArchiveRefused(f"entry {name!r} would be written through a symlink")
        path.mkdir(mode=0o755, parents=True, exist_ok=True)

    def _create(self, name: str, make: Callable[[Path], Any]) -> Any:
        """Create entry `name` with `make(path)` (parents made first); a second entry of that name is refused."""
        path = self.target(name)
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        try:
            made = make(path)
        except FileExistsError:
            raise ArchiveRefused(f"entry {name!r} appears twice in the archive") from None
        self.stats.files += 1
        return made

    def write(self, name: str, src: IO[bytes]) -> None:
        path = self.target(name)
        with self._create(name, lambda p: open(p, "xb")) as out:
            while chunk := src.read(CHUNK):
                self.stats.size_bytes += len(chunk)
                if self.stats.size_bytes > self.max_bytes:
                    raise ArchiveRefused(
                        f"the archive expands to more than {self.max_bytes} bytes (the limit)", too_large=True
                    )
                out.write(chunk)
        os.chmod(path, 0o444)  # a written version is immutable

    def symlink(self, name: str, link_target: str) -> None:
        path = self.target(name)
        if os.path.isabs(link_target):
            raise ArchiveRefused(f"symlink {name!r} points to the absolute path {link_target!r}")
        lexical = os.path.normpath(os.path.join(os.path.dirname(path), link_target))
        if not self._inside(lexical):
            raise ArchiveRefused(f"symlink {name!r} points outside the archive ({link_target!r})")
        self._create(name, lambda p: os.symlink(link_target, p))
        self.links.append(path)

    def hardlink(self, name: str, source_name: str) -> None:
        source = self.target(source_name)
        self.entries -= 1  # the source was counted as its own entry
        if source.is_symlink() or not source.is_file():
            raise ArchiveRefused(f"hard link {name!r} must name a regular file earlier in the archive")
        self._create(name, lambda p: os.link(source, p))

    def check_links(self) -> None:
        """Once everything is written: every symlink, chains and later entries included, resolves inside."""
        for link in self.links:
            if not self._inside(os.path.realpath(link)):
                raise ArchiveRefused(f"symlink {str(link.relative_to(self.dest))!r} resolves outside the archive")

    def _inside(self, path: str) -> bool:
        root = str(self.dest)
        return path == root or path.startswith(root + os.sep)


def _extract_tar(fileobj: IO[bytes], ex: _Extractor) -> None:
    try:
        # Stream mode: entries are read in order, so a bomb is stopped at the limit, not after it.
        with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
            for m in tar:
                if m.isdir():
                    ex.mkdir(m.name)
                elif m.isreg():
                    if m.size > ex.max_bytes:
                        raise ArchiveRefused(
                            f"entry {m.name!r} expands to more than {ex.max_bytes} bytes (the limit)", too_large=True
                        )
                    src = tar.extractfile(m)
                    assert src is not None
                    ex.write(m.name, src)
                elif m.issym():
                    ex.symlink(m.name, m.linkname)
                elif m.islnk():
                    ex.hardlink(m.name, m.linkname)
                else:
                    kind = "a device file" if m.ischr() or m.isblk() else "a fifo" if m.isfifo() else "not a file"
                    raise ArchiveRefused(f"entry {m.name!r} is {kind}")
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise ArchiveRefused(f"not a readable tar or zip archive, or a damaged one ({exc})") from None
    except OSError as exc:
        if exc.errno is not None:  # the disk, not the archive (ENOSPC, EACCES): a server error
            raise
        raise ArchiveRefused(f"not a readable tar or zip archive, or a damaged one ({exc})") from None


def _extract_zip(fileobj: IO[bytes], ex: _Extractor) -> None:
    try:
        with zipfile.ZipFile(fileobj) as zf:
            infos = zf.infolist()
            if len(infos) > ex.max_files:
                raise ArchiveRefused(f"the archive has more than {ex.max_files} entries (the limit)", too_large=True)
            if sum(i.file_size for i in infos) > ex.max_bytes:
                raise ArchiveRefused(
                    f"the archive expands to more than {ex.max_bytes} bytes (the limit)", too_large=True
                )
            for info in infos:
                mode = info.external_attr >> 16
                if info.flag_bits & 0x1:
                    raise ArchiveRefused(f"entry {info.filename!r} is encrypted")
                if info.is_dir():
                    ex.mkdir(info.filename)
                elif stat.S_ISLNK(mode):
                    with zf.open(info) as f:
                        ex.symlink(info.filename, f.read(4096).decode("utf-8", "replace"))
                elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # 0: no type recorded (most zip tools)
                    raise ArchiveRefused(f"entry {info.filename!r} is a device file, fifo or socket")
                else:
                    with zf.open(info) as f:
                        ex.write(info.filename, f)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError) as exc:
        raise ArchiveRefused(f"the zip archive is damaged or unsupported ({exc})") from None


def extract(fileobj: IO[bytes], dest: Path, max_bytes: int, max_files: int) -> Extracted:
    """Extract a tar (any compression) or zip archive into the existing empty dir `dest`; ArchiveRefused when it is
    unsafe or over a limit (the caller removes `dest` then)."""
    head = fileobj.read(4)
    fileobj.seek(0)
    ex = _Extractor(dest, max_bytes, max_files)
    if head.startswith(b"PK"):
        _extract_zip(fileobj, ex)
    else:
        _extract_tar(fileobj, ex)
    ex.check_links()
    if ex.stats.files == 0:
        raise ArchiveRefused("the archive holds no files")
    return ex.stats


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


def upload(redis: Redis, settings: Settings, name: Any, version: Any, fileobj: IO[bytes] | None) -> dict[str, Any]:
    """Extract an uploaded archive as dataset `name:version` and register it; the version must be new."""
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
            stats = extract(fileobj, staging, settings.dataset_max_bytes, settings.dataset_max_files)
        except ArchiveRefused as exc:
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
            _remove(staging)


def _remove(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)


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
