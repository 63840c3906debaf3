"""Stored data over time, on real files and a real Redis: the GPUDECK_MIN_FREE floor (507 for new jobs and
uploads, /healthz), a Redis that cannot save (503, never a lost write), a log that finds the disk full, the
retention policy (time given through `now`, not slept), what a retry resumes from, and the settings' errors."""

from __future__ import annotations

import io
import os
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from redis import Redis

from api import create_app
from jobs import control, disk, outcome
from jobs.errors import ConfigError
from jobs.keys import job_key, rq_job_id
from jobs.redis_server import EmbeddedRedis, free_port
from jobs.run.launch import LogFile
from jobs.settings import Settings
from jobs.store import JobStore
from models.states import Reason, Status
from tests.support.policy import DEFAULTS
from tests.support.workers import register

GOOD = {"model": "lenet", "dataset": "synthetic", "params": {"steps": 20}}
DAY = 86400.0


def _tar() -> bytes:
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("data/x.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()


def test_below_the_floor_new_jobs_and_uploads_are_507_and_nothing_is_stored(settings, redis):
    free, _ = disk.space(settings.home)
    floor = free + (1 << 40)  # a terabyte more than there is: "below the floor" on any machine
    client = create_app({"SETTINGS": replace(settings, min_free=floor), "REDIS": redis}).test_client()
    answers = {
        "job": client.post("/api/v1/jobs", json=GOOD),
        "sweep": client.post("/api/v1/sweeps", json={"base": GOOD, "grid": {"params.lr": [0.1, 0.2]}}),
        "dataset": client.post(
            "/api/v1/datasets",
            data={"name": "cifar", "version": "v1", "file": (io.BytesIO(_tar()), "d.tar.gz")},
            content_type="multipart/form-data",
        ),
        "source": client.post(
            "/api/v1/sources",
            data={"file": (io.BytesIO(_tar()), "src.tar.gz")},
            content_type="multipart/form-data",
        ),
    }
    for what, resp in answers.items():
        assert resp.status_code == 507, (what, resp.json)
        body = resp.json
        assert body["error"] == "insufficient_storage" and "GPUDECK_MIN_FREE" in body["message"], body
        assert "gpudeck rm" in body["message"] and body["details"]["min_free_bytes"] == floor
    assert client.get("/api/v1/jobs").json["jobs"] == []
    assert client.get("/api/v1/datasets").json["datasets"] == []
    health = client.get("/healthz").json
    assert health["status"] == "degraded" and health["disk"]["low"] is True
    assert health["disk"]["min_free_bytes"] == floor and 0 < health["disk"]["free_bytes"] < floor

    # Room again (the floor back to its default): the same job is taken.
    client = create_app({"SETTINGS": settings, "REDIS": redis}).test_client()
    assert client.post("/api/v1/jobs", json=GOOD).status_code == 201
    assert client.get("/healthz").json["disk"]["low"] is False


def test_a_worker_takes_no_job_while_the_disk_is_below_the_floor(settings, redis, monkeypatch, caplog):
    from jobs import worker
    from jobs.keys import private_queue
    from jobs.run.launch import WorkerContext

    rec, _ = control.submit(redis, GOOD, DEFAULTS)
    free, _ = disk.space(settings.home)
    monkeypatch.setattr(worker, "LOW_DISK_POLL_S", 0.05)
    low = WorkerContext(replace(settings, min_free=free + (1 << 40)), "w")
    register(redis, "w")  # (as `gpudeck worker` registers itself: the scheduler hands it jobs)
    w = worker.GpudeckWorker([private_queue("w")], name="w", connection=redis, context=low)
    assert w.dequeue_job_and_maintain_ttl(None) is None  # a burst worker: nothing it may take
    stop = threading.Timer(0.5, lambda: setattr(w, "_stop_requested", True))
    stop.start()
    assert w.dequeue_job_and_maintain_ttl(5) is None  # waited, then was asked to stop: still no job
    assert "takes no new job" in caplog.text and "below GPUDECK_MIN_FREE" in caplog.text
    assert JobStore(redis).get(rec["id"])["status"] == "queued"

    w._stop_requested = False
    w.context = WorkerContext(settings, "w")  # room again
    job, _ = w.dequeue_job_and_maintain_ttl(5)
    assert job.id == rq_job_id(rec["id"], 1)


def test_the_metrics_say_what_is_free_and_what_jobs_datasets_and_redis_take(settings, redis, client):
    job_dir = settings.job_dir(1)
    job_dir.mkdir(parents=True)
    (job_dir / "model.keras").write_bytes(b"m" * 5000)
    disk._used.clear()  # (measured at most once a minute per home)
    text = client.get("/metrics").get_data(as_text=True)
    values = {
        line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line.startswith("gpudeck_disk")
    }
    assert values['gpudeck_disk_used_bytes{kind="jobs"}'] == 5000
    assert values['gpudeck_disk_used_bytes{kind="datasets"}'] == 0
    assert values['gpudeck_disk_used_bytes{kind="redis"}'] >= 0  # the session's Redis, wherever it keeps its files
    assert abs(values["gpudeck_disk_free_bytes"] - shutil.disk_usage(settings.home).free) < 1 << 30


@pytest.fixture
def failing_redis(tmp_path):
    """A real redis-server whose snapshot cannot be saved (its file name is taken by a folder), the way a full
    disk fails it: Redis then refuses every write with MISCONF."""
    server = EmbeddedRedis(tmp_path / "redis", port=free_port(), appendonly=False)
    url = server.start()
    client = Redis.from_url(url)
    client.config_set("save", "3600 1")
    (tmp_path / "redis" / "dump.rdb").mkdir()
    client.bgsave()
    deadline = time.monotonic() + 20
    while client.info("persistence")["rdb_last_bgsave_status"] != "err" or client.info("persistence").get(
        "rdb_bgsave_in_progress"
    ):
        assert time.monotonic() < deadline, "the snapshot did not fail"
        time.sleep(0.05)
    yield client
    server.stop(timeout=0.5)  # (it cannot save, so it refuses SIGTERM's shutdown: no use waiting 5 s for it)


def test_a_redis_that_cannot_save_refuses_writes_with_a_clear_503_and_health_says_so(settings, failing_redis):
    client = create_app({"SETTINGS": settings, "REDIS": failing_redis}).test_client()
    resp = client.post("/api/v1/jobs", json=GOOD)
    assert resp.status_code == 503 and resp.json["error"] == "redis_cannot_write", resp.json
    assert "cannot save to its disk" in resp.json["message"] and "Free space" in resp.json["message"]
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json["status"] == "degraded"
    assert health.json["redis"].startswith("cannot write: its last snapshot could not be saved")
    assert client.get("/api/v1/jobs").status_code == 200  # reads still answer


def test_a_write_refused_inside_a_pipeline_reads_as_cannot_write(failing_redis):
    """Issue 23 #12: redis-py names a refusal inside a transaction `Command # N (…) of pipeline caused error:
    MISCONF …`; that is still Redis that cannot save, not Redis that is away."""
    from redis.exceptions import RedisError

    from jobs.store import cannot_write

    with failing_redis.pipeline() as pipe:
        pipe.set("gpudeck:x", 1)
        pipe.incr("gpudeck:y")
        with pytest.raises(RedisError) as refused:
            pipe.execute()
    assert "pipeline caused error" in str(refused.value) and cannot_write(refused.value)


def test_a_log_that_finds_the_disk_full_drops_lines_instead_of_failing_the_job(tmp_path):
    with LogFile(Path("/dev/full")) as log_file:  # every write: ENOSPC
        log_file.write("a line\n")
        log_file.write("another\n")
        assert log_file.full
    with LogFile(tmp_path / "log.txt") as log_file:
        log_file.write("kept\n")
        assert not log_file.full
    assert (tmp_path / "log.txt").read_text() == "kept\n"


def test_a_process_that_failed_on_a_full_disk_ends_disk_full_not_oom_or_exit_nonzero():
    tf_tail = [
        "Traceback (most recent call last):",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: ckpt-64_temp/part-00000-of-00001.data"
        "-00000-of-00001.tempstate1; No space left on device",
    ]
    assert outcome.disk_full(1, tf_tail) and outcome.out_of_memory(1, tf_tail, False)  # (it reads like both)
    end = outcome.of_job(outcome.Facts(None, 1, False, oom=True, full=True))
    assert (end.status, end.reason, end.retry) == (Status.FAILED, Reason.DISK_FULL, False)
    assert "retry" in end.message
    assert outcome.disk_full(1, ["OSError: [Errno 28] No space left on device: 'out.bin'"])
    assert not outcome.disk_full(0, ["No space left on device"])  # a clean exit is a clean exit
    assert outcome.of_task(outcome.Facts(None, 1, oom=False, command=True, full=True))[1].reason == Reason.DISK_FULL


def _ended(redis, settings: Settings, status: str, ended_at: float) -> int:
    rec, _ = control.submit(redis, GOOD, DEFAULTS)
    store = JobStore(redis)
    store.transition(rec["id"], ("queued",), status="running", started_at=ended_at - 60)
    store.transition(rec["id"], ("running",), status=status, ended_at=ended_at)
    settings.job_dir(rec["id"]).mkdir(parents=True)
    (settings.job_dir(rec["id"]) / "log.txt").write_text("x" * 100)
    return rec["id"]


def test_retention_deletes_what_the_policy_says_and_nothing_else(settings, redis, caplog):
    now = 1_800_000_000.0
    jobs = {
        "old failed": _ended(redis, settings, "failed", now - 15 * DAY),
        "new failed": _ended(redis, settings, "failed", now - 13 * DAY),
        "old canceled": _ended(redis, settings, "canceled", now - 20 * DAY),
        "old succeeded": _ended(redis, settings, "succeeded", now - 89 * DAY),
        "older succeeded": _ended(redis, settings, "succeeded", now - 91 * DAY),
    }
    running, _ = control.submit(redis, GOOD, DEFAULTS)
    JobStore(redis).transition(running["id"], ("queued",), status="running", started_at=now - 100 * DAY)
    off = control.apply_retention(redis, settings, now=now)  # no GPUDECK_RETENTION: nothing goes
    assert off == [] and all(settings.job_dir(i).exists() for i in jobs.values())

    policy = replace(
        settings, retention=Settings.from_env({"GPUDECK_RETENTION": "failed,canceled:14d;succeeded:90d"}).retention
    )
    deleted = control.apply_retention(redis, policy, now=now)
    gone = {"old failed", "old canceled", "older succeeded"}
    assert sorted(deleted) == sorted(jobs[k] for k in gone)
    store = JobStore(redis)
    for what, job_id in jobs.items():
        assert bool(redis.exists(job_key(job_id))) == (what not in gone), what
        assert settings.job_dir(job_id).exists() == (what not in gone), what
    assert store.get(running["id"])["status"] == "running"
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retention: deleted job")]
    assert len(logged) == 3 and any(f"job {jobs['old failed']} (failed 15.0 days ago" in m for m in logged), logged
    assert control.apply_retention(redis, policy, now=now) == []  # applied again: nothing more


def test_a_retried_model_job_resumes_from_the_job_it_retries_unless_asked_not_to(settings, redis, client):
    job_id = _ended(redis, settings, "failed", time.time())
    resp = client.post(f"/api/v1/jobs/{job_id}/retry")
    assert resp.status_code == 201 and resp.json["resumes"] == job_id
    resp = client.post(f"/api/v1/jobs/{job_id}/retry", json={"resume": False})
    assert resp.status_code == 201 and resp.json["resumes"] is None
    for body, field in (({"resume": "yes"}, "resume"), ({"fresh": True}, "body"), ([1], "body")):
        resp = client.post(f"/api/v1/jobs/{job_id}/retry", json=body)
        assert resp.status_code == 400 and resp.json["details"]["field"] == field, resp.json


@pytest.mark.parametrize(
    "env, words",
    [
        ({"GPUDECK_RETENTION": "running:3d"}, "'running' is not an ended status"),
        ({"GPUDECK_RETENTION": "failed"}, "STATUSES:AGE"),
        ({"GPUDECK_RETENTION": "failed:3 days"}, "90m, 1h30m, 12h or 2w"),
        ({"GPUDECK_RETENTION": "failed:3d;failed:4d"}, "two rules"),
        ({"GPUDECK_KEEP_CHECKPOINTS": "0"}, "at least 1 or 'all'"),
        ({"GPUDECK_MIN_FREE": "lots"}, "512M or 8G"),
    ],
)
def test_bad_storage_settings_name_the_variable(env, words):
    with pytest.raises(ConfigError, match=list(env)[0]) as err:
        Settings.from_env(env)
    assert words in str(err.value)


def test_storage_settings_read_as_documented():
    s = Settings.from_env({"GPUDECK_KEEP_CHECKPOINTS": "all", "GPUDECK_MIN_FREE": "0", "GPUDECK_RETENTION": " "})
    assert (s.keep_checkpoints, s.min_free, s.retention) == (None, 0, ())
    s = Settings.from_env({"GPUDECK_KEEP_CHECKPOINTS": "5", "GPUDECK_MIN_FREE": "10G"})
    assert (s.keep_checkpoints, s.min_free) == (5, 10 << 30)
    assert Settings.from_env({}).min_free == 2 << 30 and Settings.from_env({}).keep_checkpoints == 2


def test_an_upload_that_fills_the_disk_part_way_is_a_507_and_leaves_nothing(settings, redis, tmp_path):
    """Issue 23 #7: above the floor when it began, out of space part-way: 507 (not 500), nothing of it kept."""
    import subprocess
    import tarfile

    home = tmp_path / "small-home"
    home.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "gpudeck-507", str(home)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem to fill here ({mounted.stderr.decode().strip()}); needs root")
    try:
        small = replace(settings, home=home, min_free=0)
        client = create_app({"SETTINGS": small, "REDIS": redis}).test_client()
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w:gz") as tar:
            blob = os.urandom(400 << 10)  # 400 KiB that do not compress, into 256
            info = tarfile.TarInfo("data/big.bin")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
        archive.seek(0)
        with client.post("/api/v1/sources", data={"file": (archive, "src.tar.gz")}) as answer:
            assert answer.status_code == 507 and answer.json["error"] == "insufficient_storage", answer.json
            assert "filled up during this request" in answer.json["message"]
        left = [p for p in home.rglob("*") if p.is_file()]
        assert left == [], left  # the staging folder went with it
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)
