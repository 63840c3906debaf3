"""Where a job can run: the live workers as the scheduler sees them (host, GPUs, whether they take a job now, a
foreign process on their GPU), the workers an active job holds, and fitting a job's places onto free workers
(best fit, all or nothing). Redis reads only: jobs.schedule decides and writes."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from redis import Redis
from rq import Queue

from jobs.keys import alive_key, drain_key, gpus_key, paused_key, private_queue, worker_info_key
from jobs.record import Job, Kept

RQ_WORKERS_KEY = "rq:workers"
"""RQ's set of registered workers' keys (`rq:worker:NAME`)."""


@dataclass(frozen=True)
class Slot:
    """A live worker: its name, host and GPUs."""

    name: str
    host: str
    gpus: tuple[str, ...]


GpuKey = tuple[str, str]
"""A GPU: (host, its index)."""
WHOLE = math.inf
"""What a job of whole GPUs takes of each: all of it (a share takes its `gpu_memory` and a CUDA context: taken_of)."""


MIG = "MIG-"
"""How a MIG instance's id begins (its UUID: what CUDA_VISIBLE_DEVICES pins it by)."""


def gpu_keys(slot: Slot) -> list[GpuKey]:
    return [(slot.host, g) for g in slot.gpus]


def taken_of(spec: Kept, context: int) -> float:
    """What a job takes of each GPU it holds: a share its `gpu_memory` and one CUDA `context` (bytes: what its
    process holds beside what its framework allocates, GPUDECK_GPU_CONTEXT_MEMORY), else all of it (WHOLE)."""
    return float(spec.gpu_memory + context) if spec.gpu_memory else WHOLE


def part_of(spec: Kept, context: int) -> float | None:
    """What a share needs free on one GPU to be placed there (taken_of); None for a job of whole GPUs or none."""
    return taken_of(spec, context) if spec.gpu_memory and spec.gpus else None


def memory(redis: Redis, hosts: Iterable[str]) -> dict[GpuKey, tuple[int, int, int]]:
    """Each GPU's (total, used, left) memory in bytes, from its host's newest nvidia-smi sample: `left`, what
    processes that outlived their job still hold there (jobs.gpus.Leftovers). GPUs with no sample, or none
    reported, are missing."""
    hosts = sorted(set(hosts))
    out: dict[GpuKey, tuple[int, int, int]] = {}
    for host, raw in zip(hosts, redis.mget([gpus_key(h) for h in hosts]) if hosts else []):
        try:
            for g in json.loads(raw)["gpus"] if raw else []:
                total, used = g.get("memory_total_mib"), g.get("memory_used_mib")
                left = sum(int(p.get("used_memory_mib") or 1) for p in g.get("processes") or [] if p.get("left_by"))
                if isinstance(total, (int, float)):
                    out[(host, str(g.get("index")))] = (int(total) << 20, int(used or 0) << 20, left << 20)
        except (ValueError, KeyError, TypeError):
            continue
    return out


def whole_pool(pool: Iterable[Slot], busy: Callable[[GpuKey], float]) -> list[Slot]:
    """The workers a job of whole GPUs may take: every GPU of theirs held by nobody (`busy` 0), one worker per
    GPU (a GPU's other workers are its share slots)."""
    seen: set[GpuKey] = set()
    out = []
    for s in sorted(pool, key=lambda s: s.name):
        keys = set(gpu_keys(s))
        if keys & seen or any(busy(g) > 0 for g in keys):
            continue
        seen |= keys
        out.append(s)
    return out


def fit_share(pool: Iterable[Slot], amount: float, room: Callable[[GpuKey], float]) -> list[list[Slot]] | None:
    """One worker of a GPU with `room` for `amount` bytes, or None. Best fit: the GPU left with the least room
    (fill one before opening another), then the lowest host and index."""
    options = [
        (room(key) - amount, key, s.name, s)
        for s in pool
        if len(s.gpus) == 1
        for key in gpu_keys(s)
        if room(key) >= amount
    ]
    if not options:
        return None
    return [[min(options, key=lambda o: o[:3])[3]]]


def choose(
    pool: list[Slot],
    places: int,
    gpus: int,
    share: float | None,
    busy: Callable[[GpuKey], float],
    room: Callable[[GpuKey], float],
) -> list[list[Slot]] | None:
    """A job's places out of `pool`: a share on one GPU with room for it, whole GPUs held by nobody, or CPU
    workers. `busy`: what is taken of a GPU (WHOLE: held whole); `room`: what a share may still take of it."""
    if gpus and share:
        return fit_share(pool, share, room)
    if gpus > 1:  # (a process uses one MIG instance at most: a MIG device serves jobs of one GPU)
        pool = [s for s in pool if not any(g.startswith(MIG) for g in s.gpus)]
    return fit(whole_pool(pool, busy) if gpus else pool, places, gpus)


def slot_wanted(
    slots: dict[str, Slot], free: Iterable[Slot], barred: Iterable[str], room: Callable[[GpuKey], float], part: float
) -> GpuKey | None:
    """Where one job slot more would let a share that did not fit now start: the GPU served by workers of its own
    (one GPU each), none of them free nor `barred` (cordoned, draining, a foreign process: a slot more would not
    serve either), whose memory has the most `room` (what shares may still take of it), if that is at least the
    share's `part`. None: slots are not what it waits for."""
    out = {key for x in free for key in gpu_keys(x)} | {key for n in barred if n in slots for key in gpu_keys(slots[n])}
    served = {key for x in slots.values() if len(x.gpus) == 1 and not x.gpus[0].startswith(MIG) for key in gpu_keys(x)}
    best = max(((room(key), key) for key in served - out), default=None)
    return best[1] if best is not None and best[0] >= part else None


def worker_names(redis: Redis) -> list[str]:
    """The workers RQ has registered (alive or not: their alive marks say), by name."""
    return sorted(k.decode().rsplit(":", 1)[1] for k in redis.smembers(RQ_WORKERS_KEY))


def live_slots(redis: Redis) -> tuple[dict[str, Slot], set[str]]:
    """Every live worker (alive key, info), and the names of those that take no new job now (draining, paused
    (its disk, or Redis's, is full), or a job already waiting on their private queue)."""
    names = worker_names(redis)
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.get(worker_info_key(name))
            pipe.exists(alive_key(name))
            pipe.exists(drain_key(name))
            pipe.llen(Queue(private_queue(name), connection=redis).key)
            pipe.exists(paused_key(name))
        answers = pipe.execute()
    slots, unavailable = {}, set()
    for i, name in enumerate(names):
        raw, alive, draining, waiting, paused = answers[5 * i : 5 * i + 5]
        if raw is None or not alive:
            continue
        info = json.loads(raw)
        slots[name] = Slot(name, str(info.get("host", "?")), tuple(str(g) for g in info.get("gpus", [])))
        if draining or waiting or paused:
            unavailable.add(name)
    return slots, unavailable


def live_facts(redis: Redis) -> list[dict[str, Any]]:
    """What each live worker said of its host and its Python at its start (jobs.worker.host_facts): its info and
    its alive mark read in one round trip."""
    names = worker_names(redis)
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.get(worker_info_key(name))
            pipe.exists(alive_key(name))
        answers = pipe.execute()
    return [json.loads(raw).get("facts") or {} for raw, alive in zip(answers[::2], answers[1::2]) if raw and alive]


def foreign(redis: Redis, slots: Iterable[Slot], limit_bytes: int) -> dict[str, str]:
    """Workers whose GPU holds a process that is no gpudeck job's and uses more than `limit_bytes`: name -> why,
    from each host's newest nvidia-smi sample (jobs.gpus)."""
    if limit_bytes <= 0:
        return {}
    by_host: dict[str, list[Slot]] = {}
    for s in slots:
        if s.gpus:
            by_host.setdefault(s.host, []).append(s)
    out: dict[str, str] = {}
    for host, members in by_host.items():
        raw = redis.get(gpus_key(host))
        if raw is None:
            continue
        for gpu in json.loads(raw).get("gpus", []):
            for p in gpu.get("processes", []):
                used = (p.get("used_memory_mib") or 0) * (1 << 20)
                if p.get("job_id") is None and used > limit_bytes:
                    user = f" ({p['user']})" if p.get("user") else ""
                    if p.get("left_by") is not None:
                        user += f", left by ended job {p['left_by']},"
                    why = f"waiting: pid {p['pid']}{user} uses {used / (1 << 30):.1f} GiB of GPU {gpu.get('index')}"
                    for s in members:
                        if str(gpu.get("index")) in s.gpus and s.name not in out:
                            out[s.name] = why
    return out


def slots_of(rec: Job) -> list[str]:
    """The workers an active job holds (every place's, holders included)."""
    return list(rec.get("slots") or ([rec["worker"]] if rec.get("worker") and "," not in rec["worker"] else []))


def fit(pool: list[Slot], places: int, gpus: int) -> list[list[Slot]] | None:
    """`places` places of `gpus` GPUs each (a CPU worker each for 0) out of `pool`, or None. Best fit: each place
    on the host with the fewest free GPUs that still has enough; a job of several places spreads over hosts first."""
    left = sorted(pool, key=lambda s: (s.host, [(0, int(g), "") if g.isdigit() else (1, 0, g) for g in s.gpus], s.name))
    chosen: list[list[Slot]] = []
    used_hosts: set[str] = set()
    for _ in range(places):
        by_host: dict[str, list[Slot]] = {}
        for s in left:
            if (gpus == 0) == (not s.gpus):
                by_host.setdefault(s.host, []).append(s)
        options = []
        for host, members in by_host.items():
            take = _sum_to(members, gpus) if gpus else members[:1]
            if take:
                capacity = sum(len(s.gpus) for s in members) if gpus else len(members)
                options.append((host in used_hosts, capacity, host, take))
        if not options:
            return None
        _, _, host, take = min(options, key=lambda o: o[:3])
        chosen.append(take)
        used_hosts.add(host)
        left = [s for s in left if s not in take]
    return chosen


def _sum_to(members: list[Slot], gpus: int) -> list[Slot] | None:
    """Workers of one host whose GPUs add up to exactly `gpus` (the fewest workers first), or None."""
    take, need = [], gpus
    for s in sorted(members, key=lambda s: -len(s.gpus)):
        if len(s.gpus) <= need:
            take.append(s)
            need -= len(s.gpus)
        if need == 0:
            return take
    return None


def partial(pool: list[Slot], places: int, gpus: int, busy: Callable[[GpuKey], float] = lambda g: 0.0) -> list[Slot]:
    """The workers a job of whole GPUs that does not fit yet keeps for itself: on the hosts where most of what it
    needs is free, up to what it needs; a GPU shares hold counts (the fewest shares first: kept, it takes no new
    one, and is whole once they end), one held whole does not."""
    if gpus == 0:
        return [s for s in pool if not s.gpus][:places]
    if gpus > 1:
        pool = [s for s in pool if not any(g.startswith(MIG) for g in s.gpus)]
    by_host: dict[str, list[Slot]] = {}
    for s in whole_pool(pool, lambda g: WHOLE if busy(g) == WHOLE else 0.0):
        if s.gpus:
            by_host.setdefault(s.host, []).append(s)
    kept: list[Slot] = []
    for host in sorted(by_host, key=lambda h: -sum(len(s.gpus) for s in by_host[h]))[:places]:
        need = gpus
        for s in sorted(by_host[host], key=lambda s: (len(s.gpus), sum(busy(g) for g in gpu_keys(s)), s.name)):
            if len(s.gpus) <= need:
                kept.append(s)
                need -= len(s.gpus)
    return kept


def host_gpus(redis: Redis) -> dict[str, int]:
    """GPUs per host, from the live workers; hosts with CPU workers only count 0."""
    out: dict[str, int] = {}
    for slot in live_slots(redis)[0].values():
        out[slot.host] = out.get(slot.host, 0) + len(slot.gpus)
    return out
