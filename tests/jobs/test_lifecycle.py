"""A job's end against a real Redis: an attempt ends only itself, and no worker is judged lost for heartbeats that
Redis could not take (its disk full). Both found by the chaos soak's full-disk phase: the reaper gave a live
work-horse up as lost the moment Redis wrote again, and that horse's late end then ended the next attempt."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from redis import Redis
from rq.job import Job

from jobs import lifecycle, worker
from jobs import reaper as reaper_module
from jobs.keys import attempt_of, rq_job_id
from jobs.outcome import SUCCEEDED
from jobs.reaper import SETTLE_S, Reaper
from jobs.record import Job as Record
from jobs.redis_server import find_redis_server, free_port
from jobs.store import JobStore, cannot_write, write_refusal
from models.states import Status

SPEC = {"model": "lenet", "dataset": "synthetic", "gpus": 0, "max_retries": 2}


def running(store: JobStore, job_id: int) -> None:
    store.create(job_id, SPEC, "gpus-0")
    assert store.transition(job_id, ("queued",), status="running", worker="w1", started_at=time.time())


def test_a_work_horse_given_up_on_does_not_end_the_next_attempt(redis):
    store = JobStore(redis)
    running(store, 1)
    assert lifecycle.worker_lost(redis, 1, store.get(1), "no heartbeat from worker w1 (attempt 1)") == "queued"
    assert store.transition(1, ("queued",), status="starting", worker="w2")  # placed again: attempt 2
    assert lifecycle.end(redis, 1, SUCCEEDED, of_attempt=1) is None  # attempt 1's horse, late
    rec = store.get(1)
    assert (rec["status"], rec["attempt"], rec["worker"]) == ("starting", 2, "w2")
    stale = Record({**rec, "attempt": 1})  # a reaper that read the record before the requeue gives up nothing now
    assert lifecycle.worker_lost(redis, 1, stale, "no heartbeat") is None and store.get(1)["attempt"] == 2
    assert lifecycle.end(redis, 1, SUCCEEDED, of_attempt=2) == "succeeded"


def test_an_earlier_attempts_work_horse_that_died_late_leaves_the_next_attempt_alone(redis):
    """RQ says attempt 1's work-horse died (or gpudeck failed in it) after the job went back in line and its attempt
    2 began: attempt 2 is not ended as worker_lost, nor its trainer killed (the RQ id names the attempt)."""
    store = JobStore(redis)
    running(store, 1)
    assert lifecycle.worker_lost(redis, 1, store.get(1), "preempted, say") == "queued"
    assert store.transition(1, ("queued",), status="running", worker="w2", pid=2**22 + 1)  # (no such process)
    first = Job.create("jobs.task.run_job", args=(1,), id=rq_job_id(1, 1), connection=redis)
    worker.on_job_error(first, RuntimeError, RuntimeError("late"), None)
    worker.on_horse_killed(first, 0, 9, None)
    assert (store.get(1)["status"], store.get(1)["attempt"]) == ("running", 2)
    second = Job.create("jobs.task.run_job", args=(1,), id=rq_job_id(1, 2), connection=redis)
    worker.on_horse_killed(second, 0, 9, None)  # (its own attempt's: lost, retried)
    assert (store.get(1)["status"], store.get(1)["attempt"]) == ("queued", 3)
    assert [attempt_of(i) for i in ("gpudeck-7", "gpudeck-7-3", "gpudeck-7-g1-t0", "gpudeck-7-g1-h1", "x")] == [
        1,
        3,
        None,
        None,
        None,
    ]


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of this test's own, whose snapshots it can make fail (a save point, so that a failed
    snapshot refuses writes: MISCONF, as a full disk does)."""
    binary = find_redis_server()
    major = int(re.search(r"v=(\d+)", subprocess.run([binary, "--version"], capture_output=True, text=True).stdout)[1])
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--appendonly", "no"]
    argv += ["--dir", str(tmp_path)] + (["--enable-protected-configs", "yes"] if major >= 7 else [])
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    client = Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except Exception:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    client.config_set("save", "3600 1")  # (a save point: without one a failed snapshot refuses nothing)
    yield client, f"redis://127.0.0.1:{port}/0", tmp_path
    proc.kill()  # (nothing of it to keep)
    proc.wait(10)


def _snapshot(client: Redis, folder: str) -> None:
    client.config_set("dir", folder)
    client.bgsave()
    while client.info("persistence")["rdb_bgsave_in_progress"]:
        time.sleep(0.02)


def test_no_worker_is_lost_for_heartbeats_redis_could_not_take(own_redis, monkeypatch):
    client, url, folder = own_redis
    monkeypatch.setattr(reaper_module, "redis_uptime_s", lambda redis: 1e6)  # (an old Redis: only refusals count)
    store = JobStore(client)
    running(store, 1)  # no heartbeat: its work-horse cannot write one
    reaper = Reaper(url)
    _snapshot(client, "/proc")  # a snapshot that cannot be written: writes are refused
    assert write_refusal(client) is not None
    with pytest.raises(Exception) as refused:
        store.beat(1, "w1")
    assert cannot_write(refused.value)
    reaper.round()
    _snapshot(client, str(folder))  # it saves again: writes are taken
    assert write_refusal(client) is None
    reaper.round()  # at once: the work-horse has not had the time to beat again
    assert store.get(1)["status"] == Status.RUNNING.value
    reaper.refused_at -= SETTLE_S + 1  # a heartbeat's lifetime later, with still no beat: lost
    reaper.round()
    rec = store.get(1)
    assert (rec["status"], rec["attempt"], rec["reason"]) == ("queued", 2, "worker_lost"), rec


def test_a_preempted_job_is_said_to_have_stopped_no_earlier_than_its_checkpoint(redis):
    """Issue 67 #7: asked to stop at step 0, a trainer saved step 1 on its way out; the message said "preempted …
    at step 0; resumes from the checkpoint of step 1"."""
    from jobs import outcome

    store = JobStore(redis)
    running(store, 1)
    store.update(1, preempted_by={"id": 2, "priority": "high", "step": 0})
    assert lifecycle.end(redis, 1, outcome.STOPPED["preempted"], checkpoint_step=1) == "queued"
    said = store.get(1)["message"]
    assert said == "preempted by job 2 (high) at step 1; resumes from the checkpoint of step 1", said
