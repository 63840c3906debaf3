"""What `gpudeck run` packs: git's ignore rules (.gitignore and .gpudeckignore, nested, negations), .git left out,
links out of the folder refused, and a folder over the limit refused naming its largest files."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from tui import pack


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def test_ignore_files_are_read_as_git_reads_them(tmp_path: Path):
    root = write(
        tmp_path,
        {
            ".gitignore": "*.ckpt\ndata/\n/build\n",
            ".gpudeckignore": "notes.txt\n!keep.ckpt\n",
            "train.py": "print(1)",
            "notes.txt": "private",
            "a.ckpt": "x",
            "keep.ckpt": "x",
            "data/big.bin": "x" * 100,
            "build/out.o": "x",
            "sub/build/kept.py": "anchored /build only at the root",
            "sub/.gitignore": "*.log\n!important.log\n",
            "sub/run.log": "x",
            "sub/important.log": "x",
            ".git/HEAD": "ref: refs/heads/main",
        },
    )
    packed = pack.collect(root)
    assert packed.names == [
        ".gitignore",
        ".gpudeckignore",
        "keep.ckpt",
        "sub/.gitignore",
        "sub/build/kept.py",
        "sub/important.log",
        "train.py",
    ]
    with tarfile.open(pack.archive(packed, tmp_path / "out.tgz")) as t:
        assert sorted(t.getnames()) == packed.names


def test_git_state_links_and_the_size_limit(tmp_path: Path):
    root = write(tmp_path / "p", {"train.py": "print(1)", "weights.h5": b"\0" * 5000})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    packed = pack.collect(root)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert packed.git == {"git_commit": head, "git_dirty": "true"}  # weights.h5 is not committed
    with pytest.raises(pack.PackError, match=r"over the limit of 1\.0 KiB .* weights\.h5 \(4\.9 KiB\)"):
        pack.check_size(packed, 1024)
    (root / "secrets").symlink_to("/etc")
    with pytest.raises(pack.PackError, match="secrets is a symlink to /etc, outside"):
        pack.collect(root)
