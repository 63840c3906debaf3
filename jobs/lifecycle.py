"""Cancel and retry: the transitions a user asks for."""

from __future__ import annotations

import time
from typing import Any

from redis import Redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job

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
        if gang.is_gang(rec["spec"]):
            redis.zrem(gang.PENDING_KEY, job_id)
            return store.get(job_id)
        rq_id = queues.rq_job_id(job_id, rec.get("attempt", 1))
        Queue(rec["queue"], connection=redis).remove(rq_id)
        try:
            Job.fetch(rq_id, connection=redis).cancel()
        except (NoSuchJobError, Exception):  # noqa: B014 - RQ raises several kinds for a job already gone
            pass
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
