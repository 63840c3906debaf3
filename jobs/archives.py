"""Safe extraction of uploaded archives (tar in any compression, zip): nothing lands outside the destination,
and size and entry limits count the bytes actually written. Used for datasets and for job sources."""

from __future__ import annotations

import errno
import lzma
import os
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

CHUNK = 1 << 20


MAX_NAME_BYTES = 255
"""Longest file name (one path component) Linux file systems take."""
MAX_PATH = 1024
"""Longest entry name accepted (PATH_MAX is 4096 with the destination in front)."""
ENTRY_ERRNOS = (errno.ENAMETOOLONG, errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENOENT, errno.ELOOP, errno.EINVAL)
"""What the file system says when entries do not fit together (a file then a folder of that name, a child of a
file, an empty link target): the archive's fault, refused by name, unlike a full disk or a permission."""


def shown(name: str, limit: int = 120) -> str:
    """An entry name for a message (a hostile one can be thousands of characters)."""
    return repr(name if len(name) <= limit else name[:limit] + "…")


@contextmanager
def _as_refusal(name: str):
    try:
        yield
    except OSError as exc:
        if exc.errno not in ENTRY_ERRNOS:
            raise
        raise ArchiveRefused(f"entry {shown(name)} cannot be written: {exc.strerror}") from None


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
            raise ArchiveRefused(f"entry {shown(name)} has an absolute path")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise ArchiveRefused(f"entry {shown(name)} points outside the archive (..)")
        if any(len(p.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for p in parts) or len(name) > MAX_PATH:
            raise ArchiveRefused(
                f"entry {shown(name)} has a name too long for a file system ({MAX_NAME_BYTES} bytes a part, "
                f"{MAX_PATH} in all)"
            )
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
            raise ArchiveRefused(f"entry {shown(name)} would be written through a symlink")
        with _as_refusal(name):
            path.mkdir(mode=0o755, parents=True, exist_ok=True)

    def _create(self, name: str, make: Callable[[Path], Any]) -> Any:
        """Create entry `name` with `make(path)` (parents made first); a second entry of that name is refused."""
        path = self.target(name)
        with _as_refusal(name):
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            try:
                made = make(path)
            except FileExistsError:
                raise ArchiveRefused(f"entry {shown(name)} appears twice in the archive") from None
        self.stats.files += 1
        return made

    def write(self, name: str, src: IO[bytes], mode: int = 0) -> None:
        """A regular file; read-only (written content is immutable), executable when `mode` has an x bit."""
        path = self.target(name)
        with self._create(name, lambda p: open(p, "xb")) as out:
            while chunk := src.read(CHUNK):
                self.stats.size_bytes += len(chunk)
                if self.stats.size_bytes > self.max_bytes:
                    raise ArchiveRefused(
                        f"the archive expands to more than {self.max_bytes} bytes (the limit)", too_large=True
                    )
                out.write(chunk)
        os.chmod(path, 0o555 if mode & 0o111 else 0o444)

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
                    ex.write(m.name, src, m.mode)
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
                        ex.write(info.filename, f, mode)
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


def discard(path: Path, aside: Path) -> int:
    """Remove a tree for good: renamed to `aside` first (one rename: gone from its path at once), then deleted;
    the bytes it held (0 when there was nothing)."""
    if not path.exists():
        return 0
    aside.parent.mkdir(parents=True, exist_ok=True)
    os.rename(path, aside)
    freed = tree_bytes(aside)
    remove(aside)
    return freed


def tree_bytes(path: Path) -> int:
    """The bytes of the files under `path` (links not followed; 0 when it is not there). A file that goes while
    it is walked counts as 0."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def remove(path: Path) -> None:
    """Delete an extracted tree (its read-only folders made writable first)."""
    for p in path.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)
