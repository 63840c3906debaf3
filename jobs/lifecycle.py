"""Applying a job's end: the decision of jobs.outcome written to the record, or the next attempt queued."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from redis import Redis

from jobs import export, notify, plan, queues, share
from jobs.keys import REBAND_KEY
from jobs.outcome import End, lost
from jobs.record import Job, Kept
from jobs.store import JobStore
from models.states import ACTIVE, Reason, Status

log = logging.getLogger(__name__)


TOLD_BY = {Reason.GPU_MEMORY_EXCEEDED: "gpu_memory_exceeded", Reason.GPU_ERROR: "gpu_error", Reason.IDLE: "idle_stop"}
"""Ends whose message is in the record, under this field, written by what stopped the job (the GPU watchdog: the
peak and the share; GPU health: the XID; the idle-GPU policy: how long its GPUs sat idle; a session's idle rule writes
none: the table's words)."""


def end(
    redis: Redis,
    job_id: int,
    outcome: End,
    rec: Job | None = None,
    allowed=ACTIVE,
    of_attempt: int | None = None,
    **fields: Any,
) -> str | None:
    """Make `outcome` the job's state if it is still in one of `allowed` and, given `of_attempt` (a work-horse
    ending its own attempt) or `rec`, still that attempt. A retryable end (worker_lost) queues the next attempt
    instead, while `max_retries` lasts; it resumes from the newest checkpoint. Returns the status set, or None
    when the job had already moved on (another path decided first)."""
    store = JobStore(redis)
    checkpoint = fields.pop("checkpoint_step", None)
    fence = of_attempt if of_attempt is not None else (rec.get("attempt", 1) if rec is not None else None)
    if outcome.requeue:
        rec = rec or store.get(job_id)
        return Status.QUEUED.value if preempted(redis, job_id, rec, checkpoint, of_attempt=fence, **fields) else None
    if outcome.reason in TOLD_BY:  # (the watcher that stopped it wrote what it saw in the record)
        rec = rec or store.get(job_id)
        told = (rec.get(TOLD_BY[outcome.reason]) or {}).get("message")
        outcome = replace(outcome, message=told or outcome.message)
    if outcome.retry:
        rec = rec or store.get(job_id)
        retries = rec.get("attempt", 1) - int(rec.get("preemptions") or 0)  # (a preemption is not a retry)
        if retries <= rec.spec.max_retries:
            said = f"{outcome.message or ''}; retrying"
            reason = outcome.reason or Reason.WORKER_LOST
            again = requeue(redis, job_id, rec, said, reason, of_attempt=fence, charged=outcome.charged, **fields)
            return Status.QUEUED.value if again else None
    before = rec if rec is not None else store.get(job_id)
    if not store.transition(job_id, allowed, of_attempt=fence, ended_at=time.time(), **outcome.fields(), **fields):
        return None
    if outcome.charged:
        _charge(redis, before)
    if outcome.status == Status.SUCCEEDED and before.get("started_at") and not Kept(before["spec"]).is_session:
        plan.learn(redis, before, time.time() - float(before["started_at"]))  # (what the next estimate learns from)
    _notify(redis, job_id)
    if outcome.status != Status.SUCCEEDED:
        what = outcome.reason.value if outcome.reason else ""
        extra = "; no retries left" if outcome.retry else ""
        log.warning("job %s %s: %s (%s)%s", job_id, outcome.status.value, what, outcome.message, extra)
    return outcome.status.value


def worker_lost(redis: Redis, job_id: int, rec: Job, message: str, **fields: Any) -> str | None:
    """The job's worker went away (`message` says how): queued again, or failed as worker_lost."""
    return end(redis, job_id, lost(message), rec, **fields)


def _notify(redis: Redis, job_id: int) -> None:
    """Queue the notifications the job asks for its new status (sent by a Notifier: never delays the job), and its
    export once it ended (made by the API's Exporter: never fails the job)."""
    try:
        rec = JobStore(redis).get(job_id)
        notify.enqueue(redis, rec)
        export.enqueue(redis, rec)
    except Exception:  # noqa: BLE001 (a notification or an export never fails a job's end)
        log.exception("job %s: its notifications or export could not be queued", job_id)


def _charge(redis: Redis, rec: Job) -> None:
    """An attempt ended: what it held, for how long, goes to its owner's usage (fair share)."""
    if rec.get("started_at") and rec["status"] in ACTIVE:
        share.charge(redis, rec.get("owner"), share.attempt_seconds(rec))


def requeue(
    redis: Redis,
    job_id: int,
    rec: Job,
    message: str,
    reason: Reason = Reason.WORKER_LOST,
    of_attempt: int | None = None,
    charged: bool = True,
    **fields: Any,
) -> bool:
    """Put a job back in its line as its next attempt (at its old place); a trainer resumes from the newest
    checkpoint, a command from its own (GPUDECK_ATTEMPT tells it which attempt it is). Only the attempt `rec`
    (or `of_attempt`) was is put back."""
    store = JobStore(redis)
    attempt = rec.get("attempt", 1) + 1
    started = rec.get("started_at")
    ran = (rec.get("ran_s") or 0.0) + (max(0.0, time.time() - started) if started else 0.0)
    ok = store.transition(
        job_id,
        ACTIVE,
        of_attempt=of_attempt if of_attempt is not None else rec.get("attempt", 1),
        status=Status.QUEUED.value,
        attempt=attempt,
        reason=reason.value,
        message=message,
        slots=None,
        pid=None,
        ran_s=round(ran, 2),  # (the attempts before this one, for the time it has run in all)
        **fields,
    )
    if ok:
        if charged:  # (an attempt another job's fault ended is not its owner's usage)
            _charge(redis, rec)
        store.clear_stop(job_id)
        with redis.pipeline() as pipe:  # (its band of attained service, under GPUDECK_POLICY=las: the next round's)
            queues.enqueue(pipe, job_id, rec.spec, rec.get("owner"), rec.get("seq"))
            pipe.sadd(REBAND_KEY, job_id)
            pipe.execute()
        _notify(redis, job_id)  # (queued again: for `any`)
        log.warning("job %s: %s (%s); queued again as attempt %d", job_id, reason.value, message, attempt)
    return ok


def preempted(
    redis: Redis, job_id: int, rec: Job, checkpoint: int | None, of_attempt: int | None = None, **fields: Any
) -> bool:
    """A job stopped to make room: back in line (not a retry), `preemptions` counted, and a message that says by
    whom, where it was, and where it resumes."""
    by = rec.get("preempted_by") or {}
    step = by.get("step") if by.get("step") is not None else (rec.get("progress") or {}).get("step")
    if checkpoint is not None and (step is None or step < checkpoint):  # (it reached its checkpoint's step at least:
        step = checkpoint  # asked at step 0, it saved step 1 on its way out — issue 67 #7)
    who = by.get("who") or f"job {by.get('id', '?')} ({by.get('priority', '?')})"  # (`who`: Slurm, on Slurm)
    message = f"preempted by {who}"
    if step is not None:
        message += f" at step {step:,}"
    if rec.spec.runs_code:
        message += f"; it starts again as attempt {rec.get('attempt', 1) + 1} (GPUDECK_ATTEMPT) from its own checkpoint"
    elif checkpoint is not None:
        message += f"; resumes from the checkpoint of step {checkpoint:,}"
    else:
        message += "; no checkpoint yet: it starts over"
    preemptions = int(rec.get("preemptions") or 0) + 1
    by = {**by, "message": message, "checkpoint_step": checkpoint}
    return requeue(
        redis, job_id, rec, message, Reason.PREEMPTED, of_attempt, preemptions=preemptions, preempted_by=by, **fields
    )
