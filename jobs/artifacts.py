"""What a job leaves in its job dir, as the API serves it: listing, one file, a folder as a streamed archive.
No path leaves the job dir: `..`, absolute paths and symlinks that point out of it are refused."""

from __future__ import annotations

import os
import queue
import socket
import stat
import tarfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from jobs.errors import BadRequest, NotFound
from jobs.settings import Settings

MAX_LISTED = 100_000
"""Most entries one listing answers (a job dir of more says so: `truncated`)."""
CHUNK = 1 << 20
"""Bytes an archive stream hands on at a time."""
GZIP_LEVEL = 1


def job_dir(settings: Settings, rec: dict[str, Any]) -> Path:
    """The job's dir as this API host sees it; NotFound naming the host that has it when this one does not (a
    worker host without the shared GPUDECK_HOME)."""
    path = settings.job_dir(rec["id"])
    if path.is_dir():
        return path
    worker = str(rec.get("worker") or "")
    host = worker.split(".", 1)[0] if worker else None
    if host and host != socket.gethostname():
        raise NotFound(
            f"job {rec['id']}'s files are on host {host} (worker {worker}): this API on {socket.gethostname()} does "
            f"not see them under {settings.jobs_dir}; share GPUDECK_HOME between the hosts, or read them there",
            {"id": rec["id"], "host": host},
        )
    raise NotFound(f"job {rec['id']} has no files (yet): {path} does not exist", {"id": rec["id"]})


def relative(rel: str) -> tuple[str, ...]:
    """The parts of a path relative to the job dir; BadRequest for an absolute one or one with '..'."""
    parts = PurePosixPath(rel).parts
    if rel.startswith("/") or "\\" in rel or any(p in ("..",) for p in parts) or "\0" in rel:
        raise BadRequest(f"path {rel!r}: must be relative to the job dir, without '..'", {"field": "path"})
    return parts


def inside(root: Path, rel: str) -> Path:
    """`root/rel`, refused unless it stays inside `root` once symlinks are followed."""
    path = root.joinpath(*relative(rel))
    real, top = os.path.realpath(path), os.path.realpath(root)
    if real != top and not real.startswith(top + os.sep):
        raise NotFound(f"path {rel!r} is not in the job dir", {"field": "path"})  # a symlink pointing out of it
    if not os.path.lexists(path):
        raise NotFound(f"path {rel!r} does not exist in the job dir", {"field": "path"})
    return path


def regular(path: Path, rel: str) -> None:
    """NotFound unless `path` is a regular file (through a link inside the job dir, if one): a FIFO would block the
    server's thread for good, a socket or a device cannot be read, a link loop cannot be followed."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise NotFound(f"path {rel!r} cannot be read ({why})", {"field": "path"}) from None
    if not stat.S_ISREG(mode):
        raise NotFound(f"path {rel!r} is not a regular file (a FIFO, a socket or a device)", {"field": "path"})


def listing(root: Path, prefix: str = "") -> dict[str, Any]:
    """Every file under `root` (recursive, sorted by path): path, size, modified time; only paths starting with
    `prefix` (folders that cannot hold one are not read). Symlinks are listed only when they point to a file
    inside the job dir."""
    top = os.path.realpath(root) + os.sep
    files: list[dict[str, Any]] = []
    folders = [(str(root), "")]
    while folders and len(files) <= MAX_LISTED:
        folder, above = folders.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # gone, or not readable
        for entry in entries:
            rel = above + entry.name
            try:
                link, folder_here = entry.is_symlink(), entry.is_dir()
            except OSError:
                continue  # a link loop, or gone
            if folder_here:
                if not link and (rel + "/").startswith(prefix[: len(rel) + 1]):
                    folders.append((entry.path, rel + "/"))
                continue
            if not rel.startswith(prefix) or (link and not os.path.realpath(entry.path).startswith(top)):
                continue
            try:
                st = entry.stat()
            except OSError:
                continue  # gone since the folder was read, a link to nothing, a link loop
            if not stat.S_ISREG(st.st_mode):
                continue  # a FIFO, a socket, a device: nothing to download
            files.append({"path": rel, "size": st.st_size, "modified": _iso(st.st_mtime)})
    truncated = len(files) > MAX_LISTED
    files.sort(key=lambda f: f["path"])
    del files[MAX_LISTED:]
    return {"files": files, "total_bytes": sum(f["size"] for f in files), "truncated": truncated}


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class _Pipe:
    """A file-like object tarfile writes into, gzip-compressing what it gets at level 1 (checkpoints are floats
    that hardly compress; tarfile's own gzip stream is level 9, ~5x slower for nothing); a reader thread takes the
    compressed bytes in chunks."""

    def __init__(self) -> None:
        self.chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)  # at most ~8 MiB in flight
        self.buf = bytearray()
        self.closed_by_reader = threading.Event()
        self.gzip = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: the gzip format

    def write(self, data: bytes) -> int:
        if self.closed_by_reader.is_set():
            raise BrokenPipeError("the client went away")
        self.buf += self.gzip.compress(data)
        while len(self.buf) >= CHUNK:
            self._put(bytes(self.buf[:CHUNK]))
            del self.buf[:CHUNK]
        return len(data)

    def flush(self) -> None:
        pass

    def finish(self) -> None:
        self.buf += self.gzip.flush()
        if self.buf:
            self._put(bytes(self.buf))
            self.buf.clear()
        self._put(None)

    def _put(self, item: bytes | None) -> None:
        while not self.closed_by_reader.is_set():
            try:
                self.chunks.put(item, timeout=0.5)
                return
            except queue.Full:
                continue


def tar_stream(folder: Path, arcname: str) -> Iterator[bytes]:
    """`folder` as a .tar.gz, produced while it is sent (nothing is built on disk, at most ~8 MiB in memory).
    Symlinks that point out of the job dir are left out."""
    top = os.path.realpath(folder)

    def inside_only(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if info.issym() or info.islnk():
            return None  # an archive of a job dir holds files and folders only
        return info

    def add(tar: tarfile.TarFile) -> None:
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                if os.path.islink(full) or not os.path.realpath(full).startswith(top + os.sep):
                    continue
                rel = os.path.relpath(full, folder)
                tar.add(full, arcname=f"{arcname}/{rel}", recursive=False, filter=inside_only)

    return _tar_stream(add)


def objects_tar_stream(objects: Iterator[tuple[str, Any, int]], folder: str, arcname: str) -> Iterator[bytes]:
    """A folder of a job's objects in the store (path, body, size: jobs.objectstore.Store.objects) as a .tar.gz,
    produced while it is sent, each object read as it goes in."""

    def add(tar: tarfile.TarFile) -> None:
        for rel, body, size in objects:
            info = tarfile.TarInfo(f"{arcname}/{rel[len(folder) :].lstrip('/')}")
            info.size, info.mtime, info.mode = size, int(time.time()), 0o644
            tar.addfile(info, body)

    return _tar_stream(add)


def _tar_stream(add: Any) -> Iterator[bytes]:
    """What `add(tar)` puts into a tar, gzipped and handed on in chunks while a thread writes it."""
    pipe = _Pipe()
    failure: list[BaseException] = []

    def write() -> None:
        try:
            with tarfile.open(fileobj=pipe, mode="w|") as tar:  # type: ignore[call-overload]
                add(tar)
        except BrokenPipeError:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, which ends the stream
            failure.append(exc)
        finally:
            pipe.finish()

    writer = threading.Thread(target=write, name="gpudeck-tar", daemon=True)
    writer.start()
    try:
        while True:
            chunk = pipe.chunks.get()
            if chunk is None:
                break
            yield chunk
        if failure:
            raise failure[0]
    finally:
        pipe.closed_by_reader.set()  # a client that went away stops the writer
        writer.join(5)
