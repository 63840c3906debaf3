"""The accounts (issue 69 #2): GPU-hours (a share counted as its part), idle GPU-hours, jobs by end state and queue
waits, per owner and per period, over the jobs that ended between two times — deleted ones included. Every job
that ends is indexed by its end (ENDED_KEY, written by JobStore.transition in the transaction that ends it); a job
deleted leaves what the accounts need of it in ACCOUNTS_KEY (control.delete, in the transaction that deletes it),
so deleting a job does not delete its accounting. A job's GPU time counts in the period it ended in."""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from redis import Redis

from jobs.keys import ACCOUNTS_INDEXED_KEY, ACCOUNTS_KEY, ACTIVE_KEY, ENDED_KEY, INDEX_KEY, job_key, project_used_key
from jobs.record import Job
from jobs.store import decode
from models.common import iso, parse_age
from models.states import ENDED

PERIODS = ("day", "week", "month", "all")
BY = ("user", "project", "none")
FIELDS = ("status", "owner", "spec", "created_at", "first_started_at", "started_at", "ended_at", "gpu_seconds",
          "gpu_idle_seconds")  # fmt: skip
CHUNK = 2000


def moment(text: str, now: float) -> float:
    """A bound of the accounts' range as a Unix time: a date (2026-11-01: its midnight, UTC), a date-time with its
    zone (2026-11-01T08:00+01:00), or an age back from `now` (30d, 12h); ValueError saying what was wrong."""
    t = text.strip()
    try:
        return now - parse_age(t)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"write a date (2026-11-01), a date-time with its zone or an age (30d): {text!r}") from None
    if when.tzinfo is None:
        if len(t) > 10:
            raise ValueError(f"a date-time says its zone (2026-11-01T08:00Z, …+01:00), got {text!r}")
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def facts(rec: Job | dict[str, Any]) -> dict[str, Any]:
    """What the accounts need of an ended job's record."""
    job = Job.of(rec)
    started = job.first_started_at or job.started_at
    return {
        "status": job.status,
        "owner": job.owner,
        "project": job.spec.project,
        "ended_at": job.ended_at,
        "wait_s": None if started is None else max(0.0, started - job.created_at),
        "gpu_seconds": job.gpu_seconds,
        "gpu_idle_seconds": job.gpu_idle_seconds,
    }


def keep(pipe: Any, job_id: int, rec: Job) -> None:
    """In the transaction that deletes job `job_id`: what the accounts need of it, kept."""
    pipe.hset(ACCOUNTS_KEY, str(job_id), json.dumps(facts(rec)))


def index_old(redis: Redis) -> None:
    """Once: the jobs that ended before the accounts' index existed, put in it (by their end)."""
    if redis.exists(ACCOUNTS_INDEXED_KEY):
        return
    ids = [int(i) for i in redis.zrange(INDEX_KEY, 0, -1)]
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        with redis.pipeline(transaction=False) as pipe:
            for job_id in chunk:
                pipe.hmget(job_key(job_id), ["status", "ended_at"])
            read = pipe.execute()
        ended = {str(i): float(e) for i, (s, e) in zip(chunk, read) if s and s.decode() in ENDED and e}
        if ended:
            redis.zadd(ENDED_KEY, ended, nx=True)
    redis.set(ACCOUNTS_INDEXED_KEY, time.time())


def ended_between(redis: Redis, since: float, until: float) -> list[dict[str, Any]]:
    """The facts of every job that ended in [since, until): its record's, or those kept at its deletion."""
    index_old(redis)
    ids = [int(i) for i in redis.zrangebyscore(ENDED_KEY, since, f"({until}")]
    out = []
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        with redis.pipeline(transaction=False) as pipe:
            for job_id in chunk:
                pipe.hmget(job_key(job_id), list(FIELDS))
            read = pipe.execute()
        kept = redis.hmget(ACCOUNTS_KEY, [str(i) for i in chunk])
        for values, deleted in zip(read, kept):
            if values[0] is not None:  # (a live record: ended, or retried since and not ended again: left out)
                rec = decode({k.encode(): v for k, v in zip(FIELDS, values) if v is not None})
                if rec.status in ENDED:
                    out.append(facts(rec))
            elif deleted is not None:
                out.append(json.loads(deleted))
    return out


USED_FOR_S = 30.0
"""How long a project's GPU-hours this period are kept once counted (a round a second reads them)."""


def period_start(ts: float, period: str) -> float:
    """When the day, week (Monday) or month (the 1st) `ts` falls in began, UTC."""
    return datetime.fromisoformat(period_of(ts, period)).replace(tzinfo=timezone.utc).timestamp()


def project_used(redis: Redis, project: str, period: str, now: float | None = None) -> float:
    """The GPU-hours project `project` used this `period`: its jobs that ended in it and its running jobs (what
    they held so far). Counted at most every USED_FOR_S, and kept meanwhile."""
    now = time.time() if now is None else now
    key = project_used_key(project, period, period_of(now, period))
    kept = redis.get(key)
    if kept is not None:
        return float(kept)
    since = period_start(now, period)
    ended = sum(j["gpu_seconds"] for j in ended_between(redis, since, now + 1) if j.get("project") == project)
    active = [int(i) for i in redis.smembers(ACTIVE_KEY)]
    with redis.pipeline(transaction=False) as pipe:
        for job_id in active:
            pipe.hmget(job_key(job_id), ["spec", "gpu_seconds"])
        running = pipe.execute()
    held = sum(float(s or 0) for spec, s in running if spec and json.loads(spec).get("project") == project)
    used = round((ended + held) / 3600, 4)
    redis.set(key, used, ex=int(USED_FOR_S))
    return used


def over_budget(redis: Redis, project: dict[str, Any] | None) -> str | None:
    """Why a project (its record: jobs.projects) may start no more jobs this period (its --max-gpu-hours used up),
    or None (none given, no budget, or some left)."""
    if project is None or not project.get("max_gpu_hours"):
        return None
    name, budget, period = project["name"], float(project["max_gpu_hours"]), project["budget_period"]
    used = project_used(redis, name, period)
    if used < budget:
        return None
    return f"project {name} used {used:g} of {budget:g} GPU-hours this {period} (--max-gpu-hours)"


def period_of(ts: float, period: str) -> str:
    """The period a time falls in, as its first day (UTC): 2026-11-28 (day), 2026-11-23 (its week's Monday),
    2026-11-01 (month); "all" for the whole range."""
    day = datetime.fromtimestamp(ts, timezone.utc).date()
    if period == "day":
        return day.isoformat()
    if period == "week":
        return (day - timedelta(days=day.weekday())).isoformat()
    if period == "month":
        return day.replace(day=1).isoformat()
    return "all"


def _percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (None of nothing)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 1)


def _row(period: str, who: tuple[str, str | None], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    waits = [j["wait_s"] for j in jobs if j["wait_s"] is not None]
    states: dict[str, int] = {}
    for j in jobs:
        states[j["status"]] = states.get(j["status"], 0) + 1
    return {
        "period": period,
        **({who[0]: who[1]} if who[0] != "none" else {}),
        "jobs": len(jobs),
        "by_state": dict(sorted(states.items())),
        "gpu_hours": round(sum(j["gpu_seconds"] for j in jobs) / 3600, 4),
        "idle_gpu_hours": round(sum(j["gpu_idle_seconds"] for j in jobs) / 3600, 4),
        "wait_p50_s": _percentile(waits, 0.5),
        "wait_p95_s": _percentile(waits, 0.95),
    }


def usage(redis: Redis, since: float, until: float, by: str = "user", period: str = "all") -> dict[str, Any]:
    """The accounts of the jobs that ended in [since, until): a row per period and owner (`by` user) or project
    (`by` project), and the totals."""
    jobs = ended_between(redis, since, until)
    field = {"user": "owner", "project": "project"}.get(by)
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for j in jobs:
        key = (period_of(j["ended_at"], period), j.get(field) if field else None)
        groups.setdefault(key, []).append(j)
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
    rows = [_row(p, (field or "none", o), g) for (p, o), g in ordered]
    total = _row("all", ("none", None), jobs)
    return {"since": iso(since), "until": iso(until), "by": by, "period": period, "rows": rows, "total": total}
