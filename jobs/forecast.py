"""What people use and when a queued job will start: the fair-share table (`GET /api/v1/share`, like Slurm's
sshare) and expected starts (like `squeue --start`), both read from the line in the scheduler's own order."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from redis import Redis

from jobs import queues, quota, share
from jobs.keys import AFTER_KEY, INDEX_KEY, job_key
from jobs.placement import fit, live_slots, slots_of
from jobs.queues import waiting_for
from jobs.schedule import BATCH, LINE_HEAD, SCAN_MAX, policy_of, with_records
from jobs.settings import Settings
from jobs.store import JobStore


def share_table(redis: Redis, settings: Settings | None = None) -> list[dict[str, Any]]:
    """Per owner (like Slurm's sshare): decayed usage in GPU-hours, its share of everybody's, GPUs held now,
    running and queued jobs."""
    s = policy_of(settings)
    store = JobStore(redis)
    active = store.active()
    used = share.usage(redis, s.fairshare_halflife_s, active)
    queued: Counter[str] = Counter()
    for (_, owner), members in queues.lines(redis).items():
        queued[share.owner_of(owner)] += len(members)
    for raw in redis.smembers(AFTER_KEY):
        owner = redis.hget(job_key(int(raw)), "owner")
        queued[share.owner_of(owner.decode() if owner else None)] += 1
    running: Counter[str] = Counter(share.owner_of(r.get("owner")) for r in active)
    gpus: Counter[str] = Counter()
    for r in active:
        gpus[share.owner_of(r.get("owner"))] += quota.job_gpus(r["spec"])
    total = sum(used.values()) or 1.0
    owners = sorted(set(used) | set(queued) | set(running), key=lambda o: (used.get(o, 0.0), o))
    return [
        {
            "owner": None if o == share.owner_of(None) else o,
            "usage_gpu_hours": round(used.get(o, 0.0) / 3600, 3),
            "share": round(used.get(o, 0.0) / total, 4),
            "gpus": gpus[o],
            "running": running[o],
            "queued": queued[o],
        }
        for o in owners
    ]


HISTORY = 100
"""How many of the newest jobs an estimate learns typical durations from."""


def _typical_s(redis: Redis) -> float | None:
    """The mean run time of the newest succeeded jobs (None: none yet)."""
    ids = [int(i) for i in redis.zrevrange(INDEX_KEY, 0, HISTORY - 1)]
    with redis.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hmget(job_key(job_id), "status", "started_at", "ended_at")
        rows = pipe.execute()
    took = [float(e) - float(b) for st, b, e in rows if st == b"succeeded" and b and e]
    return sum(took) / len(took) if took else None


def _duration(rec: dict[str, Any], typical: float | None) -> float | None:
    timeout = rec["spec"].get("timeout")
    return float(timeout) if timeout else typical


def _remaining(rec: dict[str, Any], now: float, typical: float | None) -> float | None:
    """How long a running job still holds its workers: from its progress rate, else its timeout or the typical
    run time."""
    p = rec.get("progress") or {}
    step, total, first = p.get("step"), p.get("total_steps"), p.get("first_step") or 0
    since = rec.get("running_at")
    if step and total and since and step > first:
        return max(0.0, (now - float(since)) / (step - first) * (total - step))
    whole = _duration(rec, typical)
    if whole is None:
        return None
    return max(0.0, float(rec.get("started_at") or now) + whole - now)


NO_ESTIMATE = (
    "nothing to estimate from: the jobs ahead of it report no progress and give no timeout, and no job has "
    "succeeded yet"
)


def estimate(
    redis: Redis, settings: Settings | None = None, wanted: Iterable[int] | None = None
) -> dict[int, tuple[float | None, str | None]]:
    """Every queued job's expected start (like `squeue --start`): the scheduler's order played forward over the
    workers, each running job freeing its workers when its progress (else its timeout, else the typical run time
    of recent jobs) says it ends, each job ahead taking its timeout or that typical time. (time, None) or
    (None, why there is no estimate). `wanted`: the jobs asked about (it stops once it has them all)."""
    s = policy_of(settings)
    now = time.time()
    store = JobStore(redis)
    slots, _ = live_slots(redis)
    active = store.active()
    typical = _typical_s(redis)
    free_at: dict[str, float | None] = {n: now for n in slots}
    for rec in active:
        left = _remaining(rec, now, typical)
        for n in slots_of(rec):
            if n in free_at:
                free_at[n] = None if left is None else now + left
    used = share.usage(redis, s.fairshare_halflife_s, active, now) if s.fairshare else {}
    out: dict[int, tuple[float | None, str | None]] = {}
    hosts: Counter[str] = Counter()
    for x in slots.values():
        hosts[x.host] += len(x.gpus)
    found = queues.lines(redis, LINE_HEAD)
    ordered = queues.order(found, used, s.fairshare, queues.reader(redis, LINE_HEAD, BATCH))
    left = None if wanted is None else set(wanted)
    for n, (job_id, _, _, rec) in enumerate(with_records(store, ordered)):
        if n >= SCAN_MAX or left == set():
            break
        if rec is None:
            continue
        if left is not None:
            left.discard(job_id)
        places, k = int(rec["spec"].get("workers") or 1), int(rec["spec"].get("gpus") or 0)
        known = sorted({t for t in free_at.values() if t is not None})
        start, chosen = None, None
        for t in known:
            chosen = fit([slots[name] for name, f in free_at.items() if f is not None and f <= t], places, k)
            if chosen is not None:
                start = t
                break
        if start is None or chosen is None:
            why = NO_ESTIMATE if any(f is None for f in free_at.values()) else "no live workers can run it"
            out[job_id] = (None, why)
            continue
        out[job_id] = (start, None)
        took = _duration(rec, typical)
        for x in (x for p in chosen for x in p):
            free_at[x.name] = None if took is None else start + took
    for raw in redis.smembers(AFTER_KEY):
        job_id = int(raw)
        after = (store.get(job_id)["spec"].get("after") or []) if redis.exists(job_key(job_id)) else []
        out[job_id] = (None, waiting_for(after) if after else "waiting for its dependencies")
    return out
