"""RQ queues by GPU count and priority, and submitting a validated spec onto them."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from redis import Redis
from rq import Queue, Worker
from rq.exceptions import NoSuchJobError
from rq.job import Job

from jobs import datasets, quota, sources
from jobs import spec as spec_mod
from jobs.errors import Conflict, Unprocessable
from jobs.keys import GANGS_KEY, PRIORITIES, RUN_JOB, idempotency_key, queue_name, rq_job_id, worker_queues
from jobs.settings import Settings
from jobs.spec import command_words, is_multi_worker
from jobs.store import JobStore
from models import sourcetree

RQ_JOB_TTL = 7 * 24 * 3600
"""How long RQ keeps its own job objects and results; gpudeck's job records are kept for good."""


def live_gpu_workers(redis: Redis) -> int:
    """How many live workers serve a GPU queue."""
    return sum(1 for w in Worker.all(connection=redis) if any(q.startswith("gpus-") for q in w.queue_names()))


def validate(redis: Redis, body: Any, settings: Settings | None = None, default_gpus: int | None = None) -> dict:
    """spec.validate with what only the store and the settings know: live GPU workers (the default gpus), uploaded
    datasets and sources, data roots, whether command jobs are allowed, the registered environments."""
    s = settings or Settings.from_env({})
    if default_gpus is None:
        default_gpus = 1 if live_gpu_workers(redis) else 0
    return spec_mod.validate(
        body,
        default_gpus=default_gpus,
        data_roots=s.data_roots,
        pin=lambda n, v: datasets.pin(redis, n, v),
        commands_allowed=s.command_jobs_allowed,
        source_known=lambda sha: sources.exists(redis, sha),
        envs=tuple(name for name, _ in s.envs),
    )


def submit(
    redis: Redis, body: Any, settings: Settings | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Validate, assign the next id, and write the record (with `extra` fields) and the RQ job in one transaction.
    A command job's source is pinned: a server folder is snapshotted now, and the record keeps the snapshot's
    description."""
    s = settings or Settings.from_env({})
    spec = validate(redis, body, s)
    quota.check_fits(redis, (extra or {}).get("owner"), spec)
    source = None
    if spec.get("source"):
        sha = sourcetree.parse_ref(spec["source"])
        source = sources.get(redis, sha) if sha else sources.snapshot_folder(redis, s, spec["source"])
        spec["source"] = source["ref"]
    store = JobStore(redis)
    job_id = store.next_id()
    name = queue_name(spec["gpus"], spec["priority"])
    with redis.pipeline() as pipe:
        # RQ starts the MULTI itself when handed a pipeline, so it goes first; the record joins it.
        enqueue_attempt(redis, name, job_id, 1, spec, pipe)
        rec = store.create(job_id, spec, name, pipe=pipe, source=source, extra=extra)
        pipe.execute()
    return rec


def positions(redis: Redis, recs: list[dict[str, Any]]) -> dict[int, int]:
    """Each queued job's place in line (1: the next a free worker of its kind takes): the jobs ahead of it in
    its own queue and in the higher-priority queues of its GPU count, or, for a multi-worker job, in the line of
    multi-worker jobs."""
    queued = [r for r in recs if r["status"] == "queued"]
    if not queued:
        return {}
    singles = [r for r in queued if not is_multi_worker(r["spec"])]
    counts = sorted({int(r["spec"].get("gpus") or 0) for r in singles})
    with redis.pipeline(transaction=False) as pipe:
        for gpus in counts:
            for name in worker_queues(gpus):
                pipe.lrange(Queue(name, connection=redis).key, 0, -1)
        for r in queued:
            if is_multi_worker(r["spec"]):
                pipe.zrank(GANGS_KEY, str(r["id"]))
        answers = pipe.execute()
    line: dict[str, int] = {}
    for i in range(len(counts)):
        waiting = [rq_id for lst in answers[i * len(PRIORITIES) : (i + 1) * len(PRIORITIES)] for rq_id in lst]
        line.update({rq_id.decode(): n for n, rq_id in enumerate(waiting, 1)})
    ranks = iter(answers[len(counts) * len(PRIORITIES) :])
    out = {}
    for r in queued:
        if is_multi_worker(r["spec"]):
            rank = next(ranks)
            if rank is not None:
                out[r["id"]] = rank + 1
        elif (n := line.get(rq_job_id(r["id"], r.get("attempt", 1)))) is not None:
            out[r["id"]] = n
    return out


def gang_score(spec: dict[str, Any], job_id: int) -> float:
    """A multi-worker job's place in line: priority rank first, then id."""
    return PRIORITIES.index(spec.get("priority", "normal")) * 1e12 + job_id


def enqueue_attempt(
    redis: Redis, queue: str, job_id: int, attempt: int, spec: dict[str, Any], pipe: Any = None
) -> None:
    """Put one attempt of a job on its queue as an ordinary RQ job (`rq info` and rq-dashboard show it); a
    multi-worker job instead goes in line for N idle workers at once (jobs.gang places it), never on an RQ
    queue. `pipe`, when given, takes the writes (RQ starts its MULTI)."""
    if is_multi_worker(spec):
        (pipe if pipe is not None else redis).zadd(GANGS_KEY, {str(job_id): gang_score(spec, job_id)})
        return
    Queue(queue, connection=redis).enqueue_call(
        RUN_JOB,
        args=(job_id,),
        job_id=rq_job_id(job_id, attempt),
        timeout=-1,  # the work-horse enforces the spec's timeout itself, stopping the trainer's group
        result_ttl=RQ_JOB_TTL,
        failure_ttl=RQ_JOB_TTL,
        description=f"gpudeck job {job_id}: {command_words(spec)} on {spec.get('dataset') or '-'}",
        pipeline=pipe,
    )


def withdraw(redis: Redis, rec: dict[str, Any]) -> None:
    """Take a job's queued attempt off wherever it waits: its RQ queue, or the line of multi-worker jobs."""
    if is_multi_worker(rec["spec"]):
        redis.zrem(GANGS_KEY, rec["id"])
        return
    rq_id = rq_job_id(rec["id"], rec.get("attempt", 1))
    Queue(rec["queue"], connection=redis).remove(rq_id)
    try:
        Job.fetch(rq_id, connection=redis).cancel()
    except (NoSuchJobError, Exception):  # noqa: B014 - RQ raises several kinds for a job already gone
        pass


IDEMPOTENCY_TTL_S = 24 * 3600
"""How long an Idempotency-Key keeps answering with the job it first created."""


def submit_once(
    redis: Redis, body: Any, key: str, settings: Settings | None = None, extra: dict[str, Any] | None = None
) -> tuple[dict[str, Any], bool]:
    """submit() under an Idempotency-Key: the same key within 24 h returns the first job and creates nothing.
    Keys are the owner's own (`extra["owner"]`): bob's key sent by alice is a new key. Returns (record, replayed)."""
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    owner = (extra or {}).get("owner") or ""
    slot = idempotency_key(hashlib.sha256(json.dumps([owner, key]).encode()).hexdigest())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if redis.set(slot, json.dumps({"body": digest}), nx=True, ex=IDEMPOTENCY_TTL_S):
            try:
                rec = submit(redis, body, settings, extra=extra)
            except Exception:
                redis.delete(slot)  # a refused submission does not use up the key
                raise
            redis.set(slot, json.dumps({"body": digest, "job_id": rec["id"]}), keepttl=True)
            JobStore(redis).update(rec["id"], idempotency=slot)  # deleting the job deletes the key's answer too
            return {**rec, "idempotency": slot}, False
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
