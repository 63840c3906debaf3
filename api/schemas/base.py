"""What every body of api.schemas is made of: an answer, a request body, a field that may be left out, and the
types several bodies say (a job's status, a date-time, the schemas made from the job spec's declaration)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, WithJsonSchema

from jobs.compare import X_AXES
from jobs.plan import SOURCES
from jobs.searchspace import SEARCHES
from models.searchinput import OMITTED, Input  # noqa: F401 (one declaration: the search body's)
from models.states import PRIORITIES, Reason, Status, TaskStatus


class Answer(BaseModel):
    """A response body."""


# (said in place, not as components of their own: a generated client names each enum by its field, JobStatus)
StatusName = Annotated[str, WithJsonSchema({"type": "string", "enum": [s.value for s in Status]})]
ReasonName = Annotated[str, WithJsonSchema({"type": "string", "enum": [r.value for r in Reason]})]
TaskStatusName = Annotated[str, WithJsonSchema({"type": "string", "enum": [s.value for s in TaskStatus]})]
Priority = Annotated[str, WithJsonSchema({"type": "string", "enum": list(PRIORITIES)})]
XAxis = Annotated[str, WithJsonSchema({"type": "string", "enum": list(X_AXES)})]
Search = Annotated[str, WithJsonSchema({"type": "string", "enum": list(SEARCHES)})]
DurationSource = Annotated[str, WithJsonSchema({"type": "string", "enum": ["declared", *SOURCES, "timeout"]})]
Time = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
"""Every date-time in one form: RFC 3339 in UTC with milliseconds, 2026-11-24T15:17:02.123Z (jobs.store.iso)."""
UnixS = Annotated[float, Field(description="unix time, seconds (a sample's clock, for arithmetic, not a date)")]
# Schemas made from the job spec's declaration (models.jobspec; api/openapi/jobschemas.py, api/openapi/sweeps.py):
JobSpec = Annotated[dict[str, Any], WithJsonSchema({"$ref": "#/components/schemas/JobSpec"})]
GridSweepInput = Annotated[dict[str, Any], WithJsonSchema({"$ref": "#/components/schemas/GridSweepInput"})]
