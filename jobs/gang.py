"""Multi-worker jobs: the tasks of a placement (jobs.schedule hands out all of a job's places at once, each task
on its place's first worker), their rendezvous through Redis, and the one decision of how the whole job ended.

Each task then runs like a single job (jobs.run.taskrun.TaskHooks): it publishes host:port, waits for the other
tasks' addresses, and starts its trainer with TF_CONFIG. When one task fails, is canceled or its worker
goes away, the others are told to stop (the job's stop key) and the last one to end decides the job's
state (`finish`). A task that never arrives (its worker took a single job at the same instant) makes the
reaper put the job back in line after RENDEZVOUS_S.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any
from urllib.parse import urlparse

from redis import Redis
from rq import Queue

from jobs import lifecycle, queues, taskrecord
from jobs.keys import (
    arrived_key,
    go_key,
    job_key,
    private_queue,
    rq_task_id,
)
from jobs.outcome import of_tasks
from jobs.record import Job, Kept
from jobs.settings import Settings
from jobs.store import JobStore
from models.states import ACTIVE, TASK_ENDED, Reason, Status, TaskStatus

log = logging.getLogger(__name__)

PLACE_EVERY_S = 1.0
"""How often each worker tries to place waiting multi-worker jobs (and says it is alive)."""
ALIVE_TTL_S = 10
"""A worker counts as available for a task while its alive key (refreshed every PLACE_EVERY_S) exists."""
RENDEZVOUS_S = 60.0
"""How long placed tasks wait for the last of them before the job goes back in line."""


def task_name(spec: Kept, index: int) -> tuple[str, int]:
    """TF_CONFIG (type, index) of task `index`: with `chief`, task 0 is the chief and the rest workers 0..N-2."""
    if spec.chief:
        return ("chief", 0) if index == 0 else ("worker", index - 1)
    return "worker", index


def label(spec: Kept, index: int) -> str:
    """`worker1`, `chief0`: how the task prefixes its log lines (the trainer names itself the same way)."""
    kind, i = task_name(spec, index)
    return f"{kind}{i}"


# -- tasks -------------------------------------------------------------------------------------
tasks = taskrecord.read
"""The current placement's tasks, with `alive` (heartbeat present)."""


def view(redis: Redis, rec: Job) -> list[dict[str, Any]] | None:
    """What GET /api/v1/jobs/ID shows of each task (None for a single-task job or one never placed)."""
    spec = rec.spec
    if not spec.multi_worker or "gen" not in rec:
        return None
    out = []
    for t in tasks(redis, rec["id"], spec.workers):
        kind, i = task_name(spec, t["index"])
        out.append(
            {
                "index": t["index"],
                "type": kind,
                "task_index": i,
                "worker": t.get("worker"),
                "host": t.get("host"),
                "gpu_ids": t.get("gpus", []),
                "address": t.get("address"),
                "pid": t.get("pid"),
                "status": taskrecord.shown_status(t),
                "reason": t.get("reason"),
                "message": t.get("message"),
            }
        )
    return out


def arrive(redis: Redis, job_id: int, gen: int, n: int) -> str:
    """Count this task in at the rendezvous of placement `gen`; the n-th to arrive pushes n tokens onto the
    list every task then BLPOPs. Returns that list's key."""
    count, go = arrived_key(job_id, gen), go_key(job_id, gen)
    pipe = redis.pipeline()
    pipe.incr(count)
    pipe.expire(count, 24 * 3600)
    if pipe.execute()[0] == n:
        pipe.rpush(go, *["1"] * n)
        pipe.expire(go, 24 * 3600)
        pipe.execute()
    return go


def current(redis: Redis, job_id: int, gen: int) -> bool:
    """Whether placement `gen` of the job is still the one that counts (not ended, not put back in line)."""
    raw = redis.hmget(job_key(job_id), "status", "gen")
    return raw[0] is not None and raw[0].decode() in ACTIVE and raw[1] is not None and int(raw[1]) == gen


def claim(store: JobStore, job_id: int, gen: int | None, worker: str) -> list[str] | None:
    """Take a single job the scheduler placed on `worker` (placement `gen`, jobs.schedule): the GPUs of its place
    (it runs on every one); None when it was canceled or placed elsewhere meanwhile (or was never placed: an RQ job of
    an older gpudeck, queued before the scheduler placed every job)."""
    if gen is None:
        return None
    job = store.get(job_id)
    if not current(store.redis, job_id, gen) or job.worker != worker:
        return None
    store.beat(job_id, worker)
    if not store.transition(job_id, (Status.STARTING.value,), claimed_at=time.time()):
        return None
    return [str(g) for g in job.gpu_ids]


def advertise_host(settings: Settings) -> str:
    """The address other workers reach this one's tasks at: GPUDECK_ADVERTISE_HOST, else the local address
    of the route to Redis (the interface the cluster shares), else loopback for a local or unix-socket Redis."""
    if settings.advertise_host:
        return settings.advertise_host
    host = urlparse(settings.redis_url or "").hostname
    if not host or host in ("localhost", "127.0.0.1", "::1"):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 6379))  # no packet is sent: this only picks the route
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostname()


# -- the end of a multi-worker job -------------------------------------------------------------
def finish(redis: Redis, job_id: int) -> str | None:
    """Decide the job's final state (jobs.outcome.of_tasks) once every task ended, or once a stop was requested
    and no task is still alive. Idempotent: every task calls it at its end, the reaper when a task's worker
    vanished. Returns the status it set, or None when the job is not over yet (or was already decided)."""
    store = JobStore(redis)
    job = store.get(job_id)
    if job.status not in ACTIVE:
        return None
    spec, gen = job.spec, job.gen
    ts = [t for t in tasks(redis, job_id, spec.workers) if t.get("gen") == gen]
    ended = [t for t in ts if t.get("status") in TASK_ENDED]
    stop = store.stop_reason(job_id)
    if len(ended) < spec.workers and not (stop and not any(t["alive"] and t not in ended for t in ts)):
        return None
    for t in ts:
        t["label"] = label(spec, t["index"])
    has_result = spec.runs_code or bool(job.result)  # a command job's result is optional
    outcome, blamed = of_tasks(stop, ended, spec.workers, has_result)
    status = lifecycle.end(redis, job_id, outcome, job, log_tail=blamed.get("log_tail", []) if blamed else None)
    if status is not None:
        _cleanup(redis, job_id, gen, spec.workers)
    return status


def _cleanup(redis: Redis, job_id: int, gen: int, n: int) -> None:
    """Tasks of this placement that never started leave their workers' queues."""
    for t in tasks(redis, job_id, n):
        if t.get("gen") == gen and "started_at" not in t and t.get("worker"):
            Queue(private_queue(t["worker"]), connection=redis).remove(rq_task_id(job_id, gen, t["index"]))


def unplace(redis: Redis, job_id: int, gen: int, why: str) -> bool:
    """Placement `gen` did not gather (a task never arrived): the job goes back in line, its tasks stand down."""
    store = JobStore(redis)
    job = store.get(job_id)
    if not store.transition(
        job_id, (Status.STARTING.value,), status=Status.QUEUED.value, gen=gen + 1, message=f"{why}; waiting again"
    ):
        return False
    _cleanup(redis, job_id, gen, job.spec.workers)
    queues.enqueue(redis, job_id, job.spec, job.owner, job.seq)
    log.warning("job %s: %s; back in line", job_id, why)
    return True


def check(redis: Redis, job_id: int, rec: Job) -> None:
    """The reaper's look at an active multi-worker job: a placement that did not gather in RENDEZVOUS_S goes
    back in line; a task whose worker vanished stops the others (worker_lost); then `finish` if it is over."""
    job = Job.of(rec)
    spec, gen = job.spec, job.gen
    ts = [t for t in tasks(redis, job_id, spec.workers) if t.get("gen") == gen]
    started = [t for t in ts if "started_at" in t]
    late = time.time() > float(job.placed_at) + RENDEZVOUS_S
    if job.status == Status.STARTING.value and late and sum(1 for t in ts if t.get("address")) < spec.workers:
        if not any(t["alive"] and t.get("pid") for t in started):
            why = f"placement {gen} did not gather its {spec.workers} tasks in {RENDEZVOUS_S:.0f}s"
            unplace(redis, job_id, gen, why)
            return
    for t in started:
        if t.get("status") not in TASK_ENDED and not t["alive"]:
            task_lost(redis, job_id, t["index"], f"no heartbeat from worker {t.get('worker')}", finish_job=False)
    finish(redis, job_id)


def task_lost(redis: Redis, job_id: int, index: int, message: str, finish_job: bool = True) -> None:
    """A task's worker or work-horse went away: the task failed as worker_lost and the other tasks stop."""
    taskrecord.ended(redis, job_id, index, TaskStatus.FAILED, reason=Reason.WORKER_LOST, message=message)
    JobStore(redis).request_stop(job_id, Reason.WORKER_LOST.value, only_first=True)
    if finish_job:
        finish(redis, job_id)
