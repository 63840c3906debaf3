"""Finds jobs whose work-horse stopped beating (worker killed, host gone): worker_lost, then a retry."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from redis import Redis
from redis.exceptions import RedisError

from jobs import gang
from jobs.keys import REAPER_LOCK_KEY, RETENTION_LOCK_KEY
from jobs.lifecycle import worker_lost
from jobs.periodic import Periodic
from jobs.store import HEARTBEAT_TTL_S, JobStore, redis_uptime_s, write_refusal
from models.states import ACTIVE

log = logging.getLogger(__name__)

RETAIN_EVERY_S = 60.0
"""How often GPUDECK_RETENTION is applied (by one process of the stack at a time)."""
REAP_EVERY_S = 5.0
"""How often each API and worker process looks for lost jobs (one of them at a time, by a Redis lock)."""
SETTLE_S = HEARTBEAT_TTL_S + REAP_EVERY_S
"""After Redis was away or refused writes, how long until a missing heartbeat means a lost worker."""


def reap(redis: Redis) -> list[int]:
    """Every active job without a heartbeat lost its worker: retried or failed (jobs.lifecycle.worker_lost)."""
    store = JobStore(redis)
    lost = []
    for job_id in store.active_ids():
        rec = store.get(job_id)
        if rec.spec.multi_worker:
            gang.check(redis, job_id, rec)  # heartbeats per task; a lost task stops the others
            continue
        if store.alive(job_id) or rec["status"] not in ACTIVE:
            continue
        message = f"no heartbeat from worker {rec.get('worker')} (attempt {rec.get('attempt', 1)})"
        if worker_lost(redis, job_id, rec, message):
            lost.append(job_id)
    return lost


class Reaper(Periodic):
    """reap() every REAP_EVERY_S, taking turns with other processes via a lease; and `retention(redis)`
    (jobs.control.apply_retention, handed down by the process that starts it) at most once a RETAIN_EVERY_S among
    them all."""

    what, every_s, first_wait = "reaper", REAP_EVERY_S, True

    def __init__(self, redis_url: str, retention: Callable[[Redis], object] | None = None, jobs: bool = True):
        super().__init__(redis_url, "gpudeck-reaper")
        self.retention = retention
        self.jobs = jobs
        """Whether it looks for lost jobs (not on Slurm: jobs.onslurm judges them, knowing what Slurm did)."""
        self.refused_at: float | None = None
        """When this process last saw Redis refuse writes (its disk full)."""

    def round(self) -> None:
        self._retain()
        if not self.jobs:
            return
        # Not on a Redis up for less than a heartbeat's lifetime: heartbeats that expired while it was away (a
        # restart, a failover) are not lost workers until each live work-horse has beaten again.
        if redis_uptime_s(self.redis) < SETTLE_S:
            return
        # Nor for a heartbeat's lifetime after it refused writes (its disk full): no work-horse could beat then.
        # (Each process looks every REAP_EVERY_S, so a refusal long enough to expire a heartbeat is seen by all.)
        if write_refusal(self.redis) is not None:
            self.refused_at = time.monotonic()
        if self.refused_at is not None and time.monotonic() - self.refused_at < SETTLE_S:
            return
        if self.redis.set(REAPER_LOCK_KEY, "1", nx=True, px=int(REAP_EVERY_S * 800)):
            reap(self.redis)

    def _retain(self) -> None:
        if self.retention is None:
            return
        try:
            if self.redis.set(RETENTION_LOCK_KEY, "1", nx=True, px=int(RETAIN_EVERY_S * 1000)):
                self.retention(self.redis)
        except RedisError as exc:
            log.warning("retention: redis unavailable (%s)", exc)
        except Exception:
            log.exception("retention: unexpected error")
