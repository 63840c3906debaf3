"""The bodies of schedules: one, with its last firings, and a list."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from api.schemas.base import OMITTED, Answer


class Made(Answer):
    """what a firing made: a job or a sweep"""

    kind: Literal["job", "sweep"]
    id: int


class Firing(Answer):
    firing: str = Field(description="the firing's time (ISO 8601, UTC)")
    at: str = Field(description="when it was handled")
    made: Made | None = Field(description="what it made (null: nothing, and why says why)")
    why: str | None = Field(
        description="a firing skipped or missed, refused (a token revoked), or the last job it canceled"
    )


class Schedule(Answer):
    name: str
    cron: str
    tz: str
    overlap: Literal["skip", "queue", "cancel-previous"]
    catch_up: Literal["none", "one"]
    job: dict[str, Any] = Field(OMITTED, description="the job spec each firing submits (its secrets not shown)")
    sweep: dict[str, Any] = Field(OMITTED, description="or the sweep each firing makes")
    owner: str | None = Field(description="the name of the token that made it: each firing submits as them")
    created_at: str
    paused: bool
    next_at: str | None = Field(description="its next firing (null while paused)")
    fired: int = Field(description="firings that made a job or a sweep")
    last_made: Made | None
    firings: list[Firing] = Field(description="its last firings, oldest first, each with what it made or why not")


class ScheduleList(Answer):
    schedules: list[Schedule]
