"""The order of the line, and how a sweep ranks its jobs: engine logic against a real Redis, with nothing trained
(the lifecycle end-to-end tests run real jobs; tests/jobs/test_schedule.py places jobs on GPUs)."""

import time

import pytest

from jobs import control, lifecycle, outcome, queues, sweeps
from jobs.errors import Conflict, NotFound
from jobs.store import JobStore
from models.states import Status
from tests.support.policy import DEFAULTS
from tests.support.workers import register, take_all

TINY = {"model": "lenet", "dataset": "synthetic:28x28x1", "params": {"steps": 2, "batch_size": 8}}


def test_the_line_is_high_then_normal_then_low_and_first_come_first_served_within_one(redis):
    ids = {}
    for name, priority in (("low", "low"), ("normal-1", "normal"), ("high", "high"), ("normal-2", None)):
        body = {**TINY, "priority": priority} if priority else TINY
        ids[name] = control.submit(redis, body, DEFAULTS)[0]["id"]
    two_gpus = control.submit(redis, {**TINY, "gpus": 2, "priority": "high"}, DEFAULTS)[0]["id"]
    register(redis, "cpu")
    assert take_all(redis, "cpu") == [ids["high"], ids["normal-1"], ids["normal-2"], ids["low"]]
    register(redis, "gpus", gpus=("0", "1"))
    assert take_all(redis, "gpus") == [two_gpus]  # a CPU worker never takes a GPU job


def test_a_sweep_ranks_ended_jobs_by_test_accuracy_unfinished_last(redis):
    sweep = sweeps.create(redis, {"base": TINY, "grid": {"params.lr": [0.2, 0.1, 0.0]}}, DEFAULTS)
    low, high, unfinished = sweep["job_ids"]
    store = JobStore(redis)
    for job_id, accuracy in ((low, 0.31), (high, 0.87)):
        store.transition(job_id, (Status.QUEUED.value,), status=Status.RUNNING.value, started_at=time.time())
        assert lifecycle.end(redis, job_id, outcome.SUCCEEDED, result={"test_accuracy": accuracy, "test_loss": 1.0})
    summary = sweeps.summary(redis, sweep["id"])
    assert [(r["job_id"], r["rank"], r["params.lr"]) for r in summary["jobs"]] == [
        (high, 1, 0.1),
        (low, 2, 0.2),
        (unfinished, None, 0.0),
    ]
    assert summary["ended"] == 2 and summary["total"] == 3 and summary["best"]["job_id"] == high
    assert [r["name"] for r in summary["jobs"]] == [f"sweep {sweep['id']} lr={lr}" for lr in (0.1, 0.2, 0.0)]


def test_the_jobs_of_a_sweep_are_named_by_their_swept_values(redis):
    grid = {"params.lr": [0.1, 0.01], "model": ["lenet"], "params.batch_size": [8]}
    sweep = sweeps.create(redis, {"base": {**TINY, "name": "lr-scan"}, "grid": grid}, DEFAULTS)
    names = [JobStore(redis).get(i)["spec"]["name"] for i in sweep["job_ids"]]
    assert names == ["lr-scan lr=0.1 model=lenet batch_size=8", "lr-scan lr=0.01 model=lenet batch_size=8"]
    named = sweeps.create(redis, {"base": TINY, "grid": {"name": ["a", "b"]}}, DEFAULTS)  # a grid over names keeps them
    assert [JobStore(redis).get(i)["spec"]["name"] for i in named["job_ids"]] == ["a", "b"]


def test_each_queued_job_knows_its_place_in_the_line_the_scheduler_takes(redis):
    """queues.positions agrees with the order the scheduler really hands the jobs out in."""
    low = control.submit(redis, {**TINY, "priority": "low"}, DEFAULTS)[0]["id"]
    normal = [control.submit(redis, TINY, DEFAULTS)[0]["id"] for _ in range(2)]
    high = control.submit(redis, {**TINY, "priority": "high"}, DEFAULTS)[0]["id"]
    two_gpus = control.submit(redis, {**TINY, "gpus": 2}, DEFAULTS)[0]["id"]
    store = JobStore(redis)
    recs = [store.get(i) for i in (low, *normal, high, two_gpus)]
    line = queues.positions(redis, recs, DEFAULTS)
    assert line == {high: 1, normal[0]: 2, normal[1]: 3, two_gpus: 4, low: 5}  # one line over every kind of job
    register(redis, "cpu")
    assert sorted(line, key=lambda i: (i == two_gpus, line[i])) == [*take_all(redis, "cpu"), two_gpus]
    assert queues.positions(redis, [store.get(i) for i in (low, high)], DEFAULTS) == {}  # taken: no longer in line


def test_deleting_an_ended_job_leaves_nothing_of_it_and_refuses_one_that_has_not_ended(redis, settings):
    body = {**TINY, "tags": ["keep-me"]}
    sweep = sweeps.create(redis, {"base": TINY, "grid": {"params.lr": [0.1, 0.2]}}, DEFAULTS)
    first, second = sweep["job_ids"]
    keyed, _ = control.submit(redis, body, DEFAULTS, idempotency_key="nightly-1")
    store = JobStore(redis)
    with redis.pipeline() as pipe:
        store.append_lines(first, ["a line"], pipe)
        store.append_point(first, 1, {"step": 1, "loss": 1.0}, pipe)
        pipe.execute()
    job_dir = settings.job_dir(first)
    (job_dir / "checkpoints").mkdir(parents=True)
    (job_dir / "checkpoints" / "ckpt-1.data").write_bytes(b"x" * 1000)
    with pytest.raises(Conflict):  # queued: not ended
        control.delete(redis, settings, [first])
    for job_id in (first, keyed["id"]):
        control.cancel(redis, job_id)
    assert control.delete(redis, settings, [first, keyed["id"]]) == [
        {"id": first, "bytes_freed": 1000},
        {"id": keyed["id"], "bytes_freed": 0},
    ]
    left = [k.decode() for k in redis.scan_iter(f"gpudeck:job:{first}*")] + [
        k.decode() for k in redis.scan_iter(f"gpudeck:job:{keyed['id']}*")
    ]
    assert left == [] and not job_dir.exists() and not list(settings.jobs_dir.glob(".deleted-*"))
    assert [r["id"] for r in store.list(limit=10)] == [second]
    assert sweeps.summary(redis, sweep["id"])["total"] == 1  # the sweep keeps its other run
    replay, replayed = control.submit(redis, body, DEFAULTS, idempotency_key="nightly-1")  # the key answers no more
    assert not replayed and replay["id"] not in (first, keyed["id"])
    with pytest.raises(NotFound):
        control.delete(redis, settings, [first])


def test_the_order_reads_a_long_line_a_little_at_a_time_and_misses_nothing(redis):
    ids = [queues.submit(redis, TINY, DEFAULTS, extra={"owner": "alice"})["id"] for _ in range(45)]
    ids += [queues.submit(redis, TINY, DEFAULTS, extra={"owner": "bob"})["id"] for _ in range(3)]
    asked = []  # what reached Redis
    read = queues.reader(redis, 8, 16)
    zrange = redis.zrange

    def counted(key, *args, **kwargs):
        asked.append(key)
        return zrange(key, *args, **kwargs)

    def more(line, start):
        redis.zrange = counted
        try:
            return read(line, start)
        finally:
            redis.zrange = zrange

    found = queues.lines(redis, 8)
    taken = [job_id for job_id, _, _ in queues.order(found, {"alice": 0.0, "bob": 10_000.0}, True, more)]
    assert sorted(taken) == ids and len(taken) == len(set(taken))
    assert [i for i in taken if i <= 45] == ids[:45]  # each line in its own order
    # alice's line in three more reads (8 + 16 + 16 + 5); bob's 3 were all in the first read: never asked again
    assert asked == ["gpudeck:line:normal:alice"] * 3


def test_an_idempotent_submission_that_dies_never_holds_its_key_for_long(redis, monkeypatch):
    """Found by the chaos soak: Redis killed between a job's creation and its key's answer left the key
    'being processed' for 24 h (every retry: 409). The answer is now written in the job's own transaction, and a
    submission that dies before it frees its key within PENDING_S, even when Redis cannot delete it then."""
    from redis import ConnectionError as RedisConnectionError

    spec = {"model": "lenet", "dataset": "synthetic", "gpus": 0}
    rec, replayed = queues.submit_once(redis, spec, "k1", DEFAULTS)
    slot = rec["idempotency"]
    assert not replayed and JobStore(redis).get(rec["id"])["idempotency"] == slot
    assert redis.ttl(slot) > queues.PENDING_S  # answered: kept for a day
    assert queues.submit_once(redis, spec, "k1", DEFAULTS) == (JobStore(redis).get(rec["id"]), True)

    def dies(*args, **kwargs):
        raise RedisConnectionError("Redis went away")

    monkeypatch.setattr(queues, "validate", dies)
    monkeypatch.setattr(redis, "delete", dies)  # (nor can the request free its key on its way out)
    with pytest.raises(RedisConnectionError):
        queues.submit_once(redis, spec, "k2", DEFAULTS)
    monkeypatch.undo()
    pending = [k for k in redis.keys("gpudeck:idempotency:*") if k.decode() != slot]
    assert len(pending) == 1 and 0 < redis.ttl(pending[0]) <= queues.PENDING_S
    assert len(JobStore(redis).list(limit=10)) == 1  # nothing was created for it


@pytest.mark.parametrize("fair", [True, False])
def test_a_place_found_without_walking_the_line_is_the_place_the_walk_finds(redis, fair):
    """Issue 41 §3: a job alone in its priority (one owner there) gets its place from the lines' sizes and its rank
    (no walk over 10,000 jobs); it must be the place of the scheduler's own order, next to priorities shared by
    several owners (those are walked) and a job waiting on a dependency (none)."""
    from dataclasses import replace

    settings = replace(DEFAULTS, fairshare=fair)
    made = []
    for owner, priority, n in (("alice", "high", 3), ("bob", "high", 2), ("carol", "normal", 4), ("dan", "low", 3)):
        for _ in range(n):
            body = {**TINY, "priority": priority}
            made.append(control.submit(redis, body, settings, extra={"owner": owner})[0]["id"])
    waiting = control.submit(redis, {**TINY, "after": [made[0]]}, settings, extra={"owner": "carol"})[0]["id"]
    store = JobStore(redis)
    walked = {
        job_id: n
        for n, (job_id, _, _) in enumerate(
            queues.scheduler_order(redis, settings, queues.lines(redis), {}, time.time()), 1
        )
    }
    for one in [*made, waiting]:  # each asked alone (the fast path for carol's and dan's), then all at once
        assert queues.positions(redis, [store.get(one)], settings) == ({one: walked[one]} if one in walked else {})
    assert queues.positions(redis, [store.get(i) for i in [*made, waiting]], settings) == walked
