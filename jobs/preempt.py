"""What one scheduling round knows (`Round`: the free workers, who holds what, what would fit once some jobs are
gone) and preemption (which running jobs of a lower priority to stop for a waiting one, fewest first, and stopping
them at their checkpoint). jobs.schedule walks the line with them (and re-exports these names)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from redis import Redis

from jobs import las, plan, quota
from jobs.keys import stop_key
from jobs.placement import GpuKey, Slot, choose, gpu_keys, part_of, slots_of, taken_of
from jobs.record import Job
from jobs.settings import Settings
from jobs.store import JobStore
from models.states import PRIORITIES

log = logging.getLogger("jobs.schedule")  # (its lines are the scheduler's, as they were)

PREEMPTED = "preempted"
"""The stop reason of a job stopped to make room."""


@dataclass
class Round:
    """What one round knows: the free workers, who holds what, and the policy."""

    redis: Redis
    settings: Settings
    now: float
    slots: dict[str, Slot]
    free: list[Slot]
    active: list[Job]
    holders: dict[str, int] = field(default_factory=dict)
    """worker name -> the active job holding it."""
    placed: list[int] = field(default_factory=list)
    capacity: dict[GpuKey, float] = field(default_factory=dict)
    """What shares may take of each GPU (bytes)."""
    live: dict[GpuKey, float] = field(default_factory=dict)
    """What is free on each GPU now (nvidia-smi's)."""
    left: dict[GpuKey, float] = field(default_factory=dict)
    """What processes that outlived their job hold on each GPU: it takes no job of whole GPUs until they let go."""
    out: str = ""
    """The GPUs out of service (cordoned), as a waiting job's message ends: `; cordoned: Xid 79 at 14:02 on GPU 0`."""
    unavailable: set[str] = field(default_factory=set)
    """Workers no job may take this round (their GPU out of service, or held by a process not ours)."""

    def taken(self, gone: set[int]) -> dict[GpuKey, float]:
        """What the active jobs but `gone` take of each GPU now."""
        out: dict[GpuKey, float] = {}
        for rec in self.active:
            if rec["id"] in gone:
                continue
            keys = {key for n in slots_of(rec) if n in self.slots for key in gpu_keys(self.slots[n])}
            for key in keys:
                out[key] = out.get(key, 0.0) + taken_of(rec.spec, self.settings.gpu_context_memory)
        for key, held in self.left.items():
            out[key] = out.get(key, 0.0) + held
        return out

    def fits(
        self, pool: list[Slot], places: int, k: int, share: float | None, gone: set[int]
    ) -> list[list[Slot]] | None:
        """Whether a job fits `pool` now once the jobs `gone` have ended."""
        use = self.taken(gone)

        def room(key: GpuKey) -> float:
            return self.capacity.get(key, -plan.INF) - use.get(key, 0.0)

        return choose(pool, places, k, share, lambda key: use.get(key, 0.0), room)


# -- preemption ------------------------------------------------------------------------------------
def _stopping(redis: Redis, active: list[Job]) -> dict[int, str]:
    """Active jobs with a stop requested: id -> reason."""
    if not active:
        return {}
    with redis.pipeline(transaction=False) as pipe:
        for rec in active:
            pipe.get(stop_key(rec["id"]))
        return {rec["id"]: raw.decode() for rec, raw in zip(active, pipe.execute()) if raw}


def _rank(r: Round, rec: Job) -> tuple[int, int]:
    """A running job's rank: its priority's place in PRIORITIES (0: the highest), then its band of attained service
    (jobs.las; 0 for every job under GPUDECK_POLICY=fifo). A job preempts only jobs of a higher rank."""
    return las.rank(rec, r.settings, r.now)


def victims_for(
    r: Round, rec: Job, places: int, k: int, stopping: dict[int, str], rank: tuple[int, int] | None = None
) -> tuple[list[Job], bool]:
    """(the fewest running jobs to stop so that `rec` fits, whether what is already being stopped suffices);
    `rank`: the waiting job's (jobs.las.waiting_rank; its priority's alone by default)."""
    rank = rank if rank is not None else (PRIORITIES.index(rec.spec.priority), 0)
    part = part_of(rec.spec, r.settings.gpu_context_memory)
    going = {v["id"] for v in r.active if stopping.get(v["id"])}
    coming = [r.slots[n] for v in r.active if v["id"] in going for n in slots_of(v) if n in r.slots]
    pool = list(r.free) + coming

    def fits(victims: list[Job]) -> bool:
        return r.fits(pool + _freed(r, victims), places, k, part, going | {v["id"] for v in victims}) is not None

    if fits([]):
        return [], True
    candidates = [v for v in r.active if _rank(r, v) > rank and _preemptible(r, v, stopping)]
    # lowest priority first (then the most attained service); then the fewest GPUs (a 4-GPU victim for a 1-GPU job
    # leaves three idle while it waits to start again); then the most recently started (it loses the least)
    candidates.sort(
        key=lambda v: (
            tuple(-x for x in _rank(r, v)),
            quota.holds(v),
            -float(v.get("started_at") or 0),
        )
    )
    alone = next((v for v in candidates if fits([v])), None)
    if alone is not None:  # one job makes room: the first such in the order of preference
        return [alone], False
    chosen: list[Job] = []
    for v in candidates:
        chosen.append(v)
        if fits(chosen):
            break
    else:
        return [], False
    for v in list(reversed(chosen[:-1])):  # drop any the others make unnecessary
        rest = [c for c in chosen if c is not v]
        if fits(rest):
            chosen = rest
    return chosen, False


def _preemptible(r: Round, v: Job, stopping: dict[int, str]) -> bool:
    """Whether a running job may be stopped to make room: preemptible, placed at least GPUDECK_PREEMPT_AFTER ago
    (this attempt: a job that just came back from a preemption is not taken again at once), not being stopped
    already, holding workers."""
    return (
        v.spec.preemptible
        and v["id"] not in stopping
        and r.now - float(v.get("started_at") or r.now) >= r.settings.preempt_after_s
        and bool(slots_of(v))
    )


def _freed(r: Round, jobs: list[Job]) -> list[Slot]:
    return [r.slots[n] for v in jobs for n in slots_of(v) if n in r.slots]


def _preempt(
    r: Round,
    store: JobStore,
    rec: Job,
    places: int,
    k: int,
    stopping: dict[int, str],
    rank: tuple[int, int] | None = None,
) -> str | None:
    """Stop the victims `rec` (of `rank`) needs (see victims_for); the message `rec` shows meanwhile, or None when
    no set of running jobs would make room."""
    victims, enough = victims_for(r, rec, places, k, stopping, rank)
    if enough:
        ids = [v["id"] for v in r.active if stopping.get(v["id"]) == PREEMPTED]
        return (
            f"waiting for preempted job{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} to stop"
            if ids
            else None
        )
    if not victims:
        return None
    priority = rec.spec.priority
    for v in victims:
        step = (v.get("progress") or {}).get("step")
        store.update(v["id"], preempted_by={"id": rec["id"], "priority": priority, "step": step, "at": r.now})
        store.request_stop(v["id"], PREEMPTED, only_first=True)
        stopping[v["id"]] = PREEMPTED
        log.warning("job %s (%s) preempts job %s (%s)", rec["id"], priority, v["id"], v.spec.priority)
    names = ", ".join(f"{v['id']} ({v.spec.priority})" for v in victims)
    return f"preempting job{'s' if len(victims) > 1 else ''} {names}"
