"""Finds jobs whose work-horse stopped beating (worker killed, host gone): worker_lost, then a retry."""

from __future__ import annotations

import logging
import threading
import time

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue

from jobs.states import Reason, Status
from jobs.store import JobStore

log = logging.getLogger(__name__)

REAP_EVERY_S = 5.0
"""How often each API and worker process looks for lost jobs (one of them at a time, by a Redis lock)."""
LOCK_KEY = "gpudeck:reaper:lock"


def reap(redis: Redis) -> list[int]:
    """Mark every active job without a heartbeat worker_lost; re-queue it while it has retries left."""
    store = JobStore(redis)
    lost = []
    for job_id in store.active_ids():
        if store.alive(job_id):
            continue
        rec = store.get(job_id)
        if rec["status"] not in (Status.STARTING.value, Status.RUNNING.value):
            continue
        attempt, retries = rec.get("attempt", 1), rec["spec"].get("max_retries", 0)
        message = f"no heartbeat from worker {rec.get('worker')} (attempt {attempt})"
        if attempt <= retries:
            if requeue(redis, job_id, rec, message):
                log.warning("job %s: worker_lost, re-queued as attempt %d", job_id, attempt + 1)
                lost.append(job_id)
        elif store.transition(
            job_id,
            (Status.STARTING.value, Status.RUNNING.value),
            status=Status.FAILED.value,
            reason=Reason.WORKER_LOST.value,
            message=message,
            ended_at=time.time(),
        ):
            log.warning("job %s: worker_lost, no retries left", job_id)
            lost.append(job_id)
    return lost


def requeue(redis: Redis, job_id: int, rec: dict, message: str) -> bool:
    """Put a lost job back on its queue as its next attempt; the trainer resumes from the newest checkpoint."""
    from jobs.queues import enqueue_attempt

    store = JobStore(redis)
    attempt = rec.get("attempt", 1) + 1
    ok = store.transition(
        job_id,
        (Status.STARTING.value, Status.RUNNING.value),
        status=Status.QUEUED.value,
        attempt=attempt,
        reason=Reason.WORKER_LOST.value,
        message=f"{message}; retrying",
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
