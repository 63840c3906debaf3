"""What `gpudeck run` sends: a project folder without what `.gitignore` and `.gpudeckignore` leave out (git's own
pattern rules, nested files included; `.git/` always out), its content digest (the server's `src:<sha256>`),
its git commit, and the archive, built only when the server does not hold that tree yet."""

from __future__ import annotations

import os
import stat
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from models import sourcetree
from models.sourcetree import human

IGNORE_FILES = (".gitignore", ".gpudeckignore")
"""Read in every folder, in this order: a .gpudeckignore can take back what a .gitignore leaves out."""
ALWAYS_OUT = (".git",)


class PackError(Exception):
    """The folder cannot be sent as it is (over the limit, a link out of it); the message says what to change."""


@dataclass
class Packed:
    root: Path
    names: list[str]
    sizes: dict[str, int]
    sha256: str = ""
    git: dict[str, str] = field(default_factory=dict)

    @property
    def size_bytes(self) -> int:
        return sum(self.sizes.values())

    @property
    def ref(self) -> str:
        return sourcetree.ref(self.sha256)

    def largest(self, n: int = 3) -> list[tuple[str, int]]:
        return sorted(self.sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def _specs(folder: Path) -> list[pathspec.GitIgnoreSpec]:
    specs = []
    for name in IGNORE_FILES:
        try:
            specs.append(pathspec.GitIgnoreSpec.from_lines((folder / name).read_text(errors="replace").splitlines()))
        except OSError:
            continue
    return specs


def _ignored(rel: str, is_dir: bool, rules: list[tuple[str, pathspec.GitIgnoreSpec]]) -> bool:
    """Git's rule: the deepest ignore file with a matching pattern decides (the last matching pattern within it)."""
    verdict = False
    for base, spec in rules:
        sub = rel[len(base) + 1 :] if base else rel
        result = spec.check_file(sub + "/" if is_dir else sub)
        if result.include is not None:
            verdict = result.include
    return verdict


def collect(root: Path) -> Packed:
    """The files of `root` that go into the upload (regular files and symlinks), with their sizes."""
    root = root.resolve()
    names: list[str] = []
    sizes: dict[str, int] = {}
    stack: list[tuple[str, list[tuple[str, pathspec.GitIgnoreSpec]]]] = [("", [])]
    while stack:
        rel_dir, inherited = stack.pop()
        folder = root / rel_dir
        rules = inherited + [(rel_dir, s) for s in _specs(folder)]
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                if entry.name in ALWAYS_OUT:
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                if _ignored(rel, is_dir, rules):
                    continue
                if is_dir:
                    stack.append((rel, rules))
                elif entry.is_symlink():
                    target = os.path.realpath(entry.path)
                    if not (target == str(root) or target.startswith(str(root) + os.sep)):
                        raise PackError(
                            f"{rel} is a symlink to {os.readlink(entry.path)}, outside {root}: the job could not "
                            f"follow it; copy what it points to into the folder, or list {rel} in .gpudeckignore"
                        )
                    names.append(rel)
                    sizes[rel] = 0
                elif stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                    names.append(rel)
                    sizes[rel] = entry.stat(follow_symlinks=False).st_size
    names.sort()
    packed = Packed(root, names, sizes)
    packed.sha256 = sourcetree.digest(root, names)
    packed.git = git_state(root)
    return packed


def check_size(packed: Packed, max_bytes: int) -> None:
    """PackError naming the largest files when the folder is over the server's limit."""
    if packed.size_bytes > max_bytes:
        big = ", ".join(f"{n} ({human(s)})" for n, s in packed.largest(5))
        raise PackError(
            f"{packed.root} holds {human(packed.size_bytes)} to upload, over the limit of {human(max_bytes)} "
            f"(GPUDECK_SOURCE_MAX_BYTES). The largest files: {big}. Leave data out with .gpudeckignore and give it "
            "as a dataset (--dataset), or raise the limit on the API"
        )


def archive(packed: Packed, dest: Path) -> Path:
    """The folder's files as a tar.gz at `dest`."""
    with tarfile.open(dest, "w:gz", compresslevel=1) as tar:
        for name in packed.names:
            tar.add(packed.root / name, arcname=name, recursive=False)
    return dest


def git_state(root: Path) -> dict[str, str]:
    """The commit and dirtiness of the git checkout `root` is in (empty when it is not one, or git is absent)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"git_commit": commit, "git_dirty": "true" if status.strip() else "false"}
