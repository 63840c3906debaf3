"""What people use and when a queued job will start: the fair-share table (`GET /api/v1/share`, like Slurm's
sshare) and expected starts (like `squeue --start`), both read from the line in the scheduler's own order."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from redis import Redis

from jobs import plan, projects, queues, quota, share, usage
from jobs.keys import AFTER_KEY, BEGINS_KEY, job_key
from jobs.placement import choose, live_slots, part_of, taken_of
from jobs.queues import waiting_for
from jobs.record import Job
from jobs.schedule import BATCH, LINE_HEAD, SCAN_MAX, Round, cordoned, gpu_room, timeline, with_records
from jobs.settings import Settings
from jobs.store import JobStore


def share_table(redis: Redis, settings: Settings) -> list[dict[str, Any]]:
    """Per owner (like Slurm's sshare): their project (their default one), decayed usage in GPU-hours, its share of
    everybody's, GPUs held now, running and queued jobs; in the order the scheduler serves them."""
    s = settings
    store = JobStore(redis)
    active = store.active()
    used = share.usage(redis, s.fairshare_halflife_s, active)
    queued: Counter[str] = Counter()
    for (_, owner), members in queues.lines(redis).items():
        queued[share.owner_of(owner)] += len(members)
    with redis.pipeline(transaction=False) as pipe:  # (one round trip for the jobs waiting on dependencies)
        for raw in redis.smembers(AFTER_KEY):
            pipe.hget(job_key(int(raw)), "owner")
        for owner in pipe.execute():
            queued[share.owner_of(owner.decode() if owner else None)] += 1
    running: Counter[str] = Counter(share.owner_of(r.get("owner")) for r in active)
    gpus: dict[str, float] = defaultdict(float)
    for r in active:
        gpus[share.owner_of(r.get("owner"))] += quota.holds(r)  # (a share counts its part)
    idle = usage.idle_gpu_hours(redis)
    total = sum(used.values()) or 1.0
    idlers = {share.owner_of(o) for o in idle}  # (who held GPUs idle, even with no usage left to decay)
    groups = projects.groups(redis)  # (in the scheduler's order: the project first, by its usage over its share)
    spent = projects.spent(used, groups)

    def turn(o: str) -> tuple[float, float, str]:
        project, weight = projects.group_of(groups, o)
        return spent[project] / weight, used.get(o, 0.0), o

    owners = sorted(set(used) | set(queued) | set(running) | idlers, key=turn)
    return [
        {
            "owner": None if o == share.owner_of(None) else o,
            "project": projects.group_of(groups, o)[0],
            "usage_gpu_hours": round(used.get(o, 0.0) / 3600, 3),
            "share": round(used.get(o, 0.0) / total, 4),
            "gpus": round(gpus[o], 2),
            "running": running[o],
            "queued": queued[o],
            "idle_gpu_hours": round(idle.get(None if o == share.owner_of(None) else o, 0.0), 3),
        }
        for o in owners
    ]


def project_table(redis: Redis, owners: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per project, from the owners' rows of share_table (its people: those whose default project it is): its
    share (its weight), decayed usage, that usage's part of everybody's, GPUs held, running and queued jobs; least
    used for its share first. None where there are no projects."""
    weights = {name: float(p.get("share", 1.0)) for name, p in projects.records(redis).items()}
    if not weights:
        return []
    out: dict[str, dict[str, Any]] = {}
    for row in owners:
        name = row.get("project")
        if name is None:
            continue
        mine = out.setdefault(name, {"project": name, "weight": weights.get(name, 1.0), "usage_gpu_hours": 0.0,
                                     "share": 0.0, "gpus": 0.0, "running": 0, "queued": 0})  # fmt: skip
        for field in ("usage_gpu_hours", "share", "gpus", "running", "queued"):
            mine[field] = round(mine[field] + row[field], 4)
    for name, weight in weights.items():
        out.setdefault(name, {"project": name, "weight": weight, "usage_gpu_hours": 0.0, "share": 0.0, "gpus": 0.0,
                              "running": 0, "queued": 0})  # fmt: skip
    return sorted(out.values(), key=lambda p: (p["usage_gpu_hours"] / p["weight"], p["project"]))


NO_ESTIMATE = (
    "nothing to estimate from: the jobs it waits for report no progress and give no timeout or expected duration, "
    "and gpudeck has not seen a run like them succeed"
)


def estimate(
    redis: Redis,
    settings: Settings,
    wanted: Iterable[int] | None = None,
    now: float | None = None,
    also: dict[str, Any] | None = None,
) -> dict[int, tuple[float | None, str | None]]:
    """Every queued job's expected start (like `squeue --start`), from the plan the scheduler follows (jobs.plan):
    the line in the scheduler's order over a timeline where each running job holds its workers until its expected
    end, each job ahead takes the earliest time its workers are free for as long as it is expected to run (a
    reservation), and a job may start before one ahead of it only where it ends before that one's reservation
    (backfill). (time, None) or (None, why there is no estimate). `wanted`: the jobs asked about (it stops once it
    has them all). `also`: a record not submitted (a dry run, its id 0): its start were it the last in line."""
    s = settings
    now = time.time() if now is None else now
    store = JobStore(redis)
    out: dict[int, tuple[float | None, str | None]] = {}
    waiting = {int(raw) for raw in redis.smembers(AFTER_KEY)}
    asked_of = None if wanted is None else set(wanted)
    asked = sorted(waiting if asked_of is None else waiting & asked_of)  # (not all 1,000: the ones asked of)
    for job_id, rec in zip(asked, store.get_many(asked)):
        after = list(rec.spec.after) if rec else []
        out[job_id] = (None, waiting_for(after) if after else "waiting for its dependencies")
    begins = {int(raw): at for raw, at in redis.zrange(BEGINS_KEY, 0, -1, withscores=True)}
    for job_id in begins if asked_of is None else begins.keys() & asked_of:  # (in no line until its begin)
        out[job_id] = (begins[job_id], None)
    waiting |= set(begins)
    left = None if asked_of is None else asked_of - waiting  # (a job waiting on dependencies is in no line)
    if left == set():
        return out
    slots, unavailable = live_slots(redis)
    unavailable = set(unavailable) | set(cordoned(redis, slots.values()))
    active = store.active()
    history = plan.learned(redis, active)
    capacity, live, outlived = gpu_room(redis, s, slots)
    r = Round(redis, s, now, slots, [], active, capacity=capacity, live=live, left=outlived)
    tl = timeline(r, unavailable, history)
    used = share.usage(redis, s.fairshare_halflife_s, active, now) if s.fairshare else {}
    found = queues.lines(redis, LINE_HEAD)
    ordered = queues.scheduler_order(redis, s, found, used, now, queues.reader(redis, LINE_HEAD, BATCH))
    for n, (job_id, _, _, rec) in enumerate(with_records(store, ordered)):
        if n >= SCAN_MAX or left == set():
            break
        if rec is None:
            continue
        if left is not None:
            left.discard(job_id)
        spec = rec.spec
        places, k = spec.workers, spec.gpus
        part = part_of(spec, s.gpu_context_memory)
        took, _ = plan.expected(rec, history)
        start, chosen = tl.earliest(places, k, took, part)
        if start is None or chosen is None:
            room = lambda key: capacity.get(key, -plan.INF)  # noqa: E731 (an empty box's room)
            can = choose(list(slots.values()), places, k, part, lambda key: 0.0, room) is not None
            out[job_id] = (None, NO_ESTIMATE if can else "no live workers can run it")
            continue
        out[job_id] = (start, None)
        tl.take({x.name for p in chosen for x in p}, start, took, taken_of(spec, s.gpu_context_memory))
    if also is not None:
        extra = Job.of(also)
        spec = extra.spec
        places, k = spec.workers, spec.gpus
        took, _ = plan.expected(extra, history)
        start, chosen = tl.earliest(places, k, took, part_of(spec, s.gpu_context_memory))
        out[0] = (start, None) if start is not None and chosen is not None else (None, NO_ESTIMATE)
    return out
