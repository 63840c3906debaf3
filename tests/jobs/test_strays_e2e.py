"""Issue 23 #3 and #4: nothing a job started outlives it — not a child that dropped GPUDECK_RUN_ID and left the
session, not a double fork with an empty environment, not a loop that forks every 2 ms — at its normal end or at
a cancel; and a stray that holds the job's output open blocks neither the job's end nor the worker. Both with the
sandbox (the PID namespace ends them) and without one (GPUDECK_SANDBOX=off: the work-horse, a child subreaper,
ends every descendant)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from jobs.run.sandbox import unavailable
from tests.support.live import alive, until, wait_job

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[1] / "support" / "scripts"


def strays(tag: str) -> list[int]:
    """Living processes of strays.py's kind `tag` (`sleep 3<tag>1`, `…2`, `…3`)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd[:1] == [b"sleep"] and len(cmd) > 1 and cmd[1][:2] == f"3{tag}".encode() and alive(int(entry)):
            found.append(int(entry))
    return found


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_no_process_outlives_its_job_and_none_blocks_the_worker(sandbox, command_client, spawn, child_env, settings):
    if sandbox == "auto":
        assert unavailable() is None, f"this test needs the sandbox: {unavailable()}"
    tag = "5" if sandbox == "auto" else "6"
    source = Path(settings.home).parent / "roots" / "strays"
    source.mkdir(parents=True)
    shutil.copy(SCRIPTS / "strays.py", source)
    spawn("worker", "--cpu", env={**child_env, "GPUDECK_SANDBOX": sandbox})
    client = command_client

    def run(*args: str) -> int:
        spec = {"command": ["python", "strays.py", tag, *args], "source": str(source)}
        return client.post("/api/v1/jobs", json=spec).json["id"]

    ended = run("end")  # its main process exits at once, leaving the three kinds behind
    job, _ = wait_job(client, ended, timeout=90)
    assert job["status"] == "succeeded", job
    until(lambda: not strays(tag), 5, f"no stray of job {ended} left: {strays(tag)}")

    waiting = run("wait")
    until(lambda: client.get(f"/api/v1/jobs/{waiting}/logs").text.count("started"), 60, "the strays started")
    assert strays(tag)
    client.post(f"/api/v1/jobs/{waiting}/cancel")
    job, _ = wait_job(client, waiting, timeout=60)
    assert job["status"] == "canceled", job
    until(lambda: not strays(tag), 5, f"no stray of the canceled job {waiting} left: {strays(tag)}")

    held = run("end", "hold")  # the strays hold its stdout open: it ends all the same, within seconds
    t0 = time.monotonic()
    job, _ = wait_job(client, held, timeout=60)
    assert job["status"] == "succeeded" and time.monotonic() - t0 < 30, job
    next_one = client.post("/api/v1/jobs", json={"command": "echo next"}).json["id"]
    job, _ = wait_job(client, next_one, timeout=60)  # the worker is free for the next job
    assert job["status"] == "succeeded", job
    until(lambda: not strays(tag), 5, f"no stray left: {strays(tag)}")
