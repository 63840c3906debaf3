"""Least attained service (GPUDECK_POLICY=las): a policy that needs no durations, as Tiresias' 2D-LAS (NSDI '19).

A job's attained service is the GPU-time it has had (every attempt's run time times the GPUs it holds, a share its
part). The limits of GPUDECK_LAS_LIMITS (GPU-seconds) cut that into bands: band 0 below the first, band 1 below the
second, and so on. Within a priority and an owner's line a job of a lower band goes first (FIFO within a band: its
place in line is its band's offset plus its old place), and a running job of a higher band is preempted at its
checkpoint for a waiting one of a lower band (placed at least GPUDECK_PREEMPT_AFTER ago: no thrash). A job that has
waited GPUDECK_LAS_PROMOTE times as long as it has run is promoted to band 0 (no starvation). Priorities and fair
share between people stay above it: a band only orders jobs within a priority, and an owner's turn is still the
fair share's. Under GPUDECK_POLICY=fifo (the default) every job is in band 0: today's order.
"""

from __future__ import annotations

from redis import Redis

from jobs import quota
from jobs.keys import LINES_KEY, QUEUED_AT_KEY, REBAND_KEY, line_key, parse_line_name
from jobs.record import Job
from jobs.settings import Settings
from jobs.store import JobStore
from models.states import PRIORITIES

BAND = 1e12
"""A band's offset in a line's scores (places): a job's place is `BAND * band + its place in submission order`."""


def attained(rec: Job, now: float) -> float:
    """GPU-seconds the job has had: its earlier attempts' run time, and this attempt's while it runs, times the
    GPUs it holds (a share its part)."""
    ran = float(rec.get("ran_s") or 0.0)
    started = rec.started_at
    if started and rec.status in ("starting", "running"):
        ran += max(0.0, now - float(started))
    return ran * quota.holds(rec)


def band(gpu_seconds: float, s: Settings) -> int:
    """The band of a job that has had `gpu_seconds` (0 under fifo)."""
    if s.policy != "las":
        return 0
    return sum(1 for limit in s.las_limits if gpu_seconds >= limit)


def place(seq: float, rec: Job, s: Settings, now: float) -> float:
    """Where a job goes back in its line: its old place within its band."""
    return BAND * band(attained(rec, now), s) + seq % BAND


def settle(redis: Redis, s: Settings, now: float) -> None:
    """Each job put back in line since the last round (REBAND_KEY, jobs.lifecycle.requeue) to its band's place."""
    ids = [int(i) for i in redis.smembers(REBAND_KEY)]
    if not ids:
        return
    with redis.pipeline(transaction=False) as pipe:
        for rec in JobStore(redis).get_many(ids):
            if rec is not None and rec.status == "queued" and s.policy == "las":
                seq = rec.seq if rec.seq is not None else rec.id
                pipe.zadd(line_key(rec.spec.priority, rec.owner), {str(rec.id): place(seq, rec, s, now)}, xx=True)
        pipe.srem(REBAND_KEY, *ids)
        pipe.execute()


def rank(rec: Job, s: Settings, now: float) -> tuple[int, int]:
    """Who may preempt whom: (its priority's place in PRIORITIES, its band); a lower rank goes first and preempts a
    higher one."""
    return PRIORITIES.index(rec.spec.priority), band(attained(rec, now), s)


def waiting_rank(rec: Job, s: Settings, now: float, since: float | None) -> tuple[int, int]:
    """The rank of a queued job, promoted to band 0 once it has waited (`since`: when it entered its line) long
    enough (`promoted`)."""
    priority, b = rank(rec, s, now)
    return (priority, 0) if b and promoted(rec, s, now, since) else (priority, b)


def promoted(rec: Job, s: Settings, now: float, since: float | None) -> bool:
    """Whether a queued job has waited GPUDECK_LAS_PROMOTE times as long as it has run."""
    ran = float(rec.get("ran_s") or 0.0)
    return since is not None and now - since >= s.las_promote * ran


def promote(redis: Redis, s: Settings, now: float) -> list[int]:
    """Move each queued job of a band above 0 that has waited long enough to band 0 (its old place there); the ids
    moved. Reads only the jobs above band 0 (the few that ran before: preempted or retried)."""
    if s.policy != "las":
        return []
    lines = [parse_line_name(n.decode()) for n in redis.smembers(LINES_KEY)]
    with redis.pipeline(transaction=False) as pipe:
        for line in lines:
            pipe.zrangebyscore(line_key(*line), BAND, "+inf", withscores=True)
        found = pipe.execute()
    above = [(line, int(m), score) for line, members in zip(lines, found) for m, score in members]
    if not above:
        return []
    recs = JobStore(redis).get_many([job_id for _, job_id, _ in above])
    since = redis.hmget(QUEUED_AT_KEY, [str(job_id) for _, job_id, _ in above])
    moved = []
    for (line, job_id, score), rec, at in zip(above, recs, since):
        if rec is not None and promoted(rec, s, now, float(at) if at is not None else None):
            redis.zadd(line_key(*line), {str(job_id): score % BAND}, xx=True)
            moved.append(job_id)
    return moved
