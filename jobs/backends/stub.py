"""A backend where nothing runs, for engine tests (as dramatiq's StubBroker): it admits every spec, gives the GPUs
it was made with, starts nothing, and keeps what was queued, so a test sees what the engine asked of it."""

from __future__ import annotations

from redis import Redis

from jobs.backends.base import Backend, Starts
from jobs.errors import Conflict
from jobs.record import Job, Kept
from jobs.settings import Settings


class StubBackend(Backend):
    name = "stub"

    def __init__(self, gpus: int = 0):
        self.gpus = gpus
        self.queued_ids: list[int] = []
        self.priorities: list[tuple[int, str]] = []

    def default_gpus(self, redis: Redis) -> int:
        return self.gpus

    def admit(self, redis: Redis, spec: Kept, settings: Settings) -> None:
        pass

    def queued(self, redis: Redis, job_id: int, settings: Settings) -> None:
        self.queued_ids.append(job_id)

    def lines(self, redis: Redis, recs: list[Job], settings: Settings) -> tuple[dict[int, int], Starts]:
        return {}, {}

    def reprioritize(self, redis: Redis, rec: Job, priority: str, settings: Settings) -> None:
        self.priorities.append((rec["id"], priority))

    def move(self, redis: Redis, job_id: int, before: int | None, after: int | None) -> Job:
        raise Conflict("the stub backend has no line to move in", {"field": "body"})
