"""What a scheduling round says of what waits (jobs.schedule): each queued job's message (what it waits for), why a
free worker takes no job, and the job slots each GPU host's `gpudeck up` is asked for (shares that fit a GPU's
memory but found its workers busy: issue 64)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable

from redis import Redis

from jobs import plan
from jobs.keys import slots_wanted_key, waiting_key
from jobs.placement import GpuKey, Slot, gpu_keys
from jobs.preempt import Round
from jobs.record import Job, Kept
from jobs.store import JobStore
from models.common import size_text
from models.states import Reason, Status


def need(places: int, k: int, free: list[Slot], taken: Callable[[GpuKey], float]) -> str:
    """What a job of `places` workers of `k` GPUs each waits for, and the most GPUs free on one host now: GPUs
    nothing holds (`taken`: what is held of each), not idle workers (a GPU of four slots held whole showed as
    `3 free on one host`, issue 64)."""
    if k == 0:
        cpus = sum(1 for x in free if not x.gpus)
        return f"waiting for {places} free CPU worker{'s' if places > 1 else ''}; {cpus} free now"
    on = f"{k} GPU{'s' if k > 1 else ''} on one host" + (f", on each of {places} workers" if places > 1 else "")
    idle: dict[str, set[GpuKey]] = defaultdict(set)
    for x in free:
        idle[x.host].update(key for key in gpu_keys(x) if not taken(key))
    return f"waiting for {on}; {max(map(len, idle.values()), default=0)} free on one host now"


def need_share(r: Round, tl: plan.Timeline, spec: Kept, part: float) -> str:
    """What a share waits for: its memory and a CUDA context on one GPU, and the most free on one GPU now."""
    wants = f"waiting for {size_text(spec.gpu_memory or 0)} of one GPU"
    if not r.capacity:
        return f"{wants}; no GPU's memory is known yet (no nvidia-smi sample)"
    room = max(
        (min(c - tl.taken(key, r.now, r.now + 1), r.live.get(key, plan.INF)) for key, c in r.capacity.items()),
        default=0.0,
    )
    context = size_text(r.settings.gpu_context_memory)
    return f"{wants} and its CUDA context ({context}); {size_text(max(0.0, room))} free on one GPU now"


def tell(store: JobStore, rec: Job, message: str) -> None:
    """A queued job's message says why it waits (a preempted one keeps saying so until it starts again)."""
    if rec.get("message") != message and rec.get("reason") != Reason.PREEMPTED.value:
        store.transition(rec["id"], (Status.QUEUED.value,), message=message)


SLOTS_WANTED_TTL_S = 5
"""How long a round's word on the job slots wanted holds (the next rounds say it again while it is so)."""


def say_slots_wanted(redis: Redis, r: Round, wanted: Counter[GpuKey]) -> None:
    """Each GPU host's job slots wanted (slots_wanted_key), for its `gpudeck up`; a host that wants none: none."""
    hosts = {x.host for x in r.slots.values() if x.gpus}
    with redis.pipeline(transaction=False) as pipe:
        for host in sorted(hosts):
            mine = {gpu: n for (h, gpu), n in sorted(wanted.items()) if h == host}
            if mine:
                pipe.set(slots_wanted_key(host), json.dumps(mine), ex=SLOTS_WANTED_TTL_S)
            else:
                pipe.delete(slots_wanted_key(host))
        pipe.execute()


def say_blocked(redis: Redis, blocked: dict[str, str], ttl_s: int) -> None:
    """Why each free worker takes no job now (a foreign process on its GPU, a cordon), for `ttl_s` (waiting_key)."""
    if blocked:
        with redis.pipeline(transaction=False) as pipe:
            for name, why in blocked.items():
                pipe.set(waiting_key(name), why, ex=ttl_s)
            pipe.execute()
