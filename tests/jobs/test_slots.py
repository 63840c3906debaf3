"""Job slots that follow demand (issue 64), the worker's side, against a real Redis: an extra slot `gpudeck up`
started (`worker --idle-exit`) leaves placement under the scheduler's lock once idle for its time, and serves a job
a round placed on it just before; a real worker process given --idle-exit exits, cleanly, once idle. (The
scheduler's side: tests/jobs/test_gpu_share.py; `up` growing a GPU's slots: tests/e2e/test_gpu_share.py.)"""

from __future__ import annotations

import json
import socket
import sys
import time

import pytest

from jobs import control, worker
from jobs.errors import ConfigError
from jobs.keys import drain_key, private_queue, rq_job_id, slots_wanted_key
from jobs.run.launch import WorkerContext
from jobs.settings import Settings
from jobs.store import JobStore
from tests.support.policy import DEFAULTS
from tests.support.workers import register

WHOLE_GPU = {"model": "lenet", "dataset": "synthetic:8x8x1", "gpus": 1, "params": {"steps": 2}}


def test_an_idle_extra_slot_leaves_placement_yet_serves_a_job_placed_as_it_went(settings, redis):
    register(redis, "box.gpu0.7", gpus=("0",))
    w = worker.GpudeckWorker(
        [private_queue("box.gpu0.7")], name="box.gpu0.7", connection=redis, context=WorkerContext(settings, "box")
    )
    placed, _ = control.submit(redis, WHOLE_GPU, DEFAULTS)  # (placed on it: the round that ran just before)
    job, _ = w.retire()
    assert job.id == rq_job_id(placed["id"], 1) and not redis.exists(drain_key("box.gpu0.7"))  # it stays
    t0 = time.monotonic()
    assert w.dequeue_job_and_maintain_ttl(30, max_idle_time=1) is None  # idle for its time: it goes
    assert time.monotonic() - t0 < 15 and redis.exists(drain_key("box.gpu0.7"))
    late, _ = control.submit(redis, WHOLE_GPU, DEFAULTS)
    assert JobStore(redis).get(late["id"])["status"] == "queued"  # nothing is placed on a slot that went


def test_a_worker_given_idle_exit_exits_cleanly_once_idle(spawn, child_env):
    proc = spawn("worker", "--cpu", "--idle-exit", "1", env=child_env)
    assert proc.proc.wait(60) == 0
    assert "idle for 1 seconds, quitting" in proc.log.read_text()


def test_the_slot_settings_read_as_the_readme_says():
    slots = lambda env: (lambda s: (s.jobs_per_gpu, s.max_jobs_per_gpu))(Settings.from_env(env))  # noqa: E731
    assert slots({}) == (1, 4)  # a default `up`: one a GPU, growing to 4
    assert slots({"GPUDECK_JOBS_PER_GPU": "2"}) == (2, 2)  # the operator fixed them
    assert slots({"GPUDECK_JOBS_PER_GPU": "2", "GPUDECK_MAX_JOBS_PER_GPU": "6"}) == (2, 6)
    for env, words in (
        ({"GPUDECK_MAX_JOBS_PER_GPU": "17"}, "a whole number from 1 to 16"),
        ({"GPUDECK_JOBS_PER_GPU": "4", "GPUDECK_MAX_JOBS_PER_GPU": "2"}, "at least GPUDECK_JOBS_PER_GPU (4)"),
    ):
        with pytest.raises(ConfigError, match="GPUDECK_MAX_JOBS_PER_GPU") as err:
            Settings.from_env(env)
        assert words in str(err.value)


def test_up_starts_a_slot_where_wanted_one_at_a_time_and_waits_after_one_that_failed(settings, redis, monkeypatch):
    """`gpudeck up`'s side (jobs.supervisor.Stack._grow), its workers replaced by a command that fails at once (as a
    worker refused by its GPU's missing MPS daemon would): one is started where a slot is wanted, and none more
    there for a while after it failed, not one a second."""
    from jobs import supervisor

    monkeypatch.setattr(supervisor, "python_module", lambda *_: [sys.executable, "-c", "raise SystemExit(3)"])
    stack = supervisor.Stack(settings, host="127.0.0.1", port=0, gpus=["0"], cpu_workers=0)
    stack._served = ["0"]
    redis.set(slots_wanted_key(socket.gethostname()), json.dumps({"0": 2, "7": 1}), ex=60)
    stack._grow(now=100.0)
    stack._grow(now=100.5)  # (not before GROW_EVERY_S)
    assert [w.extra_of for w in stack.workers] == ["0"]  # one, on a GPU it serves; not on GPU 7
    stack.workers[0].proc.wait(30)
    stack._grow(now=102.0)
    assert stack.workers == []  # it failed: gone, not restarted, and none more yet
    stack._grow(now=102.0 + supervisor.HEALTHY_S + 1)
    assert [w.extra_of for w in stack.workers] == ["0"]
    stack.workers[0].proc.wait(30)
