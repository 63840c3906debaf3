"""Archives whose entries cannot be written as named are refused by name (a 4xx), never a server error, and
leave nothing behind; found by an independent run against a live stack (issue 17, defect 4)."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from jobs import archives

LONG = "a" * 4000


def tar(*entries: tuple[str, str, bytes | str]) -> io.BytesIO:
    """A tar of (kind, name, content or link target) entries, in order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for kind, name, data in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            else:
                info.type, info.linkname = tarfile.SYMTYPE, data
                t.addfile(info)
    buf.seek(0)
    return buf


def zipped(name: str) -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(name, b"x")
    buf.seek(0)
    return buf


@pytest.mark.parametrize(
    "archive, words",
    [
        (tar(("file", f"data/{LONG}", b"x")), "name too long"),
        (zipped(f"data/{LONG}"), "name too long"),
        (tar(("file", "x", b"1"), ("dir", "x", b"")), "'x' cannot be written"),
        (tar(("file", "x", b"1"), ("file", "x/child", b"2")), "'x/child' cannot be written"),
        (tar(("link", "l", ""), ("file", "l", b"2")), "'l' cannot be written"),
    ],
    ids=["long-name-tar", "long-name-zip", "file-then-folder", "child-of-a-file", "empty-link-then-file"],
)
def test_entries_that_cannot_be_written_are_refused_by_name(tmp_path: Path, archive, words):
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(archives.ArchiveRefused, match=words) as refused:
        archives.extract(archive, dest, 1 << 20, 100)
    assert len(str(refused.value)) < 400  # a 4,000-character name is cut short in the message
    archives.remove(dest)
    assert not dest.exists() and list(tmp_path.iterdir()) == []


def test_the_api_answers_422_for_them(client, settings):
    resp = client.post(
        "/api/v1/datasets",
        data={"name": "d", "version": "1", "file": (tar(("file", "x", b"1"), ("dir", "x", b"")), "d.tar")},
    )
    assert resp.status_code == 422 and "'x' cannot be written" in resp.json["message"]
    assert list((settings.datasets_dir / ".staging").iterdir()) == []
