"""Applying a job's end: the decision of jobs.outcome written to the record, or the next attempt queued."""

from __future__ import annotations

import logging
import time
from typing import Any

from redis import Redis

from jobs import queues
from jobs.outcome import End, lost
from jobs.store import JobStore
from models.states import ACTIVE, Reason, Status

log = logging.getLogger(__name__)


def end(
    redis: Redis, job_id: int, outcome: End, rec: dict[str, Any] | None = None, allowed=ACTIVE, **fields: Any
) -> str | None:
    """Make `outcome` the job's state if it is still in one of `allowed`. A retryable end (worker_lost) queues
    the next attempt instead, while `max_retries` lasts; it resumes from the newest checkpoint. Returns the
    status set, or None when the job had already moved on (another path decided first)."""
    store = JobStore(redis)
    if outcome.retry:
        rec = rec or store.get(job_id)
        if rec.get("attempt", 1) <= rec["spec"].get("max_retries", 0):
            return Status.QUEUED.value if requeue(redis, job_id, rec, outcome.message or "", **fields) else None
    if not store.transition(job_id, allowed, ended_at=time.time(), **outcome.fields(), **fields):
        return None
    if outcome.status != Status.SUCCEEDED:
        what = outcome.reason.value if outcome.reason else ""
        extra = "; no retries left" if outcome.retry else ""
        log.warning("job %s %s: %s (%s)%s", job_id, outcome.status.value, what, outcome.message, extra)
    return outcome.status.value


def worker_lost(redis: Redis, job_id: int, rec: dict[str, Any], message: str, **fields: Any) -> str | None:
    """The job's worker went away (`message` says how): queued again, or failed as worker_lost."""
    return end(redis, job_id, lost(message), rec, **fields)


def requeue(redis: Redis, job_id: int, rec: dict[str, Any], message: str, **fields: Any) -> bool:
    """Put a lost job back on its queue as its next attempt; the trainer resumes from the newest checkpoint."""
    store = JobStore(redis)
    attempt = rec.get("attempt", 1) + 1
    ok = store.transition(
        job_id,
        ACTIVE,
        status=Status.QUEUED.value,
        attempt=attempt,
        reason=Reason.WORKER_LOST.value,
        message=f"{message}; retrying",
        **fields,
    )
    if ok:
        store.clear_stop(job_id)
        queues.enqueue_attempt(redis, rec["queue"], job_id, attempt, rec["spec"])
        log.warning("job %s: worker_lost (%s); queued again as attempt %d", job_id, message, attempt)
    return ok
