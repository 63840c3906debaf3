"""gpudeck's own workers (GPUDECK_BACKEND=local, the default): its scheduler places jobs on the live workers, orders
its lines and plans their starts."""

from __future__ import annotations

from redis import Redis

from jobs import forecast, queues, steer
from jobs.backends.base import Backend, Starts
from jobs.errors import NotFound
from jobs.record import Job, Kept
from jobs.schedule import place
from jobs.settings import Settings
from jobs.store import JobStore


class LocalBackend(Backend):
    name = "local"

    def default_gpus(self, redis: Redis) -> int:
        """One where a live worker has a GPU, else none (a CPU box's jobs run on its CPU workers)."""
        return 1 if queues.live_gpu_workers(redis) else 0

    def admit(self, redis: Redis, spec: Kept, settings: Settings) -> None:
        """A zoo job where something could train it; no more GPUs (a share's memory) than a live host has."""
        if spec.model is not None:
            queues.check_zoo(redis)
        queues.check_hosts(redis, spec, settings)

    def queued(self, redis: Redis, job_id: int, settings: Settings) -> None:
        place(redis, settings)  # (it starts now when it can)

    def lines(self, redis: Redis, recs: list[Job], settings: Settings) -> tuple[dict[int, int], Starts]:
        line = queues.positions(redis, recs, settings)
        # (expected starts for the jobs the plan reaches: one further in line than it looks has none, and asking
        # for it would walk the plan to its end for nothing)
        queued = [r["id"] for r in recs if r["status"] == "queued" and line.get(r["id"], 0) <= forecast.SCAN_MAX]
        return line, forecast.estimate(redis, settings, queued) if queued else {}

    def reprioritize(self, redis: Redis, rec: Job, priority: str, settings: Settings) -> None:
        """Nothing to tell: the line is ours (jobs.steer rewrites it)."""

    def move(self, redis: Redis, job_id: int, before: int | None, after: int | None) -> Job:
        """NotFound naming the field for a job to move beside that does not exist."""
        for field, target in (("before", before), ("after", after)):
            if target is not None and not JobStore(redis).exists(target):
                raise NotFound(f"job {target} does not exist", {"field": field, "id": target})
        return steer.move(redis, job_id, before=before, after=after)


BACKEND = LocalBackend
