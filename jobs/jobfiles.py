"""The one way the service (root, where it runs as root) reads and writes where a job may write: a job dir, a
build's environment folder, a job's source copy (issue 62 #2, #3). A job owns its dir while it runs, and what it
leaves there — a link to /etc/shadow named `result.json`, a `.gpudeck` folder that is a link into /root, a FIFO
named `model.keras` — must never make a privileged process read, write, upload or export anything else.

The rule, for every path below its folder (`root`):
- each component is opened relative to the folder above it with O_NOFOLLOW (the walk holds a descriptor of each
  folder, so nothing the job renames meanwhile moves the walk elsewhere): no link is followed, `..` and absolute
  paths are refused. (openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS gives the same in one call on Linux >= 5.6; the
  walk works on every kernel and is what runs.) `inside=True` — what the API's downloads of a job dir ask — follows a
  relative link whose target stays below the folder (resolved by the same walk, never by the kernel), at most
  MAX_LINKS of them; an absolute link or one that climbs out is refused;
- only regular files are read (a FIFO would block, a device or a socket is not a file), opened O_NONBLOCK and
  checked with fstat on the descriptor that is then read, at most `limit` bytes;
- a write makes a new file (O_CREAT | O_EXCL | O_NOFOLLOW) in the folder's descriptor and renames it over the name:
  a link at the name is replaced, never written through;
- a library that wants a path gets `/proc/self/fd/N` of a descriptor opened here (`fd_path`), or a copy made here.

`tests/jobs/test_trust_boundary.py` lists the modules that read or write a job's files and fails when another
one opens a path there by itself."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

MAX_LINKS = 40
"""Links followed in one path (`inside=True`), as the kernel's own limit."""
DEFAULT_LIMIT = 64 << 20
"""Most bytes `read_bytes` returns unless told otherwise (a result or a state file is a few KiB)."""
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(OSError):
    """A path the service does not follow: a link, `..`, not a regular file, out of its folder."""

    def __init__(self, rel: str | PurePosixPath, why: str):
        super().__init__(errno.ELOOP, f"{rel}: {why}")
        self.rel, self.why = str(rel), why


def parts(rel: str | PurePosixPath | Path) -> list[str]:
    """`rel`'s components; Refused for an absolute path, `..` or a NUL."""
    text = str(rel)
    if text.startswith("/") or "\0" in text:
        raise Refused(text, "must be a path relative to its folder")
    out = [p for p in PurePosixPath(text).parts if p not in ("", ".")]
    if ".." in out:
        raise Refused(text, "must not climb out with '..'")
    return out


def open_root(root: Path | int) -> int:
    """A new descriptor of `root` (a path the service made, or a descriptor): the folder everything is beneath."""
    if isinstance(root, int):
        return os.dup(root)
    return os.open(root, DIR_FLAGS)


def _walk(root: Path | int, names: list[str], rel: str, inside: bool) -> tuple[int, str]:
    """(a descriptor of the folder that holds the last of `names`, that last name), every folder on the way
    opened without following a link (or, `inside`, following relative links that stay beneath `root`)."""
    stack = [open_root(root)]
    todo = list(names)
    hops = 0
    try:
        while True:
            if not todo:
                raise Refused(rel, "is the folder itself, not a file in it")
            name = todo.pop(0)
            if name == TOP:  # (an absolute link into the folder: from its top again)
                for fd in stack[1:]:
                    os.close(fd)
                del stack[1:]
                continue
            if name == "..":  # (only from a link's target, inside=True)
                if len(stack) == 1:
                    raise Refused(rel, "a link in it leads out of its folder")
                os.close(stack.pop())
                continue
            if not todo:
                return stack.pop(), name
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=stack[-1])
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or not inside:
                    raise _refused_or(exc, rel) from None
                target = _link_target(stack[-1], name, rel, exc, root)
                hops += 1
                if hops > MAX_LINKS:
                    raise Refused(rel, "too many links") from None
                todo[:0] = target
                continue
            stack.append(fd)
    finally:
        for fd in stack:
            os.close(fd)


def _refused_or(exc: OSError, rel: str) -> OSError:
    if exc.errno == errno.ENXIO:  # (a socket, or a FIFO with no writer)
        return Refused(rel, "not a regular file (a folder, a FIFO, a socket or a device)")
    if exc.errno == errno.ELOOP:
        return Refused(rel, "a link (the service follows none a job left)")
    if exc.errno == errno.ENOTDIR:
        return Refused(rel, "a folder on the way is a link or a file")
    return exc


TOP = "\0top"
"""A link target's first component that means: from the folder itself (an absolute link into it)."""


def _link_target(dir_fd: int, name: str, rel: str, exc: OSError, root: Path | int) -> list[str]:
    """The components of the link `name` in `dir_fd` (inside=True): a relative one as it is, an absolute one into
    `root` (a path) from TOP; the original error where it is no link, Refused where it points elsewhere."""
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError:
        raise _refused_or(exc, rel) from None
    if "\0" in target:
        raise Refused(rel, "a link out of its folder")
    if target.startswith("/"):
        top = os.path.realpath(root) if not isinstance(root, int) else None
        if top is None or not (target == top or target.startswith(top.rstrip("/") + "/")):
            raise Refused(rel, "a link out of its folder")
        target = os.path.relpath(target, top)
        return [TOP, *(p for p in PurePosixPath(target).parts if p not in ("", "."))]
    return [p for p in PurePosixPath(target).parts if p not in ("", ".")]


def open_file(root: Path | int, rel: str | PurePosixPath, *, inside: bool = False) -> int:
    """A read-only descriptor of the regular file `rel` below `root` (the module's rule); the caller closes it.
    FileNotFoundError where it is missing, Refused where it is a link, not a regular file or out of `root`."""
    rel = str(rel)
    names = parts(rel)
    hops = 0
    while True:
        dir_fd, name = _walk(root, names, rel, inside)
        try:
            try:
                fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno != errno.ELOOP or not inside:
                    raise _refused_or(exc, rel) from None
                target = _link_target(dir_fd, name, rel, exc, root)
                hops += 1
                if hops > MAX_LINKS:
                    raise Refused(rel, "too many links") from None
                names = names[:-1] + target
                if not names or names[-1] in (TOP, ".."):
                    raise Refused(rel, "not a regular file (a folder)") from None
                continue
        finally:
            os.close(dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise Refused(rel, "not a regular file (a folder, a FIFO, a socket or a device)")
        return fd


def open_dir(root: Path | int, rel: str | PurePosixPath = "", *, inside: bool = False) -> int:
    """A descriptor of the folder `rel` below `root` (itself for ""), reached without following a link."""
    names = parts(rel)
    if not names:
        return open_root(root)
    dir_fd, name = _walk(root, names, str(rel), inside)
    try:
        try:
            return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP or not inside:
                raise _refused_or(exc, str(rel)) from None
            target = _link_target(dir_fd, name, str(rel), exc, root)
    finally:
        os.close(dir_fd)
    if target[:1] == [TOP]:
        names, target = [], target[1:]
    rest = [*names[:-1], *target]
    return open_dir(root, _rejoin(rest), inside=inside)


def _rejoin(names: list[str]) -> str:
    """Components (`..` among them, from a link) as a path `parts` takes, the `..`s applied; Refused above the top."""
    out: list[str] = []
    for n in names:
        if n == "..":
            if not out:
                raise Refused("/".join(names), "a link in it leads out of its folder")
            out.pop()
        elif n != TOP:
            out.append(n)
    return "/".join(out)


def read_bytes(root: Path | int, rel: str | PurePosixPath, limit: int = DEFAULT_LIMIT) -> bytes:
    """The regular file `rel` below `root`, at most `limit` bytes (Refused past that: a result of gigabytes is not
    read into the service's memory)."""
    fd = open_file(root, rel)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Refused(rel, f"larger than the {limit} bytes the service reads of it")
    return data


def read_text(root: Path | int, rel: str | PurePosixPath, limit: int = DEFAULT_LIMIT) -> str:
    return read_bytes(root, rel, limit).decode("utf-8", errors="replace")


def read_from(root: Path | int, rel: str | PurePosixPath, offset: int, limit: int = DEFAULT_LIMIT) -> bytes:
    """Up to `limit` bytes of the regular file `rel` from `offset` (a log or metrics file read as it grows)."""
    fd = open_file(root, rel)
    try:
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)


def is_file(root: Path | int, rel: str | PurePosixPath) -> bool:
    """Whether `rel` is a regular file below `root`, reached through no link."""
    try:
        os.close(open_file(root, rel))
    except OSError:
        return False
    return True


def make_dirs(root: Path | int, rel: str | PurePosixPath, mode: int = 0o755) -> int:
    """A descriptor of the folder `rel` below `root`, each missing component made (a link on the way: Refused)."""
    fd = open_root(root)
    try:
        for name in parts(rel):
            try:
                os.mkdir(name, mode, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _refused_or(exc, str(rel)) from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _parent(root: Path | int, rel: str | PurePosixPath, make: bool) -> Iterator[tuple[int, str]]:
    names = parts(rel)
    if not names:
        raise Refused(str(rel), "is the folder itself, not a file in it")
    fd = make_dirs(root, PurePosixPath(*names[:-1])) if make else open_dir(root, PurePosixPath(*names[:-1]))
    try:
        yield fd, names[-1]
    finally:
        os.close(fd)


def write_bytes(
    root: Path | int, rel: str | PurePosixPath, data: bytes, mode: int = 0o644, *, make: bool = False
) -> None:
    """`data` as the file `rel` below `root`: a new file beside it, renamed over it (a link at `rel` is replaced,
    never written through); `make`: its missing folders made too (none of them a link)."""
    with _parent(root, rel, make) as (dir_fd, name):
        tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(data)
            os.close(fd)
            fd = -1
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise


def write_text(root: Path | int, rel: str | PurePosixPath, text: str, mode: int = 0o644, *, make: bool = False) -> None:
    write_bytes(root, rel, text.encode(), mode, make=make)


def clear_unless_folder(path: Path) -> bool:
    """Remove what stands at `path` (the service's own name in a job's dir) unless it is a real folder: a link or
    a file an earlier attempt left in its place is never followed. Whether a folder is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        return True
    os.unlink(path)
    return False


def unlink(root: Path | int, rel: str | PurePosixPath) -> None:
    """Remove the name `rel` below `root` (a link itself, never what it points at); nothing where it is missing."""
    try:
        with _parent(root, rel, False) as (dir_fd, name):
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def entries(root: Path | int, rel: str | PurePosixPath = "") -> list[tuple[str, os.stat_result]]:
    """The names in the folder `rel` below `root` with their own lstat (a link is a link), sorted."""
    fd = open_dir(root, rel)
    try:
        out = []
        for name in sorted(os.listdir(fd)):
            with contextlib.suppress(OSError):  # (gone since the folder was read)
                out.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
        return out
    finally:
        os.close(fd)


def walk(
    root: Path | int,
    rel: str | PurePosixPath = "",
    skip: tuple[str, ...] = (),
    wanted: Callable[[str], bool] | None = None,
) -> Iterator[tuple[str, os.stat_result]]:
    """Every regular file below the folder `rel` (paths relative to `root`, sorted, with their stat), descending
    into real folders only; `skip`: names of folders of the top not descended into; `wanted`: the file names
    looked at (the others are not even stat'ed: a reader that looks every second at a source tree)."""
    try:
        top = open_dir(root, rel)
    except OSError:
        return
    try:
        for here, _dirs, files, fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            _dirs.sort()
            if here == "." and skip:
                _dirs[:] = [d for d in _dirs if d not in skip]
            for name in sorted(files):
                if wanted is not None and not wanted(name):
                    continue
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    path = PurePosixPath(str(rel) or ".", here, name)
                    yield str(PurePosixPath(*[p for p in path.parts if p != "."])), st
    finally:
        os.close(top)


def copy_file(
    src_root: Path | int,
    src_rel: str | PurePosixPath,
    dst_root: Path | int,
    dst_rel: str | PurePosixPath,
    *,
    link: bool = False,
) -> None:
    """The regular file `src_rel` below `src_root` as `dst_rel` below `dst_root` (its folders made, none of them a
    link; a name already there replaced, never written through): a hard link of the very file opened where `link`
    and the filesystem allow (no space taken), else a copy."""
    fd = open_file(src_root, src_rel)
    try:
        with _parent(dst_root, dst_rel, True) as (dir_fd, name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
            if link:
                try:  # (the magic link of the open file: that inode, whatever the name holds now)
                    os.link(fd_path(fd), name, dst_dir_fd=dir_fd, follow_symlinks=True)
                    return
                except OSError:
                    pass
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.open(name, flags, 0o644, dir_fd=dir_fd)
            try:
                while chunk := os.read(fd, 1 << 20):
                    os.write(out, chunk)
            finally:
                os.close(out)
    finally:
        os.close(fd)


def copy_tree(
    src_root: Path | int,
    src_rel: str | PurePosixPath,
    dst_root: Path | int,
    dst_rel: str | PurePosixPath,
    *,
    link: bool = False,
    leave: tuple[str, ...] = (),
) -> list[str]:
    """The regular files below the folder `src_rel` into the folder `dst_rel` below `dst_root` (copy_file: links,
    FIFOs and the like left out, nothing written through a link); files whose name contains one of `leave` are left
    out; the files copied, relative to both folders."""
    copied = []
    base = PurePosixPath(*parts(src_rel)) if parts(src_rel) else PurePosixPath(".")
    for rel, _st in walk(src_root, src_rel):
        sub = PurePosixPath(rel).relative_to(base) if str(base) != "." else PurePosixPath(rel)
        if any(mark in part for part in sub.parts for mark in leave):
            continue
        try:
            copy_file(src_root, rel, dst_root, PurePosixPath(*parts(dst_rel), *sub.parts), link=link)
        except FileNotFoundError:
            continue
        copied.append(str(sub))
    return copied


def fd_path(fd: int) -> str:
    """A path that opens the very file descriptor `fd` holds (for libraries that take a path): the kernel's magic
    link, which no job can change."""
    return f"/proc/self/fd/{fd}"


@contextlib.contextmanager
def opened(root: Path | int, rel: str | PurePosixPath, *, inside: bool = False) -> Iterator[int]:
    """`open_file` as a context: the descriptor, closed after."""
    fd = open_file(root, rel, inside=inside)
    try:
        yield fd
    finally:
        os.close(fd)
