"""RQ queues by GPU count and priority, and submitting a validated spec onto them."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue, Worker
from rq.exceptions import NoSuchJobError
from rq.job import Job

from jobs import gang
from jobs import spec as spec_mod
from jobs.errors import Conflict, Unprocessable
from jobs.store import JobStore

RQ_JOB_TTL = 7 * 24 * 3600
"""How long RQ keeps its own job objects and results; gpudeck's job records are kept for good."""


def base_queue(gpus: int) -> str:
    """`cpu` for CPU jobs, `gpus-N` for jobs that need N GPUs on one worker."""
    return "cpu" if gpus == 0 else f"gpus-{gpus}"


def queue_name(gpus: int, priority: str) -> str:
    """The queue a job of this GPU count and priority waits in (`gpus-1`, `gpus-1-high`, ...)."""
    base = base_queue(gpus)
    return base if priority == "normal" else f"{base}-{priority}"


def worker_queues(gpus: int) -> list[str]:
    """The queues a worker with `gpus` GPUs serves, highest priority first."""
    return [queue_name(gpus, p) for p in spec_mod.PRIORITIES]


def live_gpu_workers(redis: Redis) -> int:
    """How many live workers serve a GPU queue."""
    return sum(1 for w in Worker.all(connection=redis) if any(q.startswith("gpus-") for q in w.queue_names()))


def validate(redis: Redis, body: Any, data_roots: tuple[Path, ...] = (), default_gpus: int | None = None) -> dict:
    """spec.validate with what only the store knows: live GPU workers (the default gpus) and uploaded datasets."""
    from jobs import datasets

    if default_gpus is None:
        default_gpus = 1 if live_gpu_workers(redis) else 0
    return spec_mod.validate(
        body, default_gpus=default_gpus, data_roots=data_roots, pin=lambda n, v: datasets.pin(redis, n, v)
    )


def submit(redis: Redis, body: Any, data_roots: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Validate, assign the next id, and write the record and the RQ job in one transaction."""
    spec = validate(redis, body, data_roots)
    store = JobStore(redis)
    job_id = store.next_id()
    name = queue_name(spec["gpus"], spec["priority"])
    queue = Queue(name, connection=redis)
    with redis.pipeline() as pipe:
        # RQ starts the MULTI itself when handed a pipeline, so it goes first; the record joins it.
        enqueue_attempt(queue, job_id, 1, spec, pipe)
        rec = store.create(job_id, spec, name, pipe=pipe)
        pipe.execute()
    if gang.is_gang(spec):
        gang.place(redis)  # its N workers may be idle already
        return store.get(job_id)
    return rec


def enqueue_attempt(queue: Queue, job_id: int, attempt: int, spec: dict[str, Any], pipe: Any = None) -> None:
    """Put one attempt of a job on its queue as an ordinary RQ job (`rq info` and rq-dashboard show it); a
    multi-worker job instead goes in line for N idle workers at once (jobs.gang), never on an RQ queue."""
    if gang.is_gang(spec):
        gang.enqueue(pipe if pipe is not None else queue.connection, job_id, spec)
        return
    queue.enqueue_call(
        "jobs.task.run_job",
        args=(job_id,),
        job_id=rq_job_id(job_id, attempt),
        timeout=-1,  # the work-horse enforces the spec's timeout itself, stopping the trainer's group
        result_ttl=RQ_JOB_TTL,
        failure_ttl=RQ_JOB_TTL,
        description=f"gpudeck job {job_id}: {spec['model']} on {spec['dataset']}",
        pipeline=pipe,
    )


def withdraw(redis: Redis, rec: dict[str, Any]) -> None:
    """Take a job's queued attempt off wherever it waits: its RQ queue, or the line of multi-worker jobs."""
    if gang.is_gang(rec["spec"]):
        redis.zrem(gang.PENDING_KEY, rec["id"])
        return
    rq_id = rq_job_id(rec["id"], rec.get("attempt", 1))
    Queue(rec["queue"], connection=redis).remove(rq_id)
    try:
        Job.fetch(rq_id, connection=redis).cancel()
    except (NoSuchJobError, Exception):  # noqa: B014 - RQ raises several kinds for a job already gone
        pass


IDEMPOTENCY_TTL_S = 24 * 3600
"""How long an Idempotency-Key keeps answering with the job it first created."""


def submit_once(redis: Redis, body: Any, key: str, data_roots: tuple[Path, ...] = ()) -> tuple[dict[str, Any], bool]:
    """submit() under an Idempotency-Key: the same key within 24 h returns the first job and creates nothing.
    Returns (record, replayed)."""
    from jobs.store import JobStore

    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    slot = f"gpudeck:idempotency:{hashlib.sha256(key.encode()).hexdigest()}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if redis.set(slot, json.dumps({"body": digest}), nx=True, ex=IDEMPOTENCY_TTL_S):
            try:
                rec = submit(redis, body, data_roots)
            except Exception:
                redis.delete(slot)  # a refused submission does not use up the key
                raise
            redis.set(slot, json.dumps({"body": digest, "job_id": rec["id"]}), keepttl=True)
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


def rq_job_id(job_id: int, attempt: int) -> str:
    """RQ's id for one attempt of a gpudeck job."""
    return f"gpudeck-{job_id}" if attempt == 1 else f"gpudeck-{job_id}-{attempt}"
