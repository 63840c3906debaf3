"""Cancel and retry: the transitions a user asks for."""

from __future__ import annotations

import time
from typing import Any

from redis import Redis

from jobs import gang, queues
from jobs.errors import Conflict
from jobs.states import Reason, Status
from jobs.store import JobStore


def cancel(redis: Redis, job_id: int) -> dict[str, Any]:
    """A queued job leaves its queue; a starting or running one gets SIGTERM from its work-horse, a grace
    period to checkpoint, then SIGKILL (the work-horse polls for the request, wherever the API runs)."""
    store = JobStore(redis)
    rec = store.get(job_id)
    if store.transition(
        job_id,
        (Status.QUEUED.value,),
        status=Status.CANCELED.value,
        reason=Reason.CANCELED.value,
        message="canceled while queued",
        ended_at=time.time(),
    ):
        queues.withdraw(redis, rec)
        return store.get(job_id)
    rec = store.get(job_id)
    if Status(rec["status"]).ended:
        raise Conflict(
            f"job {job_id} already {rec['status']}; only queued or running jobs can be canceled",
            {"id": job_id, "status": rec["status"]},
        )
    store.request_stop(job_id, Reason.CANCELED.value)
    if gang.is_gang(rec["spec"]):
        gang.finish(redis, job_id)  # tasks still waiting for their workers end here; running ones stop
    return store.get(job_id)


def retry(redis: Redis, job_id: int, data_roots=()) -> dict[str, Any]:
    """Submit an ended job's spec again, as a new job with the next id."""
    rec = JobStore(redis).get(job_id)
    if not Status(rec["status"]).ended:
        raise Conflict(f"job {job_id} is {rec['status']}; only an ended job can be retried", {"id": job_id})
    return queues.submit(redis, rec["spec"], data_roots)
