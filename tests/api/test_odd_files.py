"""Issue 23 #5 and #8: a job dir holding what is not a regular file — a FIFO, a socket, a link loop, a link to a
FIFO — never blocks a server thread or answers 500: the listing leaves them out, a GET is a 404 that says why."""

from __future__ import annotations

import os
import socket
import threading

from jobs import control
from tests.support.policy import DEFAULTS

GOOD = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}}


def test_only_regular_files_are_listed_and_served(client, redis, settings):
    rec, _ = control.submit(redis, GOOD, DEFAULTS)
    job_dir = settings.job_dir(rec["id"])
    job_dir.mkdir(parents=True)
    (job_dir / "model.keras").write_bytes(b"weights")
    os.mkfifo(job_dir / "fifo")
    os.symlink("loop-b", job_dir / "loop-a")
    os.symlink("loop-a", job_dir / "loop-b")
    os.symlink("fifo", job_dir / "to-fifo")
    (job_dir / "sub").mkdir()
    os.symlink("../sub", job_dir / "sub" / "up")  # a folder link that would loop a walk
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(job_dir / "sock"))
        listed = client.get(f"/api/v1/jobs/{rec['id']}/files")
        assert listed.status_code == 200, listed.json
        assert [f["path"] for f in listed.json["files"]] == ["model.keras"]
        answers: dict[str, tuple[int, str]] = {}

        def get(name: str) -> None:
            resp = client.get(f"/api/v1/jobs/{rec['id']}/files/{name}")
            answers[name] = (resp.status_code, resp.get_json()["message"] if resp.is_json else "")

        threads = [threading.Thread(target=get, args=(n,), daemon=True) for n in ("fifo", "to-fifo", "sock", "loop-a")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads), "a GET of a FIFO blocked its thread"
    assert answers["fifo"][0] == answers["to-fifo"][0] == answers["sock"][0] == 404, answers
    assert "not a regular file" in answers["fifo"][1] and "not a regular file" in answers["sock"][1]
    assert answers["loop-a"][0] == 404 and "cannot be read" in answers["loop-a"][1], answers
    with client.get(f"/api/v1/jobs/{rec['id']}/files/model.keras") as resp:  # (a streamed file: closed after)
        assert resp.status_code == 200 and resp.data == b"weights"
