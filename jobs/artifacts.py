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

from jobs import jobfiles
from jobs.errors import BadRequest, NotFound
from jobs.record import Job
from jobs.settings import Settings

MAX_LISTED = 100_000
"""Most entries one listing answers (a job dir of more says so: `truncated`)."""
CHUNK = 1 << 20
"""Bytes an archive stream hands on at a time."""
GZIP_LEVEL = 1


def job_dir(settings: Settings, rec: Job) -> Path:
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


def opened(root: Path, rel: str) -> tuple[int, bool]:
    """(a descriptor, whether it is a folder) of `root/rel`, reached as jobs.jobfiles reaches it: a link the job
    left is followed only where it stays inside the job dir, resolved beneath it, never by the kernel (no race with
    a job that swaps a link meanwhile); NotFound for a link out of it, for what does not exist, and for what is not
    a regular file or a folder (a FIFO would block the server's thread for good, a socket or a device cannot be
    read, a link loop cannot be followed)."""
    relative(rel)
    if not jobfiles.parts(rel):
        return jobfiles.open_root(root), True
    try:
        return jobfiles.open_file(root, rel, inside=True), False
    except FileNotFoundError:
        raise NotFound(f"path {rel!r} does not exist in the job dir", {"field": "path"}) from None
    except jobfiles.Refused as exc:
        if "out of its folder" in exc.why:
            raise NotFound(f"path {rel!r} is not in the job dir", {"field": "path"}) from None
        if "not a regular file" not in exc.why:
            raise NotFound(f"path {rel!r} cannot be read ({exc.why})", {"field": "path"}) from None
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise NotFound(f"path {rel!r} cannot be read ({why})", {"field": "path"}) from None
    try:
        return jobfiles.open_dir(root, rel, inside=True), True
    except OSError:
        raise NotFound(
            f"path {rel!r} is not a regular file (a FIFO, a socket or a device)", {"field": "path"}
        ) from None


def listing(root: Path, prefix: str = "") -> dict[str, Any]:
    """Every file under `root` (recursive, sorted by path): path, size, modified time; only paths starting with
    `prefix` (folders that cannot hold one are not read). Symlinks are listed only when they point to a file
    inside the job dir (resolved as `opened` resolves them)."""
    files: list[dict[str, Any]] = []
    try:
        top = jobfiles.open_root(root)
    except OSError:
        return {"files": [], "total_bytes": 0, "truncated": False}
    try:
        for here, dirnames, names, fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            above = "" if here == "." else here[2:] + "/"
            dirnames[:] = [d for d in dirnames if (above + d + "/").startswith(prefix[: len(above + d) + 1])]
            for name in names:
                rel = above + name
                if not rel.startswith(prefix):
                    continue
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        with jobfiles.opened(root, rel, inside=True) as linked:
                            st = os.fstat(linked)
                except OSError:
                    continue  # gone since the folder was read, a link out or to nothing, a link loop
                if not stat.S_ISREG(st.st_mode):
                    continue  # a FIFO, a socket, a device: nothing to download
                files.append({"path": rel, "size": st.st_size, "modified": _iso(st.st_mtime)})
                if len(files) > MAX_LISTED:
                    break
            if len(files) > MAX_LISTED:
                break
    finally:
        os.close(top)
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


def tar_stream(folder: int, arcname: str) -> Iterator[bytes]:
    """The folder open as descriptor `folder` (`opened`; closed here once the stream ends) as a .tar.gz,
    produced while it is sent (nothing is built on disk, at most ~8 MiB in memory): its regular files and folders,
    each file opened through no link (jobs.jobfiles); links are left out."""

    def add(tar: tarfile.TarFile) -> None:
        for rel, st in jobfiles.walk(folder):
            try:
                fd = jobfiles.open_file(folder, rel)
            except OSError:
                continue  # gone, or swapped for a link since the walk saw it
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(fd)
                info = tarfile.TarInfo(f"{arcname}/{rel}")
                info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), st.st_mode & 0o777
                tar.addfile(info, f)

    def closing() -> Iterator[bytes]:
        try:
            yield from _tar_stream(add)
        finally:
            os.close(folder)

    return closing()


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
