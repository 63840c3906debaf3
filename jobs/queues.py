"""Submitting a validated spec, and the line queued jobs wait in: one sorted set per priority and owner, and the
order the scheduler (jobs.schedule) reads them in."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import heapq
import itertools
import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from jobs import accounts, datasets, projects, quota, sources
from jobs import spec as spec_mod
from jobs.backends import base as backends
from jobs.errors import Conflict, Forbidden, ReferenceNotFound, Unprocessable, ValidationError
from jobs.keys import (
    AFTER_CHECK_KEY,
    AFTER_KEY,
    BEGINS_KEY,
    LINES_KEY,
    PRIORITIES,
    QUEUED_AT_KEY,
    dependants_key,
    idempotency_key,
    job_key,
    line_key,
    line_name,
    parse_line_name,
    queue_name,
)
from jobs.placement import host_gpus, live_facts, live_slots, memory
from jobs.record import Job, Kept
from jobs.settings import Settings
from jobs.share import owner_of, usage
from jobs.store import JobStore
from models import sourcetree
from models.common import iso, size_text
from models.specchecks import begin_at
from models.states import Status

RQ_JOB_TTL = 7 * 24 * 3600
"""How long RQ keeps its own job objects and results; gpudeck's job records are kept for good."""


def live_gpu_workers(redis: Redis) -> int:
    """How many GPUs the live workers serve, on all hosts."""
    return sum(host_gpus(redis).values())


def check_gpu_memory(redis: Redis, wanted: int, hosts: list[str], s: Settings) -> None:
    """ValidationError naming `gpu_memory` for a share that with its CUDA context is larger than any live GPU's
    memory less the reserve (GPUs whose memory no sample gives yet refuse nothing)."""
    found = memory(redis, hosts)
    if not found:
        return
    (host, index), (total, _, _) = max(found.items(), key=lambda kv: (kv[1][0], kv[0]))
    if wanted + s.gpu_context_memory > total - s.gpu_memory_reserve:
        room = max(0, total - s.gpu_memory_reserve - s.gpu_context_memory)
        raise ValidationError(
            {
                "gpu_memory": f"asks {size_text(wanted)} of one GPU; the largest, GPU {index} of {host}, has "
                f"{size_text(total)}: {size_text(room)} for a share once GPUDECK_GPU_MEMORY_RESERVE "
                f"({size_text(s.gpu_memory_reserve)}) and its CUDA context (GPUDECK_GPU_CONTEXT_MEMORY, "
                f"{size_text(s.gpu_context_memory)}) are kept"
            }
        )


def check_hosts(redis: Redis, spec: Kept, s: Settings) -> None:
    """ValidationError for a job that asks more GPUs (per worker) than any live host has: it could never start.
    With no live GPU worker (a stack still starting, a host away) nothing is refused."""
    slots = live_slots(redis)[0].values()  # (read once: the hosts' GPUs and whether a CPU worker lives)
    hosts: dict[str, int] = {}
    for slot in slots:
        hosts[slot.host] = hosts.get(slot.host, 0) + len(slot.gpus)
    # (a CPU job where no CPU worker lives would wait for good: issue 67 #4. One of several tasks waits for more
    # CPU workers, as one of several GPU hosts does for more hosts: they may be starting, or on their way)
    if spec.gpus == 0 and hosts and all(slot.gpus for slot in slots):
        raise Conflict(NO_CPU_WORKER, {"field": "gpus"})
    if spec.gpu_memory and any(hosts.values()):
        check_gpu_memory(redis, spec.gpu_memory, [h for h, n in hosts.items() if n], s)
    if not any(hosts.values()) or spec.gpus <= max(hosts.values()):
        return
    host, most = max(hosts.items(), key=lambda kv: (kv[1], kv[0]))
    per = " per worker" if spec.multi_worker else ""
    raise ValidationError({"gpus": f"needs {spec.gpus} GPUs on one host{per}; the largest host, {host}, has {most}"})


NO_CPU_WORKER = (
    "gpus: 0 asks for a CPU worker, and every live worker holds a GPU (gpudeck up starts one on a GPU host only "
    "where it has cores to spare): ask for a GPU (--gpus 1), or start a CPU worker (gpudeck up --cpu-workers 1, "
    "or gpudeck worker --cpu)"
)
NO_TENSORFLOW = (
    "this server cannot train zoo models: TensorFlow is not installed where its workers run; install it there "
    "(pip install 'gpudeck[tensorflow]', or 'gpudeck[tensorflow-gpu]' on a GPU box) and restart them; command jobs "
    "and sessions run as they are"
)


def check_zoo(redis: Redis) -> None:
    """Conflict for a zoo job where nothing could train it (issue 68): live workers, none with TensorFlow (a worker
    of an older gpudeck says nothing and counts as having it); with none live, this process's own Python decides
    (`gpudeck up` runs the API and its workers in one)."""
    facts = live_facts(redis)
    if facts:
        if not any(f.get("tensorflow", True) for f in facts):
            raise Conflict(NO_TENSORFLOW, {"field": "model", "install": "gpudeck[tensorflow]"})
    elif not _tensorflow_here():
        raise Conflict(NO_TENSORFLOW, {"field": "model", "install": "gpudeck[tensorflow]"})


@functools.lru_cache(maxsize=1)
def _tensorflow_here() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None


def check_after(redis: Redis, after: list[int]) -> None:
    """ReferenceNotFound naming `after` for a dependency on a job that does not exist."""
    if not after:
        return
    with redis.pipeline(transaction=False) as pipe:
        for job_id in after:
            pipe.exists(job_key(job_id))
        missing = [i for i, there in zip(after, pipe.execute()) if not there]
    if missing:
        raise ReferenceNotFound(
            {"after": f"no job {', '.join(map(str, missing))}: a job may depend only on jobs that exist"}
        )


def validate(redis: Redis, body: Any, settings: Settings, default_gpus: int | None = None) -> dict:
    """spec.validate with what only the store and the settings know: live GPU workers (the default gpus), uploaded
    datasets and sources, data roots, whether command jobs are allowed, the registered environments."""
    s = settings
    backend = backends.of(s)
    if default_gpus is None:
        default_gpus = backend.default_gpus(redis)
    spec = spec_mod.validate(
        body,
        default_gpus=default_gpus,
        data_roots=s.data_roots,
        pin=lambda n, v: datasets.pin(redis, n, v),
        commands_allowed=s.command_jobs_allowed,
        source_known=lambda sha: sources.exists(redis, sha),
        envs=tuple(name for name, _ in s.envs),
        caches=tuple(c.name for c in s.caches),
        webhooks=tuple(w.name for w in s.webhooks),
        idle_range=(s.session_idle_min_s, max(s.session_idle_min_s, s.session_idle_max_s)),
        session_max=s.session_max_s,
        mlflow=bool(s.mlflow_uri),
    )
    typed = Kept(spec)
    check_after(redis, list(typed.after))
    backend.admit(redis, typed, s)
    return spec


def submit(
    redis: Redis,
    body: Any,
    settings: Settings,
    extra: dict[str, Any] | None = None,
    also: Callable[[Any, int], None] | None = None,
) -> Job:
    """Validate, assign the next id, and write the record (with `extra` fields) and the RQ job in one transaction
    (with what `also(pipe, job_id)` adds). A command job's source is pinned: a server folder is snapshotted now,
    and the record keeps the snapshot's description."""
    s = settings
    spec = validate(redis, body, s)
    project = projects.settle(redis, (extra or {}).get("owner"), spec)
    refuse_over_budget(redis, project)
    typed = Kept(spec)
    quota.check_fits(redis, (extra or {}).get("owner"), typed, project)
    source = None
    if typed.source:
        sha = sourcetree.parse_ref(typed.source)
        source = sources.get(redis, sha) if sha else sources.snapshot_folder(redis, s, typed.source)
        spec["source"] = source["ref"]
    store = JobStore(redis)
    job_id = store.next_id()
    name = queue_name(typed.gpus, typed.priority)
    owner = (extra or {}).get("owner")
    if typed.after:
        extra = {**(extra or {}), "message": waiting_for(list(typed.after))}
    elif (begin := begins_at(typed)) is not None and begin > time.time():
        extra = {**(extra or {}), "message": waiting_until(begin)}
    with redis.pipeline() as pipe:
        rec = store.create(job_id, spec, name, pipe=pipe, source=source, extra=extra)
        enqueue(pipe, job_id, typed, owner, waiting=bool(typed.after))
        if project is not None and project.get("max_queued") is not None:  # (what --max-queued counts)
            projects.track(pipe, project["name"], job_id)
        if also is not None:
            also(pipe, job_id)
        pipe.execute()
    return rec


def refuse_over_budget(redis: Redis, project: dict[str, Any] | None) -> None:
    """Forbidden for a job of a project whose GPU-hours this period are used up, where the project says to refuse
    (`--over-budget refuse`; `wait`: its jobs wait in line instead)."""
    if project is None or project.get("over_budget") != "refuse":
        return
    why = accounts.over_budget(redis, project)
    if why is not None:
        raise Forbidden(
            f"{why}: new jobs are refused until the next {project['budget_period']} (or an admin raises the budget)",
            {"rule": "max_gpu_hours", "project": project["name"]},
        )


def begins_at(spec: Kept) -> float | None:
    """A job's `begin` as a Unix time (its kept form is an ISO 8601 UTC date-time), or None."""
    begin = spec.raw.get("begin")
    return begin_at(begin, 0.0) if isinstance(begin, str) else None


def waiting_until(at: float) -> str:
    """The message of a job whose `begin` is ahead."""
    return f"waiting until {iso(at)} (its begin)"


def release_begun(redis: Redis, now: float) -> list[int]:
    """Move each job whose `begin` has come (BEGINS_KEY) into its line; the ids moved."""
    due = [int(raw) for raw in redis.zrangebyscore(BEGINS_KEY, "-inf", now)]
    if not due:
        return []
    moved = []
    with redis.pipeline(transaction=False) as pipe:
        for job_id, rec in zip(due, JobStore(redis).get_many(due)):
            pipe.zrem(BEGINS_KEY, job_id)
            if rec is not None and rec.status == Status.QUEUED.value:
                enqueue(pipe, job_id, rec.spec, rec.owner, rec.seq, now=now)
                moved.append(job_id)
        pipe.execute()
    return moved


def waiting_for(after: Sequence[int]) -> str:
    """The message of a job whose dependencies have not all succeeded yet."""
    return f"waiting for job{'s' if len(after) > 1 else ''} {', '.join(map(str, after))}"


# -- the line ---------------------------------------------------------------------------------
def enqueue(
    target: Any,
    job_id: int,
    spec: Kept,
    owner: str | None,
    seq: float | None = None,
    waiting: bool = False,
    now: float | None = None,
) -> None:
    """Put a job in its line (its priority's, its owner's), at `seq` (default: its id: the order of submission);
    `waiting`: it waits for its dependencies first (the scheduler moves it into its line when they succeed); one
    whose `begin` is still ahead of `now` waits out of line until then (BEGINS_KEY). `target`: Redis or a
    pipeline."""
    begin = begins_at(spec)
    if not waiting and begin is not None and begin > (time.time() if now is None else now):
        target.zadd(BEGINS_KEY, {str(job_id): begin})
        return
    if waiting:
        target.sadd(AFTER_KEY, job_id)
        target.sadd(AFTER_CHECK_KEY, job_id)  # (once: a dependency may have ended already)
        for dep in spec.after:  # (the index the end of each looks in)
            target.sadd(dependants_key(dep), job_id)
        return
    priority = spec.priority
    target.zadd(line_key(priority, owner), {str(job_id): job_id if seq is None else seq})
    target.sadd(LINES_KEY, line_name(priority, owner))
    target.hset(QUEUED_AT_KEY, str(job_id), time.time())


def withdraw(redis: Redis, rec: Job, target: Any = None) -> None:
    """Take a queued job out of its line (or out of the jobs waiting for dependencies, or for their `begin`)."""
    pipe = target if target is not None else redis.pipeline(transaction=False)
    pipe.zrem(line_key(rec.spec.priority, rec.get("owner")), rec["id"])
    pipe.srem(AFTER_KEY, rec["id"])
    pipe.zrem(BEGINS_KEY, rec["id"])
    pipe.hdel(QUEUED_AT_KEY, rec["id"])
    if target is None:
        pipe.execute()


Line = tuple[str, "str | None"]
"""(priority, owner) of a line."""


def lines(redis: Redis, limit: int = -1) -> dict[Line, list[tuple[int, float]]]:
    """Every non-empty line's first `limit` jobs (all with -1), as (id, place), in order."""
    names = sorted(n.decode() for n in redis.smembers(LINES_KEY))
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.zrange(line_key(*parse_line_name(name)), 0, limit if limit < 0 else limit - 1, withscores=True)
        answers = pipe.execute()
    out: dict[Line, list[tuple[int, float]]] = {}
    for name, members in zip(names, answers):
        if members:
            out[parse_line_name(name)] = [(int(m), score) for m, score in members]
        else:  # emptied: forgotten, unless a job came into it meanwhile
            redis.register_script(_FORGET_EMPTY)(keys=[LINES_KEY, line_key(*parse_line_name(name))], args=[name])
    return out


_FORGET_EMPTY = "if redis.call('ZCARD', KEYS[2]) == 0 then redis.call('SREM', KEYS[1], ARGV[1]) end"


PICK_CHARGE_S = 600.0
"""What taking one job adds to its owner's usage while the line is ordered (GPU-seconds), so that owners who used
the same take turns rather than one of them taking every free GPU at once."""


More = Callable[[Line, int], list[tuple[int, float]]]
"""(line, how many of it were read) -> its next jobs: a line read a little at a time."""


def reader(redis: Redis, head: int, chunk: int) -> More:
    """What `order` calls when it has used up what it read of a line (its first `head` jobs, from `lines`, then
    `chunk` at a time): the line's next `chunk` jobs; none without asking Redis when the last read came short."""

    def more(line: Line, start: int) -> list[tuple[int, float]]:
        if start < head or (start - head) % chunk:
            return []  # (the line ended within what was read)
        members = redis.zrange(line_key(*line), start, start + chunk - 1, withscores=True)
        return [(int(m), score) for m, score in members]

    return more


Ages = Callable[[list[int]], list[float | None]]
"""job ids -> when each entered its line (None: not known): what the age factor reads (`entered`)."""


def entered(redis: Redis) -> Ages:
    """When jobs entered their lines, from QUEUED_AT_KEY (one read per call)."""

    def ages(ids: list[int]) -> list[float | None]:
        if not ids:
            return []
        return [float(v) if v is not None else None for v in redis.hmget(QUEUED_AT_KEY, [str(i) for i in ids])]

    return ages


def aged(weight: float, since: float | None, now: float, age_max_s: float) -> float:
    """An owner's usage as it counts for a job that has waited since `since`: less the longer it waits, nothing at
    `age_max_s` (GPUDECK_FAIRSHARE_AGE_MAX; 0: no age factor), so a heavy user's job reaches the head of its
    priority in bounded time."""
    if age_max_s <= 0 or since is None:
        return weight
    return weight * max(0.0, 1.0 - (now - since) / age_max_s)


def order(
    found: dict[Line, list[tuple[int, float]]],
    used: dict[str, float],
    fair: bool = True,
    more: More | None = None,
    ages: Ages | None = None,
    now: float = 0.0,
    age_max_s: float = 0.0,
    groups: projects.Groups | None = None,
) -> Iterator[tuple[int, str, str | None]]:
    """The order the scheduler considers queued jobs in: (id, priority, owner). Priorities first (high, normal,
    low); within one, with `fair`, the next job is the oldest of the owner who has used least so far (decayed
    usage plus PICK_CHARGE_S a job taken), that usage counting less the longer the job has waited (`aged`; `ages`
    tells when jobs entered their lines); without, the order of submission (place) over all owners. `found`: the
    head of each line; `more`: where the rest of a line is read from as the order reaches it (else only `found`).
    `groups`: each owner's project and its share (jobs.projects.groups): fair share in two levels, as Slurm's fair
    tree — first the project that has used least for its share (its people's usage over its share), then within
    it the person (owners in no project are one group of share 1; with no projects, one group: as before). The age
    factor acts within a project."""
    use_age = fair and ages is not None and age_max_s > 0
    since: dict[int, float | None] = {}
    groups = groups or {}

    def group(owner: str | None) -> tuple[str | None, float]:
        return projects.group_of(groups, owner_of(owner)) if owner is not None else (None, 1.0)

    spent = projects.spent(used if fair else {}, groups)  # (each project's usage: its people's)

    def learn(members: list[tuple[int, float]]) -> None:
        if use_age and ages is not None and members:
            since.update(zip([m[0] for m in members], ages([m[0] for m in members])))

    def weight(owner: str | None, job_id: int) -> tuple[float, float]:
        # (the age factor acts between the people of a project; projects go by their usage over their share)
        project, share = group(owner)
        mine = aged(base[owner], since.get(job_id), now, age_max_s) if use_age else base[owner]
        return spent[project] / share, mine

    learn([m for (p, _), members in found.items() for m in members])
    for priority in PRIORITIES:
        heap: list[tuple[tuple[float, float], float, int, str | None]] = []
        queues: dict[str | None, list[tuple[int, float]]] = {}
        read: dict[str | None, int] = {}
        base: dict[str | None, float] = {}
        for (p, owner), members in found.items():
            if p != priority or not members:
                continue
            queues[owner], read[owner] = list(reversed(members)), len(members)
            job_id, place = queues[owner].pop()
            base[owner] = used.get(owner_of(owner), 0.0) if fair else 0.0
            heapq.heappush(heap, (weight(owner, job_id), place, job_id, owner))
        while heap:
            was, place, job_id, owner = heapq.heappop(heap)
            if (now_weight := weight(owner, job_id)) > was:  # (its project took a job since: it waits its turn)
                heapq.heappush(heap, (now_weight, place, job_id, owner))
                continue
            yield job_id, priority, owner
            if not queues[owner] and more is not None:
                fetched = more((priority, owner), read[owner])
                read[owner] += len(fetched)
                learn(fetched)
                queues[owner] = [m for m in reversed(fetched) if m[0] != job_id]
            if queues[owner]:
                nxt_id, place = queues[owner].pop()
                base[owner] = base[owner] + PICK_CHARGE_S if fair else 0.0
                if fair:
                    spent[group(owner)[0]] += PICK_CHARGE_S
                heapq.heappush(heap, (weight(owner, nxt_id), place, nxt_id, owner))


def scheduler_order(
    redis: Redis,
    settings: Settings,
    found: dict[Line, list[tuple[int, float]]],
    used: dict[str, float],
    now: float,
    more: More | None = None,
) -> Iterator[tuple[int, str, str | None]]:
    """`order` as the scheduler reads the line under `settings` (fair share, its age factor read from Redis at
    `now`): the one order a round, expected starts and places in line all follow."""
    groups = projects.groups(redis) if settings.fairshare else {}
    return order(found, used, settings.fairshare, more, entered(redis), now, settings.fairshare_age_max_s, groups)


def head(redis: Redis, settings: Settings, limit: int, now: float | None = None) -> tuple[list[int], int, int]:
    """The line as the scheduler reads it: its first `limit` jobs in the scheduler's order, how many jobs are in
    the lines, and how many wait for their dependencies (in no line yet). Reads what it shows, not the whole line:
    the GPUs screen showed the newest 500 queued jobs as `500 jobs` of 1,981 and missed the real first (issue 64)."""
    now = time.time() if now is None else now
    names = sorted(n.decode() for n in redis.smembers(LINES_KEY))
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.zcard(line_key(*parse_line_name(name)))
        pipe.scard(AFTER_KEY)
        *sizes, waiting = pipe.execute()
    found = lines(redis, limit)
    used = usage(redis, settings.fairshare_halflife_s, JobStore(redis).active(), now) if settings.fairshare else {}
    ordered = scheduler_order(redis, settings, found, used, now, reader(redis, limit, max(limit, 32)))
    return [job_id for job_id, _, _ in itertools.islice(ordered, limit)], sum(sizes), int(waiting)


def positions(redis: Redis, recs: list[Job], settings: Settings, running: Sequence[Job] = ()) -> dict[int, int]:
    """Each queued job's place in line (1: the next the scheduler considers), in the scheduler's own order
    (jobs.queues.order). A job waiting for its dependencies has none."""
    queued = [r for r in recs if r["status"] == Status.QUEUED.value]
    if not queued:
        return {}
    out, absent = _alone_in_priority(redis, queued)
    wanted = {r["id"] for r in queued} - set(out) - absent
    if not wanted:
        return out
    s = settings
    used = usage(redis, s.fairshare_halflife_s, running) if s.fairshare else {}
    for n, (job_id, _, _) in enumerate(scheduler_order(redis, s, lines(redis), used, time.time()), 1):
        if job_id in wanted:
            out[job_id] = n
            if wanted <= out.keys():
                break
    return out


def _alone_in_priority(redis: Redis, queued: list[Job]) -> tuple[dict[int, int], set[int]]:
    """The places of the jobs whose line is the only one of its priority, without walking the line: every job of a
    higher priority comes first, then this line in its own order (ZRANK), whatever fair share says (with one owner
    at a priority there is nobody to take turns with); and those of them in no line (waiting for dependencies).
    The others are in neither: positions walks the order for them."""
    names = [parse_line_name(n.decode()) for n in redis.smembers(LINES_KEY)]
    mine = {r["id"]: (Kept(r["spec"]).priority, r.get("owner")) for r in queued}
    alone = {i: line for i, line in mine.items() if [n for n in names if n[0] == line[0]] == [line]}
    if not alone:
        return {}, set()
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.zcard(line_key(*name))
        for job_id, line in alone.items():
            pipe.zrank(line_key(*line), str(job_id))
        answers = pipe.execute()
    sizes = dict(zip(names, answers[: len(names)]))
    out, absent = {}, set()
    for (job_id, (priority, _)), rank in zip(alone.items(), answers[len(names) :]):
        if rank is None:
            absent.add(job_id)  # (not in its line: waiting for its dependencies)
            continue
        ahead = sum(size for (p, _), size in sizes.items() if PRIORITIES.index(p) < PRIORITIES.index(priority))
        out[job_id] = ahead + int(rank) + 1
    return out, absent


def move(redis: Redis, rec: Job, place: float) -> None:
    """Give a queued job another place in its line."""
    redis.zadd(line_key(rec.spec.priority, rec.get("owner")), {str(rec["id"]): place}, xx=True)


IDEMPOTENCY_TTL_S = 24 * 3600
"""How long an Idempotency-Key keeps answering with the job it first created."""
PENDING_S = 120
"""How long a key stays taken by a submission that has not answered (one that died frees it then)."""


def submit_once(
    redis: Redis, body: Any, key: str, settings: Settings, extra: dict[str, Any] | None = None
) -> tuple[Job, bool]:
    """submit() under an Idempotency-Key: the same key within 24 h returns the first job and creates nothing.
    Keys are the owner's own (`extra["owner"]`): bob's key sent by alice is a new key. Returns (record, replayed)."""
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    owner = (extra or {}).get("owner") or ""
    slot = idempotency_key(hashlib.sha256(json.dumps([owner, key]).encode()).hexdigest())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        # Taken while this request submits, for PENDING_S at most: a request that dies meanwhile (its Redis
        # killed) frees the key by itself. The answer (the job's id) is written in the job's own transaction, so a
        # job exists exactly when its key answers with it.
        if redis.set(slot, json.dumps({"body": digest}), nx=True, ex=PENDING_S):

            def answer(pipe: Any, job_id: int) -> None:
                pipe.set(slot, json.dumps({"body": digest, "job_id": job_id}), ex=IDEMPOTENCY_TTL_S)

            try:  # (deleting the job deletes the key's answer too: the record names it)
                rec = submit(redis, body, settings, extra={**(extra or {}), "idempotency": slot}, also=answer)
            except Exception:
                with contextlib.suppress(RedisError):
                    redis.delete(slot)  # a refused submission does not use up the key
                raise
            return rec, False
        raw = redis.get(slot)
        if raw is None:
            continue
        seen = json.loads(raw)
        if seen["body"] != digest:
            raise Unprocessable(
                "this Idempotency-Key was used with a different request body in the last 24 h", {"idempotency_key": key}
            )
        if "job_id" in seen:
            return JobStore(redis).get(seen["job_id"]), True
        time.sleep(0.05)  # the first request with this key is still being submitted
    raise Conflict("a request with this Idempotency-Key is still being processed; try again", {"idempotency_key": key})
