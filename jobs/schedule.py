"""The scheduler: which queued job starts where, and which running jobs make room for it.

Every queued job waits in a line (jobs.queues: one sorted set per priority and owner); workers serve only their
private queues (`tasks@NAME`). A round (`place`) runs under a lock, from every worker's Placer each second, after a
submission and when a worker asks for work. It reads the free workers, orders the line (priorities first; within
one, the owner who has used least, FIFO within an owner: jobs.queues.order), and walks it:

- A job needs `workers` places (1 for a single job), each place `gpus` GPUs on one host: that many 1-GPU workers of
  the host (or fewer workers with more GPUs each), or one CPU worker for `gpus: 0`. Single-host multi-GPU jobs and
  multi-worker jobs are the same thing here: a set of places handed out together or not at all, so nothing is held
  partially and no two jobs deadlock. A place's first worker runs the job (or the task), with CUDA_VISIBLE_DEVICES
  naming every GPU of the place; the place's other workers run `jobs.task.hold` until the job ends.
- Hosts are chosen best-fit (the host with the fewest free GPUs that still fits), so a 1-GPU job does not split the
  free pair a 2-GPU job needs; multi-worker jobs spread their places over hosts first.
- The first job that does not fit keeps the free workers it could use (one reservation, recomputed each round, as
  EASY backfill's), so a stream of 1-GPU jobs behind it cannot starve a 4-GPU job, while jobs behind it use what
  else is free (GPUDECK_BACKFILL=on lets them use the kept workers too).
- A job that does not fit and outranks running jobs (strictly higher priority) preempts the fewest of them (lowest
  priority first, then the fewest GPUs, then the most recently started) placed at least GPUDECK_PREEMPT_AFTER ago and
  preemptible: each is stopped as a cancel stops (SIGTERM, checkpoint) and goes back in line (jobs.lifecycle); the
  workers it frees are kept for the job that preempted it (a job whose preemption is under way keeps what is free
  too).
- Skipped without holding anything up: a job over its owner's GPU quota, a job of a sweep at its `max_concurrent`.
  A job waiting for its dependencies (`after`) is not in the line until they succeed.
- A worker whose GPU holds a process that is not a gpudeck job's and uses more than GPUDECK_FOREIGN_MEMORY takes no
  job while it does.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from redis import Redis
from rq import Queue

from jobs import accounts, disk, gpuhealth, las, plan, projects, queues, quota, share, sweeps, taskrecord, tokens
from jobs.depends import AFTER_SWEEP_S, CHECK_MAX, release_dependencies  # noqa: F401 (re-exported: their old home)
from jobs.keys import (
    PLACE_DUE_KEY,
    QUEUED_AT_KEY,
    RUN_HOLD,
    RUN_JOB,
    RUN_TASK,
    SCHEDULE_LOCK_KEY,
    alive_key,
    heartbeat_key,
    paused_key,
    private_queue,
    rq_hold_id,
    rq_job_id,
    rq_task_id,
)
from jobs.periodic import Periodic
from jobs.placement import (
    WHOLE,
    GpuKey,
    Slot,
    foreign,
    gpu_keys,
    live_slots,
    memory,
    part_of,
    partial,
    slot_wanted,
    slots_of,
    taken_of,
)
from jobs.preempt import (  # noqa: F401 (re-exported: their old home)
    PREEMPTED,
    Round,
    _preempt,
    _preemptible,
    _rank,
    _stopping,
    victims_for,
)
from jobs.record import Job, Kept
from jobs.settings import Settings
from jobs.spec import command_words
from jobs.store import JobStore
from jobs.waiting import need, need_share, say_blocked, say_slots_wanted, tell
from models.states import PRIORITIES, Status

log = logging.getLogger(__name__)

PLACE_EVERY_S = 1.0
"""How often each worker runs a scheduling round (and says it is alive)."""
ALIVE_TTL_S = 10
"""A worker counts as available while its alive key (refreshed every PLACE_EVERY_S) exists."""
CLAIM_WITHIN_S = 60
"""A placed single job's heartbeat lasts this long until its work-horse beats itself (a worker that died between
placement and start: the reaper retries the job then)."""
SCAN_MAX = 2000
"""Most queued jobs one round looks at (it stops earlier once nothing is free and nothing can be preempted)."""
PREEMPT_TRIES = 16
"""Most waiting jobs one round looks for victims for (a burst of high jobs does not make a round slow)."""
SAYS_WHY = 64
"""However full the box, a round looks at the first this many jobs of the line, to keep their messages current."""


# -- the round -------------------------------------------------------------------------------------
def place(redis: Redis, settings: Settings, now: float | None = None, wait_s: float = 0.0) -> list[int]:
    """One scheduling round (see the module's docstring); returns the ids placed. Runs under the scheduler's lock:
    a round that finds another running (for `wait_s`) does nothing. `now`: the round's clock (tests move it)."""
    with lock_round(redis, wait_s=wait_s) as held:
        return _round(redis, settings, time.time() if now is None else now) if held else []


def timeline(r: Round, unavailable: Iterable[str], history: plan.History) -> plan.Timeline:
    """The plan's start: every worker busy until what holds it is expected to end (unavailable ones for good), and
    what each job takes of its GPUs (all, or its share) until then; what shares may take of each GPU."""
    tl = plan.Timeline(r.now, r.slots, capacity=r.capacity, live=r.live)
    held: set[str] = set()
    for rec in r.active:
        end, _ = plan.expected_end(rec, r.now, history)
        tl.hold(slots_of(rec), r.now, end, taken_of(rec.spec, r.settings.gpu_context_memory))
        held.update(slots_of(rec))
    tl.hold(set(unavailable) - held, r.now, plan.INF, 0)  # (draining, paused, foreign: not what a job holds)
    for key, left in r.left.items():  # (a process that outlived its job: until it lets go)
        tl.gpus.setdefault(key, []).append((r.now, plan.INF, left))
    return tl


def cordoned(redis: Redis, slots: Iterable[Slot]) -> dict[str, str]:
    """Workers of a GPU taken out of service by a hardware error: name -> why (until an admin uncordons it)."""
    found = gpuhealth.cordons(redis)
    out = {}
    for x in slots:
        for key in gpu_keys(x):
            if key in found:
                at = time.strftime("%H:%M", time.localtime(found[key]["at"]))
                out[x.name] = f"cordoned: {gpuhealth.cause(found[key])} at {at} on GPU {key[1]} (gpudeck gpu uncordon)"
    return out


def gpu_room(
    redis: Redis, s: Settings, slots: dict[str, Slot]
) -> tuple[dict[GpuKey, float], dict[GpuKey, float], dict[GpuKey, float]]:
    """What shares may take of each GPU (its memory less GPUDECK_GPU_MEMORY_RESERVE), what is free on it now, and
    what processes that outlived their job still hold on it."""
    found = memory(redis, {x.host for x in slots.values() if x.gpus})
    capacity = {key: float(max(0, total - s.gpu_memory_reserve)) for key, (total, _, _) in found.items()}
    live = {key: float(total - used) for key, (total, used, _) in found.items()}
    return capacity, live, {key: float(left) for key, (_, _, left) in found.items() if left}


def _round(redis: Redis, s: Settings, now: float) -> list[int]:
    """One round: what is free and who holds what (`_look`), then the lines walked in the scheduler's order, each
    queued job taken through the steps of `Walk.consider` — its sweep's cap, its owner's quota, a fit now, preemption
    for it, a reservation in time — until the walk has seen enough; the jobs placed."""
    queues.release_begun(redis, now)  # (a job whose `begin` has come joins its line)
    las.settle(redis, s, now)  # (least attained service: who came back in line goes to its band,
    las.promote(redis, s, now)  # and who waited long enough back to band 0)
    r = _look(redis, s, now)
    found = queues.lines(redis, LINE_HEAD)  # each line's head; the rest as the round reaches it
    if not found:
        return []
    walk = Walk(r)
    ordered = queues.scheduler_order(redis, s, found, walk.used, r.now, queues.reader(redis, LINE_HEAD, LINE_HEAD * 4))
    for n, (job_id, priority, owner, rec) in enumerate(with_records(walk.store, ordered)):
        if not walk.goes_on(n, priority):
            break
        walk.consider(job_id, priority, owner, rec)
    say_slots_wanted(redis, r, walk.slots_wanted)
    return r.placed


def _look(redis: Redis, s: Settings, now: float) -> Round:
    """What a round starts from: dependencies released, the live workers, who holds which, what is blocked (memory a
    foreign process holds, a cordoned GPU: each waiting job told why), what is free, each GPU's room for shares."""
    store = JobStore(redis)
    release_dependencies(redis, store)
    slots, unavailable = live_slots(redis)
    active = store.active()
    holders = {name: rec["id"] for rec in active for name in slots_of(rec)}
    blocked = foreign(redis, [slots[n] for n in slots if n not in holders], s.foreign_memory)
    out = cordoned(redis, slots.values())
    blocked.update(out)
    say_blocked(redis, blocked, int(3 * PLACE_EVERY_S) + 2)
    free = [x for n, x in slots.items() if n not in holders and n not in unavailable and n not in blocked]
    capacity, live, left = gpu_room(redis, s, slots)
    r = Round(redis, s, now, slots, free, active, holders, capacity=capacity, live=live, left=left)
    r.unavailable = set(unavailable) | set(blocked)
    if out:  # (what a waiting job of GPUs is told besides: why fewer GPUs serve)
        r.out = "; " + ", ".join(sorted({why.split(" (")[0] for why in out.values()}))
    return r


class Walk:
    """A round's walk down the lines: what it has learned so far (each owner's GPUs held, each sweep's jobs running,
    the timeline of reservations, preemptions started and left to try), and the steps it takes each queued job
    through."""

    def __init__(self, r: Round):
        s, active = r.settings, r.active
        self.r, self.s, self.store = r, s, JobStore(r.redis)
        self.history = plan.learned(r.redis, active)
        self.tl = timeline(r, r.unavailable, self.history)
        self.depth = plan.RESERVE_DEPTH
        """Reservations in time left to make (conservative backfill)."""
        self.used = share.usage(r.redis, s.fairshare_halflife_s, active, r.now) if s.fairshare else {}
        self.held: dict[str | None, float] = defaultdict(float)  # (GPUs each owner holds: a share counts its part)
        self.project_held: dict[str, float] = defaultdict(float)  # (and each project)
        for one in active:
            self.held[one.get("owner")] += quota.holds(one)
            if one.spec.project is not None:
                self.project_held[one.spec.project] += quota.holds(one)
        self.sweep_running = Counter(one.get("sweep_id") for one in active if one.get("sweep_id") is not None)
        self.limits: dict[int, int | None] = {}
        self.stopping = _stopping(r.redis, active)
        # the lowest rank a job could be preempted from (priority, then band of attained service: jobs.las), among
        # those that may be (and the others stopping)
        ranks = [_rank(r, v) for v in active if _preemptible(r, v, self.stopping)]
        self.lowest_running = max(ranks, default=(-1, 0))
        self.tries = PREEMPT_TRIES
        self.reserved = False  # (only the first job that does not fit keeps free workers, and those preemption frees)
        self.preempting = {
            int(v["preempted_by"]["id"])
            for v in active
            if self.stopping.get(v["id"]) == PREEMPTED and v.get("preempted_by")
        }
        self.quotas = tokens.quotas(r.redis)
        self.projects = projects.records(r.redis)  # (their caps and GPU-hour budgets)
        self.spent: dict[str, str | None] = {}
        """Each project with a GPU-hour budget: why it may start nothing more this period (None: it may)."""
        self.slots_wanted: Counter[GpuKey] = Counter()
        """Job slots more wanted on each GPU for shares that fit its memory but found its workers busy."""
        self.promised: dict[GpuKey, float] = defaultdict(float)  # (the memory of those shares, GPU by GPU)

    def can_preempt(self, rank: tuple[int, int]) -> bool:
        """Whether a job of `rank` (its priority's place, its band: jobs.las) may still preempt one running now."""
        return self.s.preempt and self.tries > 0 and rank < self.lowest_running

    def goes_on(self, n: int, priority: str) -> bool:
        """Whether the walk looks at its `n`-th job: not past SCAN_MAX, nor past SAYS_WHY once no free worker has
        room and the job could preempt nobody."""
        best = (PRIORITIES.index(priority), 0)  # (the highest rank a job of this priority may have)
        return n < SCAN_MAX and (n < SAYS_WHY or self.can_preempt(best) or self.room_now())

    def room_now(self) -> bool:
        """Whether a free worker could take a job now: one of no GPUs, or one with a GPU not held whole. (The other
        slots of a GPU a job holds whole have nothing to give: with 1,000 jobs queued behind such a GPU, every
        round of every worker read them all, and a submission waited for one — issue 64.)"""
        now = self.r.now
        return any(
            not x.gpus or any(self.tl.taken(key, now, now + 1) < WHOLE for key in gpu_keys(x)) for x in self.r.free
        )

    def consider(self, job_id: int, priority: str, owner: str | None, rec: Job | None) -> None:
        """One queued job, through the steps: still queued; its sweep's cap; its owner's quota; a fit now; else
        preemption for it, a reservation in time, or what it could use kept free for it — and told why it waits."""
        if rec is None:  # (deleted meanwhile)
            self.r.redis.zrem(queues.line_key(priority, owner), job_id)
            return
        if rec["status"] != Status.QUEUED.value:
            queues.withdraw(self.r.redis, rec)
            return
        spec = rec.spec
        if self.over_sweep_cap(rec):
            return
        gpus = self.gpus_of(spec)
        if self.over_quota(rec, owner, gpus):
            return  # (over its owner's quota, it holds nobody else up, and preempts nobody)
        part = part_of(spec, self.s.gpu_context_memory)
        # (its expected duration matters where it could start now, or where a reservation has a time to find)
        wanted = self.s.backfill and (self.r.free or (self.depth > 0 and len(self.tl.times()) > 1))
        took = plan.expected(rec, self.history)[0] if wanted else None
        if self.fits_now(rec, spec, owner, gpus, part, took):
            return
        if part:
            self.want_slot(part)
        held = lambda key: self.tl.taken(key, self.r.now, self.r.now + 1)  # noqa: E731
        message = need_share(self.r, self.tl, spec, part) if part else need(spec.workers, spec.gpus, self.r.free, held)
        message += self.r.out if spec.gpus else ""
        rank = self.rank_of(rec, priority)
        if self.can_preempt(rank):
            message = self.preempt_for(rec, spec, rank) or message
        keep = job_id in self.preempting or not (self.s.backfill or self.reserved)
        if self.s.backfill and job_id not in self.preempting and self.depth > 0:
            if self.reserve_in_time(spec, part, took):
                tell(self.store, rec, message)
                return
            keep = not self.reserved  # (no known time: what it could use stays free for the first such job)
        if keep and not part:  # what it could use stays free for it, for good (a share keeps no GPU)
            self.keep_free(spec)
        tell(self.store, rec, message)

    def want_slot(self, part: float) -> None:
        """A share that did not fit now: one job slot more wanted on the GPU whose memory has room for it while its
        workers are busy (placement.slot_wanted), for `gpudeck up` to start (jobs.supervisor)."""
        r = self.r
        if not r.capacity:
            return

        def room(key: GpuKey) -> float:
            taken = self.tl.taken(key, r.now, r.now + 1) + self.promised[key]
            return min(r.capacity.get(key, 0.0) - taken, r.live.get(key, plan.INF) - self.promised[key])

        key = slot_wanted(r.slots, r.free, r.unavailable, room, part)
        if key is not None:
            self.slots_wanted[key] += 1
            self.promised[key] += part

    def over_sweep_cap(self, rec: Job) -> bool:
        """Whether its sweep already runs as many jobs at once as it may (the job told so)."""
        sweep_id = rec.get("sweep_id")
        if sweep_id is None:
            return False
        if sweep_id not in self.limits:
            self.limits[sweep_id] = sweeps.max_concurrent(self.r.redis, sweep_id)
        cap, running = self.limits[sweep_id], self.sweep_running[sweep_id]
        if cap is not None and running >= cap:
            tell(self.store, rec, f"waiting: sweep {sweep_id} runs {running} of {cap} at once")
            return True
        return False

    def gpus_of(self, spec: Kept) -> float:
        """The GPUs the job would hold: a share counts as its part of the largest GPU until placed."""
        gpus: float = quota.job_gpus(spec)
        if spec.gpu_memory and self.r.capacity:
            gpus = min(1.0, spec.gpu_memory / (max(self.r.capacity.values()) + self.s.gpu_memory_reserve))
        return gpus

    def over_quota(self, rec: Job, owner: str | None, gpus: float) -> bool:
        """Whether the job would take its owner past their GPU quota (the job told so)."""
        limit = self.quotas.get(owner) if owner and gpus else None
        if limit is not None and self.held[owner] + gpus > limit:
            tell(self.store, rec, quota.waiting(owner or "", self.held[owner], limit))
            return True
        project = rec.spec.project
        if not project or not gpus or (record := self.projects.get(project)) is None:
            return False
        if project not in self.spent:
            self.spent[project] = accounts.over_budget(self.r.redis, record)
        if self.spent[project] is not None:
            tell(self.store, rec, f"waiting: {self.spent[project]}")
            return True
        cap = record.get("max_gpus")
        if cap is not None and self.project_held[project] + gpus > cap:
            tell(self.store, rec, quota.waiting(f"project {project}", self.project_held[project], cap))
            return True
        return False

    def fits_now(
        self, rec: Job, spec: Kept, owner: str | None, gpus: float, part: float | None, took: float | None
    ) -> bool:
        """Place the job now where workers (and GPU memory) are free until it is expected to end (unknown: reserved
        by nobody; without backfill, free for good: only what running jobs hold is taken); whether it was."""
        r, job_id = self.r, rec["id"]
        backfill_took = took if self.s.backfill else None
        chosen = self.tl.fit_at([x.name for x in r.free], r.now, spec.workers, spec.gpus, backfill_took, part)
        if chosen is None or not _assign(r, self.store, rec, chosen):
            return False
        r.placed.append(job_id)
        taken = {x.name for p in chosen for x in p}
        r.free = [x for x in r.free if x.name not in taken]
        self.tl.take(taken, r.now, took, taken_of(spec, self.s.gpu_context_memory))
        took_gpus = quota.holds(self.store.get(job_id)) if spec.gpu_memory else gpus
        self.held[owner] += took_gpus
        if spec.project is not None:
            self.project_held[spec.project] += took_gpus
        if rec.get("sweep_id") is not None:
            self.sweep_running[rec["sweep_id"]] += 1
        return True

    def rank_of(self, rec: Job, priority: str) -> tuple[int, int]:
        """A queued job's rank (jobs.las.waiting_rank: its priority's place, and its band under least attained
        service, promoted once it has waited long enough)."""
        if self.s.policy != "las" or not rec.get("ran_s"):
            return PRIORITIES.index(priority), 0
        since = self.r.redis.hget(QUEUED_AT_KEY, str(rec["id"]))
        return las.waiting_rank(rec, self.s, self.r.now, float(since) if since is not None else None)

    def preempt_for(self, rec: Job, spec: Kept, rank: tuple[int, int]) -> str | None:
        """Preempt running jobs of a higher rank (a lower priority, or more attained service) for it (one try of
        PREEMPT_TRIES); what it is told, if anything."""
        self.tries -= 1
        said = _preempt(self.r, self.store, rec, spec.workers, spec.gpus, self.stopping, rank)
        if said and said.startswith("preempting"):
            self.preempting.add(rec["id"])
        return said

    def reserve_in_time(self, spec: Kept, part: float | None, took: float | None) -> bool:
        """A reservation at the earliest time its workers are free for long enough (conservative backfill);
        whether one was made."""
        self.depth -= 1
        start, picked = self.tl.earliest(spec.workers, spec.gpus, took, part)
        if start is None or picked is None:
            return False
        self.tl.take({x.name for p in picked for x in p}, start, took, taken_of(spec, self.s.gpu_context_memory))
        return True

    def keep_free(self, spec: Kept) -> None:
        """What the job could use stays free for it, for good (no later job takes it this round)."""
        r, tl = self.r, self.tl
        kept = {x.name for x in partial(r.free, spec.workers, spec.gpus, lambda key: tl.taken(key, r.now, r.now + 1))}
        r.free = [x for x in r.free if x.name not in kept]
        tl.hold(kept, r.now, plan.INF)
        self.reserved = True


BATCH = 32
"""Records read in one round trip while a round walks the line."""
LINE_HEAD = 8
"""Jobs of each line a round reads at first (then four times as many at a time, as far as it goes)."""


def with_records(
    store: JobStore, ordered: Iterator[tuple[int, str, str | None]]
) -> Iterator[tuple[int, str, str | None, Job | None]]:
    """The line in order, each job with its record, read BATCH at a time."""
    while batch := list(itertools.islice(ordered, BATCH)):
        recs = store.get_many([job_id for job_id, _, _ in batch])
        for (job_id, priority, owner), rec in zip(batch, recs):
            yield job_id, priority, owner, rec


# -- placing ---------------------------------------------------------------------------------------
def _assign(r: Round, store: JobStore, rec: Job, chosen: list[list[Slot]]) -> bool:
    """queued -> starting with a new placement generation; then the job (or each task) on its place's first
    worker's private queue, and a hold on each other worker of the place."""
    redis, job_id, spec = r.redis, rec["id"], rec.spec
    gen = int(rec.get("gen", 0)) + 1
    multi = spec.multi_worker
    leads = [p[0] for p in chosen]
    gpu_ids = [[g for x in p for g in x.gpus] for p in chosen]
    if multi:
        pipe = redis.pipeline()
        for index, (lead, ids) in enumerate(zip(leads, gpu_ids)):
            taskrecord.place(pipe, job_id, index, gen, lead.name, lead.host, ids)
        pipe.execute()
    fields: dict[str, Any] = {
        "status": Status.STARTING.value,
        "gen": gen,
        "placed_at": r.now,
        "started_at": r.now,
        "worker": ", ".join(x.name for x in leads),
        "gpu_ids": [g for ids in gpu_ids for g in ids],
        "gpu_fraction": _fraction(r, spec, chosen),
        "slots": [x.name for p in chosen for x in p],
        "first_started_at": rec.get("first_started_at") or r.now,
        "reason": None,
        "message": None,
        "pid": None,
    }
    with redis.pipeline() as pipe:
        queues.withdraw(redis, rec, pipe)
        pipe.execute()
    if not store.transition(job_id, (Status.QUEUED.value,), **fields):
        return False
    if not multi:
        redis.set(heartbeat_key(job_id), leads[0].name, ex=CLAIM_WITHIN_S)
    what = command_words(spec.raw)
    held = 0
    for index, p in enumerate(chosen):
        lead = p[0]
        if multi:
            _push(
                redis,
                lead.name,
                RUN_TASK,
                (job_id, index, gen),
                rq_task_id(job_id, gen, index),
                f"task {index}: {what}",
            )
        else:
            _push(redis, lead.name, RUN_JOB, (job_id, gen), rq_job_id(job_id, int(rec.get("attempt", 1))), what)
        for x in p[1:]:
            _push(redis, x.name, RUN_HOLD, (job_id, gen), rq_hold_id(job_id, gen, held), f"holds GPUs for {what}")
            held += 1
    where = "; ".join(f"{p[0].host}: {', '.join(x.name for x in p)}" for p in chosen)
    log.info("job %s placed (gen %d) on %s", job_id, gen, where)
    return True


def _fraction(r: Round, spec: Kept, chosen: list[list[Slot]]) -> float | None:
    """What part of its GPU a share holds (its bytes over the GPU's memory), for fair share and quotas; None for a
    job of whole GPUs."""
    if not spec.gpu_memory or not chosen[0][0].gpus:
        return None
    key = gpu_keys(chosen[0][0])[0]
    total = r.capacity.get(key, 0.0) + r.settings.gpu_memory_reserve
    return round(min(1.0, spec.gpu_memory / total), 4) if total > 0 else 1.0


def _push(redis: Redis, worker: str, func: str, args: tuple, rq_id: str, what: str) -> None:
    Queue(private_queue(worker), connection=redis).enqueue_call(
        func,
        args=args,
        job_id=rq_id,
        timeout=-1,  # the work-horse enforces the spec's timeout itself
        result_ttl=queues.RQ_JOB_TTL,
        failure_ttl=queues.RQ_JOB_TTL,
        description=f"gpudeck job {args[0]}: {what}",
    )


class Placer(Periodic):
    """In each worker: says the worker is alive for placement and runs a scheduling round."""

    what, every_s = "placer", PLACE_EVERY_S

    def __init__(self, redis_url: str, worker: str, settings: Settings):
        super().__init__(redis_url, "gpudeck-placer")
        self.worker = worker
        self.settings = settings

    def round(self) -> None:
        self.redis.set(alive_key(self.worker), f"{time.time():.3f}", ex=ALIVE_TTL_S)  # (its clock: gpudeck doctor)
        low = disk.low(self.settings)
        if low is not None:  # its work-horse would take no job: none is placed on it
            self.redis.set(paused_key(self.worker), f"the disk is below GPUDECK_MIN_FREE ({low} bytes free)", ex=10)
        else:
            self.redis.delete(paused_key(self.worker))
        if self.redis.set(PLACE_DUE_KEY, self.worker, nx=True, px=int(PLACE_EVERY_S * 800)):
            place(self.redis, self.settings)  # (this second's periodic round, for the box: one placer's)

    def closing(self) -> None:
        self.redis.delete(alive_key(self.worker))


LOCK_WAIT_S = 10.0
"""The longest the scheduler's lock is held (a holder that died frees it then): what one waits at most for it."""


@contextlib.contextmanager
def lock_round(redis: Redis, wait_s: float) -> Iterator[bool]:
    """The scheduler's lock for the block (False: another holder kept it past `wait_s`)."""
    token = uuid.uuid4().hex
    deadline = time.monotonic() + wait_s
    while not (held := bool(redis.set(SCHEDULE_LOCK_KEY, token, nx=True, px=int(LOCK_WAIT_S * 1000)))):
        if time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    try:
        yield held
    finally:
        if held and redis.get(SCHEDULE_LOCK_KEY) == token.encode():
            redis.delete(SCHEDULE_LOCK_KEY)
