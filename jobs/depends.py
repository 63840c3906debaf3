"""Jobs waiting for their dependencies (`after`): which to look at in a round (the dependants of the jobs that
ended, from the index JobStore.transition feeds, and all of them once a minute), and what each gets: its line, a
dependency_failed cancel, or the message of what it waits for. The scheduler calls it first in each round."""

from __future__ import annotations

from redis import Redis

from jobs import lifecycle, queues
from jobs.errors import NotFound
from jobs.keys import AFTER_CHECK_KEY, AFTER_KEY, AFTER_SWEPT_KEY, job_key
from jobs.outcome import End
from jobs.queues import waiting_for
from jobs.store import JobStore
from models.states import Reason, Status

CHECK_MAX = 10_000
"""Waiting jobs one round looks at, at most, of those whose dependencies changed (the rest: the next round)."""
AFTER_SWEEP_S = 60
"""How often some round looks at every job waiting for its dependencies (the index's net: jobs queued before it
existed, or a change it missed), not only at those the index says changed."""


def release_dependencies(redis: Redis, store: JobStore, everything: bool | None = None) -> None:
    """Jobs waiting for their dependencies: into their line once all succeeded; canceled as dependency_failed
    once one failed or was canceled (or was deleted). Only the jobs AFTER_CHECK_KEY names (new ones, and the
    dependants of a job that ended: the work follows the changes, not the 1,000 that wait), and every waiting job
    once every AFTER_SWEEP_S in one round of the box (`everything`: whether this is that round; None: a round
    finds out)."""
    if everything is None:
        everything = bool(redis.set(AFTER_SWEPT_KEY, 1, nx=True, ex=AFTER_SWEEP_S))
    # taken, not read: a job that ends while this round looks is put back, for the next round (a crash between
    # taking and looking loses nothing either: the sweep looks at every waiting job within AFTER_SWEEP_S)
    looked = list(redis.spop(AFTER_CHECK_KEY, CHECK_MAX) or [])
    if everything:
        ids = [int(raw) for raw in redis.smembers(AFTER_KEY)]
    elif looked:
        with redis.pipeline(transaction=False) as pipe:  # (SISMEMBER each: SMISMEMBER needs Redis 6.2)
            for raw in looked:
                pipe.sismember(AFTER_KEY, raw)
            ids = [int(raw) for raw, waits in zip(looked, pipe.execute()) if waits]
    else:
        ids = []
    for job_id in sorted(ids):
        _release(redis, store, job_id)


def _release(redis: Redis, store: JobStore, job_id: int) -> None:
    """One waiting job: into its line, canceled, or its message says what it waits for."""
    try:
        rec = store.get(job_id)
    except NotFound:
        redis.srem(AFTER_KEY, job_id)
        return
    if rec["status"] != Status.QUEUED.value:
        redis.srem(AFTER_KEY, job_id)
        return
    after = rec.spec.after
    with redis.pipeline(transaction=False) as pipe:
        for dep in after:
            pipe.hget(job_key(dep), "status")
        statuses = [s.decode() if s else None for s in pipe.execute()]
    failed = [(d, st) for d, st in zip(after, statuses) if st is None or (Status(st).ended and st != "succeeded")]
    bad = failed[0] if failed else None
    if bad is not None:
        dep, st = bad
        what = "was deleted" if st is None else st
        end = End(Status.CANCELED, Reason.DEPENDENCY_FAILED, f"job {dep} it depends on {what}")
        if lifecycle.end(redis, job_id, end, rec, allowed=(Status.QUEUED.value,)):
            redis.srem(AFTER_KEY, job_id)
        return
    if all(st == Status.SUCCEEDED.value for st in statuses):
        with redis.pipeline() as pipe:
            pipe.srem(AFTER_KEY, job_id)
            queues.enqueue(pipe, job_id, rec.spec, rec.get("owner"), rec.get("seq"))
            pipe.execute()
        store.transition(job_id, (Status.QUEUED.value,), message=None)
    elif rec.get("message") != waiting_for(after):
        store.transition(job_id, (Status.QUEUED.value,), message=waiting_for(after))
