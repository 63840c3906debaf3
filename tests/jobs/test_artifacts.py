"""A job dir as the API serves it (jobs.artifacts), on real files: what is listed, what a path may reach, the
archive stream, and the answer where this host does not see the job dir."""

from __future__ import annotations

import io
import os
import socket
import tarfile
import threading

import pytest

from jobs import artifacts
from jobs.errors import BadRequest, NotFound
from jobs.settings import Settings


@pytest.fixture
def job_dir(tmp_path):
    root = tmp_path / "home" / "jobs" / "7"
    (root / "checkpoints").mkdir(parents=True)
    (root / "model.keras").write_bytes(b"m" * 100)
    (root / "checkpoints" / "ckpt-1.index").write_bytes(b"i" * 10)
    (root / "checkpoints" / "ckpt-1.data").write_bytes(os.urandom(3 << 20))  # over one stream chunk
    (root / "out").symlink_to(tmp_path)  # pointing out of the job dir
    (root / "inner").symlink_to(root / "model.keras")  # pointing inside it
    (tmp_path / "secret").write_text("no")
    return root


def test_the_listing_holds_the_files_of_the_job_dir_and_no_link_out_of_it(job_dir):
    listing = artifacts.listing(job_dir)
    assert [f["path"] for f in listing["files"]] == [
        "checkpoints/ckpt-1.data",
        "checkpoints/ckpt-1.index",
        "inner",
        "model.keras",
    ]
    assert listing["total_bytes"] == (3 << 20) + 10 + 100 + 100 and not listing["truncated"]
    assert [f["path"] for f in artifacts.listing(job_dir, "checkpoints/")["files"]] == [
        "checkpoints/ckpt-1.data",
        "checkpoints/ckpt-1.index",
    ]


@pytest.mark.parametrize("bad", ["../secret", "/etc/passwd", "checkpoints/../../secret", "a\\b", "x\0y"])
def test_a_path_that_would_leave_the_job_dir_is_bad_input(job_dir, bad):
    with pytest.raises(BadRequest):
        artifacts.opened(job_dir, bad)


def test_a_symlink_out_of_the_job_dir_is_not_there_and_one_inside_is(job_dir):
    for out in ("out", "out/secret"):
        with pytest.raises(NotFound):
            artifacts.opened(job_dir, out)
    fd, folder = artifacts.opened(job_dir, "inner")
    assert not folder and os.read(fd, 1000) == b"m" * 100
    os.close(fd)
    with pytest.raises(NotFound, match="does not exist"):
        artifacts.opened(job_dir, "nothing")


def test_a_folder_streams_as_a_tar_gz_of_its_files(job_dir):
    stream = b"".join(artifacts.tar_stream(artifacts.opened(job_dir, ".")[0], "job-7"))
    with tarfile.open(fileobj=io.BytesIO(stream), mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == [
            "job-7/checkpoints/ckpt-1.data",
            "job-7/checkpoints/ckpt-1.index",
            "job-7/model.keras",
        ]  # no link, in or out
        got = tar.extractfile(members["job-7/checkpoints/ckpt-1.data"]).read()
    assert got == (job_dir / "checkpoints" / "ckpt-1.data").read_bytes()


def test_a_client_that_goes_away_stops_the_archive(job_dir):
    (job_dir / "big").write_bytes(os.urandom(16 << 20))  # more than the stream holds in flight (~8 MiB)
    stream = artifacts.tar_stream(artifacts.opened(job_dir, ".")[0], "job-7")
    next(stream)
    assert any(t.name == "gpudeck-tar" for t in threading.enumerate())
    stream.close()  # what the server does when the client hangs up
    assert not any(t.name == "gpudeck-tar" for t in threading.enumerate())  # the writer ended with it


def test_a_job_dir_this_host_does_not_see_names_the_host_that_has_it(tmp_path):
    settings = Settings(home=tmp_path / "home")
    elsewhere = {"id": 9, "worker": "gpu-box-2.gpu0.123"}
    with pytest.raises(NotFound, match="on host gpu-box-2 .*share GPUDECK_HOME"):
        artifacts.job_dir(settings, elsewhere)
    here = {"id": 9, "worker": f"{socket.gethostname()}.cpu.1"}
    with pytest.raises(NotFound, match="has no files"):
        artifacts.job_dir(settings, here)
