"""What a user asks of jobs: submit (placing a multi-worker job at once when it can), cancel, retry."""

from __future__ import annotations

from typing import Any

from redis import Redis

from jobs import gang, lifecycle, queues
from jobs.errors import Conflict
from jobs.outcome import CANCELED_QUEUED
from jobs.settings import Settings
from jobs.spec import is_multi_worker
from jobs.states import Reason, Status
from jobs.store import JobStore


def submit(
    redis: Redis, body: Any, settings: Settings | None = None, idempotency_key: str | None = None
) -> tuple[dict[str, Any], bool]:
    """Validate and queue a job (once per Idempotency-Key when one is given); a multi-worker job is placed right
    away when its N workers are idle. Returns (record, replayed)."""
    if idempotency_key is None:
        rec, replayed = queues.submit(redis, body, settings), False
    else:
        rec, replayed = queues.submit_once(redis, body, idempotency_key, settings)
    if not replayed and is_multi_worker(rec["spec"]):
        gang.place(redis)
        rec = JobStore(redis).get(rec["id"])
    return rec, replayed


def cancel(redis: Redis, job_id: int) -> dict[str, Any]:
    """A queued job leaves its queue; a starting or running one gets SIGTERM from its work-horse, a grace
    period to checkpoint, then SIGKILL (the work-horse polls for the request, wherever the API runs)."""
    store = JobStore(redis)
    rec = store.get(job_id)
    if lifecycle.end(redis, job_id, CANCELED_QUEUED, rec, allowed=(Status.QUEUED.value,)):
        queues.withdraw(redis, rec)
        return store.get(job_id)
    rec = store.get(job_id)
    if Status(rec["status"]).ended:
        raise Conflict(
            f"job {job_id} already {rec['status']}; only queued or running jobs can be canceled",
            {"id": job_id, "status": rec["status"]},
        )
    store.request_stop(job_id, Reason.CANCELED.value)
    if is_multi_worker(rec["spec"]):
        gang.finish(redis, job_id)  # tasks still waiting for their workers end here; running ones stop
    return store.get(job_id)


def retry(redis: Redis, job_id: int, settings: Settings | None = None) -> dict[str, Any]:
    """Submit an ended job's spec again, as a new job with the next id (a command job: the same source snapshot)."""
    rec = JobStore(redis).get(job_id)
    if not Status(rec["status"]).ended:
        raise Conflict(f"job {job_id} is {rec['status']}; only an ended job can be retried", {"id": job_id})
    return submit(redis, rec["spec"], settings)[0]
