"""What a schedule (a job or a sweep made at each firing of a cron expression) is asked with, declared once: the API
checks a body against it (jobs.cronjobs) and the OpenAPI document's ScheduleInput is made from it. The cron grammar
is croniter's (five fields, or six with seconds; @daily, @hourly…), the zones the IANA database's."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
OVERLAPS = ("skip", "queue", "cancel-previous")
"""What a firing does while the job (or sweep) its schedule made last has not ended: makes nothing (skip), makes its
job anyway, which waits in line as any job does (queue), or cancels the last one and makes its own."""
CATCH_UPS = ("none", "one")
"""Firings missed (the service was down at their time, by more than MISSED_AFTER_S): none made, or one for them all."""
MISSED_AFTER_S = 60.0
"""A firing this much later than its time (the service was down, or stopped) is a missed one."""

JobSpecInput = Annotated[dict[str, Any], WithJsonSchema({"$ref": "#/components/schemas/JobSpecInput"})]
SweepInput = Annotated[dict[str, Any], WithJsonSchema({"$ref": "#/components/schemas/SweepInput"})]
"""A job spec of any kind, a sweep (the OpenAPI document's JobSpecInput and SweepInput)."""


def cron_expression(value: str) -> str:
    from croniter import croniter  # (RQ's dependency too: imported where a schedule is checked or fired)

    if not croniter.is_valid(value):
        raise ValueError(f"{value!r} is not a cron expression (e.g. '0 2 * * *': minute hour day month weekday)")
    return value


def zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not a time zone of the IANA database (e.g. Europe/Berlin, UTC)") from None
    return value


class ScheduleInput(BaseModel):
    """A schedule: a job spec (`job`) or a sweep (`sweep`) made at each firing of `cron` in `tz`"""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN, description="letters, digits, . _ - (up to 63): the schedule's id")
    cron: Annotated[str, AfterValidator(cron_expression)] = Field(
        description="when it fires: a cron expression ('0 2 * * *', '*/15 * * * *', '@daily')"
    )
    tz: Annotated[str, AfterValidator(zone)] = Field("UTC", description="the zone its times are read in")
    overlap: Literal["skip", "queue", "cancel-previous"] = Field(
        "skip", description="a firing while its last job (or sweep) still runs: " + ", ".join(OVERLAPS)
    )
    catch_up: Literal["none", "one"] = Field(
        "none", description="firings missed while the service was down: none made, or one for them all"
    )
    job: JobSpecInput | None = Field(None, description="the job spec each firing submits (as POST /api/v1/jobs does)")
    sweep: SweepInput | None = Field(None, description="or the sweep each firing makes (as POST /api/v1/sweeps does)")
    paused: bool = Field(False, description="made paused: it fires once resumed")

    @model_validator(mode="after")
    def one_of_job_or_sweep(self) -> ScheduleInput:
        if (self.job is None) == (self.sweep is None):
            raise ValueError("give one of job (a job spec) or sweep (a sweep), not both nor neither")
        return self


def problems(body: Any) -> dict[str, str]:
    """What ScheduleInput refuses in `body`: field (dotted) -> why; none for a body it takes."""
    from pydantic import ValidationError

    if not isinstance(body, dict):
        return {"body": "must be a JSON object"}
    try:
        ScheduleInput.model_validate(body)
    except ValidationError as exc:
        return {
            ".".join(str(p) for p in e["loc"]) or "body": e["msg"].removeprefix("Value error, ") for e in exc.errors()
        }
    return {}


def firings(cron: str, tz: str, after: float, until: float, most: int = 10_000) -> list[float]:
    """The firing times of `cron` in `tz` after `after` up to `until` (Unix times), the first `most` of them."""
    from croniter import croniter

    it = croniter(cron, datetime.fromtimestamp(after, ZoneInfo(tz)))
    times: list[float] = []
    while len(times) < most:
        t = float(it.get_next(float))
        if t > until:
            break
        times.append(t)
    return times


def last_firing(cron: str, tz: str, until: float) -> float:
    """The last firing of `cron` in `tz` at or before `until` (Unix times)."""
    from croniter import croniter

    return float(croniter(cron, datetime.fromtimestamp(until + 0.001, ZoneInfo(tz))).get_prev(float))


def next_firing(cron: str, tz: str, after: float) -> float:
    """The first firing of `cron` in `tz` after `after` (Unix times)."""
    from croniter import croniter

    return float(croniter(cron, datetime.fromtimestamp(after, ZoneInfo(tz))).get_next(float))
