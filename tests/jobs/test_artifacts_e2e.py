"""Issue 46 §3 end to end: two worker hosts that share only Redis and an S3-compatible store (moto's server on
127.0.0.1; GPUDECK_ARTIFACTS), and an API on a third home that sees neither's job dirs. A job stopped on the first
(its worker goes: worker_lost, queued again) resumes on the second from the checkpoint the first uploaded; the API
lists and serves a job's files from the store (byte ranges, a folder as .tar.gz); the README's commands download
and delete through it, and deleting a job deletes its objects; the store's credentials reach no job, log or
record."""

from __future__ import annotations

import io
import os
import sys
import tarfile

import pytest
import requests

from jobs.store import JobStore
from tests.support.live import descendants, environ, start_api, until, wait_ended
from tests.support.readme import run_block
from tests.support.s3 import SECRET, s3_store

pytestmark = pytest.mark.slow

LONG = {
    "model": "lenet",
    "dataset": "synthetic:16x16x3",
    "params": {"steps": 100000, "batch_size": 8, "log_every": 10},
    "checkpoint_every": 40,
    "gpus": 0,
}


def test_a_job_stopped_on_one_host_resumes_on_another_from_the_store(spawn, child_env, redis, tmp_path):
    with s3_store() as s3:
        env = {**child_env, **s3.env}
        homes = {name: str(tmp_path / name) for name in ("api", "a", "b")}
        url = start_api(spawn, {**env, "GPUDECK_HOME": homes["api"]})
        first = spawn("worker", "--cpu", env={**env, "GPUDECK_HOME": homes["a"]})
        job = requests.post(f"{url}/api/v1/jobs", json=LONG, timeout=10).json()["id"]
        until(lambda: f"gpudeck/jobs/{job}/checkpoints/checkpoint" in s3.keys(), 120, "a checkpoint in the store")
        # Its host goes: the trainer checkpoints, the job is queued again as worker_lost. (The worker is given the
        # time it takes, as a service manager gives it: killed while the attempt records its end, it would leave
        # the job to the reaper, with nothing recorded of what the store took.)
        first.stop(timeout=120)
        until(lambda: JobStore(redis).get(job)["status"] == "queued", 30, "the job queued again")
        assert JobStore(redis).get(job)["artifacts"]["error"] is None

        spawn("worker", "--cpu", env={**env, "GPUDECK_HOME": homes["b"]})
        resumed = until(lambda: _log_has(url, job, "resumed from checkpoints/ckpt-"), 120, "the resume on host b")
        assert "which an earlier attempt left in the artifact store (s3://lab/gpudeck)" in resumed
        running = JobStore(redis).get(job)
        trainer = [environ(p) for p in descendants(int(running["pid"])) | {int(running["pid"])}]
        assert trainer and not any("AWS_SECRET_ACCESS_KEY" in e or SECRET in str(e) for e in trainer)
        assert requests.post(f"{url}/api/v1/jobs/{job}/cancel", timeout=10).status_code == 200
        stopped = wait_ended(url, job)
        assert stopped["status"] == "canceled" and stopped["attempt"] == 2

        # A short job on host b: its model and result go up at its end. The API (no job dir of its own) serves
        # them from the store: the listing, a file whole and in a range, a folder as .tar.gz.
        short = {**LONG, "params": {**LONG["params"], "steps": 4}, "checkpoint_every": 2}
        done = requests.post(f"{url}/api/v1/jobs", json=short, timeout=10).json()["id"]
        ended = wait_ended(url, done)
        assert ended["status"] == "succeeded" and ended["artifacts"]["error"] is None, ended
        files = f"{url}/api/v1/jobs/{done}/files"
        listing = requests.get(files, timeout=30).json()
        assert listing["store"] == "s3://lab/gpudeck"
        assert {"model.keras", "result.json", "checkpoints/checkpoint"} <= {f["path"] for f in listing["files"]}
        local = (tmp_path / "b" / "jobs" / str(done) / "model.keras").read_bytes()
        assert requests.get(f"{files}/model.keras", timeout=30).content == local
        part = requests.get(f"{files}/model.keras", headers={"Range": "bytes=10-19"}, timeout=30)
        assert part.status_code == 206 and part.content == local[10:20]
        folder = requests.get(f"{files}/checkpoints", params={"archive": "tar.gz"}, timeout=30)
        with tarfile.open(fileobj=io.BytesIO(folder.content), mode="r:gz") as tar:
            assert "checkpoints/checkpoint" in tar.getnames()
        assert requests.get(f"{files}/nothing", timeout=30).status_code == 404
        assert requests.get(f"{files}/../../etc/passwd", timeout=30).status_code in (400, 404)

        # No credential anywhere a user reads.
        for shown in (requests.get(f"{url}/api/v1/jobs/{i}", timeout=10).text for i in (job, done)):
            assert SECRET not in shown and "AWS_SECRET" not in shown
        assert SECRET not in requests.get(f"{url}/api/v1/jobs/{job}/logs", timeout=10).text

        # The README's commands, as written (job 2 is the short one), through the API that has only the store.
        assert done == 2
        readme_env = {**env, "GPUDECK_API": url, "PATH": f"{os.path.dirname(sys.executable)}:{env['PATH']}"}
        (tmp_path / "readme").mkdir()
        listed, fetched, gone = run_block("artifacts", int(url.rsplit(":", 1)[1]), tmp_path / "readme", readme_env)
        assert "model.keras" in listed and (tmp_path / "readme" / "model.keras").read_bytes() == local
        assert gone.startswith("deleted 2 jobs: 1-2 (") and "objects deleted from the store)" in gone, gone
        assert s3.keys() == []


def _log_has(url: str, job: int, words: str) -> str | None:
    text = requests.get(f"{url}/api/v1/jobs/{job}/logs", timeout=10).text
    return text if words in text else None
