"""Steering the line: a queued job's priority and its place within its owner's line, changed under the scheduler's
lock (jobs.schedule.lock_round), so the line does not change under a round; a round follows at once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from redis import Redis

from jobs import queues
from jobs.backends import base as backends
from jobs.errors import Conflict
from jobs.keys import AFTER_KEY, queue_name
from jobs.record import Job
from jobs.schedule import lock_round
from jobs.settings import Settings
from jobs.store import JobStore
from models.states import Status


@contextlib.contextmanager
def locked(redis: Redis, wait_s: float = 10.0) -> Iterator[None]:
    """Hold the scheduler's lock (waiting for a round to end): the line does not change under a round."""
    with lock_round(redis, wait_s) as held:
        if not held:
            raise Conflict("the scheduler is busy; try again", {"retry_after_s": 1})
        yield


def _queued(store: JobStore, job_id: int, what: str) -> Job:
    rec = store.get(job_id)
    if rec["status"] != Status.QUEUED.value:
        raise Conflict(
            f"job {job_id} is {rec['status']}: only a queued job's {what} can be changed",
            {"id": job_id, "status": rec["status"]},
        )
    return rec


def reprioritize(redis: Redis, job_id: int, priority: str, settings: Settings) -> Job:
    """A queued job goes to the line of another priority, keeping its place in submission order."""
    store = JobStore(redis)
    backend = backends.of(settings)
    with locked(redis):
        rec = _queued(store, job_id, "priority")
        backend.reprioritize(redis, rec, priority, settings)  # (on Slurm: a QOS or a nice value through scontrol)
        spec = rec.spec.with_(priority=priority)
        waiting = bool(redis.sismember(AFTER_KEY, job_id))
        in_line = not (rec.get("slurm") or {}).get("id")  # (one Slurm has is in no line of gpudeck's)
        with redis.pipeline() as pipe:
            queues.withdraw(redis, rec, pipe)
            store.update(job_id, pipe=pipe, spec=spec.raw, queue=queue_name(spec.gpus, priority))
            if in_line:
                queues.enqueue(pipe, job_id, spec, rec.get("owner"), rec.get("seq"), waiting=waiting)
            pipe.execute()
    backend.queued(redis, job_id, settings)
    return store.get(job_id)


def move(redis: Redis, job_id: int, before: int | None = None, after: int | None = None) -> Job:
    """A queued job's new place in its line (its owner's, at its priority: between people, fair share decides):
    just before or after another queued job of that line, or first of it (neither given)."""
    store = JobStore(redis)
    with locked(redis):
        rec = _queued(store, job_id, "place")
        key = queues.line_key(rec.spec.priority, rec.get("owner"))
        if redis.zscore(key, job_id) is None:
            raise Conflict(f"job {job_id} waits for its dependencies: it has no place in line yet", {"id": job_id})
        target = before if before is not None else after
        if target is None:
            first = redis.zrange(key, 0, 0, withscores=True)
            place_at = first[0][1] - 1.0 if first and int(first[0][0]) != job_id else redis.zscore(key, job_id)
        else:
            field = "before" if before is not None else "after"
            score = redis.zscore(key, target)
            if score is None or target == job_id:
                who = rec.get("owner") or "no owner"
                raise Conflict(
                    f"job {target} is not another queued job of the same line as job {job_id} "
                    f"({rec['spec'].get('priority', 'normal')}, {who}): a job moves only among those",
                    {"field": field, "id": target},
                )
            rank = redis.zrank(key, target)
            if before is not None:
                nxt = redis.zrange(key, rank - 1, rank - 1, withscores=True) if rank > 0 else []
                other = nxt[0][1] if nxt and int(nxt[0][0]) != job_id else score - 2.0
            else:
                nxt = redis.zrange(key, rank + 1, rank + 1, withscores=True)
                other = nxt[0][1] if nxt and int(nxt[0][0]) != job_id else score + 2.0
            place_at = (score + other) / 2
        redis.zadd(key, {str(job_id): place_at}, xx=True)
        store.update(job_id, seq=place_at)
    return store.get(job_id)
