"""The bodies of sweeps: a grid's, a search's summary with its trials and rungs, a list."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from api.schemas.base import (
    OMITTED,
    Answer,
    Search,
    Time,
)
from api.schemas.jobs import Job


class Sweep(Answer):
    id: int
    grid: dict[str, Any] = OMITTED
    base: dict[str, Any] = OMITTED
    job_ids: list[int]
    jobs: list[Job]
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")
    max_concurrent: int | None = None


class RungTrial(Answer):
    job: int | None = None
    trial: int = OMITTED
    value: float | None = None
    passed: bool = OMITTED


class Rung(Answer):
    rung: int = OMITTED
    step: int = OMITTED
    trials: list[RungTrial] = OMITTED


class Budget(Answer):
    trials: int = OMITTED
    trials_left: int = OMITTED
    steps: int = OMITTED
    time_used_s: float = OMITTED
    time_left_s: float | None = None


class SweepJobs(Answer):
    job_id: int
    name: str | None = None
    rank: int | None
    status: str
    fraction: float | None = None
    metric: float | None = None
    test_accuracy: float | None = None
    test_loss: float | None = None
    last_loss: float | None = None


class SweepSummary(Answer):
    id: int
    search: Search
    state: Literal["running", "done", "stopped", "failed"]
    stopped: str | None = Field(None, description="why it launches no more trials")
    grid: dict[str, Any] = OMITTED
    space: dict[str, Any] | None = None
    stopping: dict[str, Any] | None = None
    metric: str = OMITTED
    mode: Literal["min", "max"] = OMITTED
    base: dict[str, Any] = OMITTED
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")
    max_concurrent: int | None = None
    max_trials: int | None = None
    time_budget: int | None = None
    seed: int | None = None
    created_at: Time | None = None
    trials: list[Trial]
    rungs: list[Rung] = Field(
        OMITTED, description="successive halving's rungs: each one's step, who reached it and who went on"
    )
    budget: Budget
    jobs: list[SweepJobs]
    ended: int
    total: int
    best: Trial | None


class Trial(Answer):
    number: int
    job: int | None
    name: str | None = None
    values: dict[str, Any] = Field(description="keyed like the space (or the grid): params.lr -> 0.03")
    metric: float | None = Field(description="its final value (running: the last reported)")
    status: str
    reason: str | None = None
    stopped_early: bool
    rung: int | None = None
    step: int | None = None
    fraction: float | None = None


class SweepRow(Answer):
    id: int = OMITTED
    search: str = OMITTED
    name: str | None = None
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")
    metric: str = OMITTED
    trials: int = OMITTED
    max_trials: int | None = None
    state: str | None = None
    created_at: Time | None = None


class SweepList(Answer):
    sweeps: list[SweepRow]
