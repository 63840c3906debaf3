"""Finds jobs whose work-horse stopped beating (worker killed, host gone): worker_lost, then a retry."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue

from jobs import gang
from jobs.states import Reason, Status
from jobs.store import JobStore

log = logging.getLogger(__name__)

REAP_EVERY_S = 5.0
"""How often each API and worker process looks for lost jobs (one of them at a time, by a Redis lock)."""
LOCK_KEY = "gpudeck:reaper:lock"


ACTIVE = (Status.STARTING.value, Status.RUNNING.value)


def reap(redis: Redis) -> list[int]:
    """Every active job without a heartbeat lost its worker: retry it or fail it (see worker_lost)."""
    store = JobStore(redis)
    lost = []
    for job_id in store.active_ids():
        rec = store.get(job_id)
        if gang.is_gang(rec["spec"]):
            gang.check(redis, job_id, rec)  # heartbeats per task; a lost task stops the others
            continue
        if store.alive(job_id) or rec["status"] not in ACTIVE:
            continue
        message = f"no heartbeat from worker {rec.get('worker')} (attempt {rec.get('attempt', 1)})"
        if worker_lost(redis, job_id, rec, message):
            lost.append(job_id)
    return lost


def worker_lost(redis: Redis, job_id: int, rec: dict[str, Any], message: str, **fields: Any) -> str | None:
    """The one place that decides what a job whose worker went away becomes: queued again (its next
    attempt resumes from the newest checkpoint) while `max_retries` lasts, else failed/worker_lost.
    Returns the new status, or None when the job had already moved on."""
    attempt = rec.get("attempt", 1)
    if attempt <= rec["spec"].get("max_retries", 0):
        if requeue(redis, job_id, rec, message, **fields):
            log.warning("job %s: worker_lost (%s); queued again as attempt %d", job_id, message, attempt + 1)
            return Status.QUEUED.value
        return None
    if JobStore(redis).transition(
        job_id,
        ACTIVE,
        status=Status.FAILED.value,
        reason=Reason.WORKER_LOST.value,
        message=message,
        ended_at=time.time(),
        **fields,
    ):
        log.warning("job %s: worker_lost (%s); no retries left", job_id, message)
        return Status.FAILED.value
    return None


def requeue(redis: Redis, job_id: int, rec: dict[str, Any], message: str, **fields: Any) -> bool:
    """Put a lost job back on its queue as its next attempt; the trainer resumes from the newest checkpoint."""
    from jobs.queues import enqueue_attempt

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
        enqueue_attempt(Queue(rec["queue"], connection=redis), job_id, attempt, rec["spec"])
    return ok


class Reaper(threading.Thread):
    """A daemon thread running reap() every REAP_EVERY_S, taking turns with other processes via a lock."""

    def __init__(self, redis_url: str):
        super().__init__(name="gpudeck-reaper", daemon=True)
        self.redis = Redis.from_url(redis_url)
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(REAP_EVERY_S):
            try:
                if self.redis.set(LOCK_KEY, "1", nx=True, px=int(REAP_EVERY_S * 800)):
                    reap(self.redis)
            except RedisError as exc:
                log.warning("reaper: redis unavailable (%s)", exc)
            except Exception:  # a reaper that dies silently would leave lost jobs running forever
                log.exception("reaper: unexpected error")
