"""The OpenAPI document's component schemas made from the job spec's declaration (models.jobspec): each kind a
client submits, the one input that takes any of them, and the spec as a job keeps it. Every other component is a
model of api.schemas."""

from __future__ import annotations

from typing import Any

from api.openapi.base import _nullable, _obj, _ref, field_schemas, spec_schemas
from jobs.record import FILLED, defaults

KEPT = (*FILLED, *defaults())
"""The fields every kept spec has a value of (the others may be null there): what the service fills in, and every
field with a default of its own."""


def schemas() -> dict[str, Any]:
    """The components/schemas made from the job spec's declaration."""
    return {
        "JobSpecInput": {
            "description": "a model job (model, dataset, params), a command job (command, source, env, ...) or a "
            "session (kind: session); chief: true needs workers >= 2",
            "oneOf": [_ref("ModelJobSpec"), _ref("CommandJobSpec"), _ref("SessionSpec")],
            "if": {"required": ["chief"], "properties": {"chief": {"const": True}}},
            "then": {"required": ["workers"], "properties": {"workers": {"type": "integer", "minimum": 2}}},
        },
        **spec_schemas(),  # (each kind with all of its fields, as jobs.spec declares them; null: the default)
        "JobSpec": _obj(
            {k: v if k in KEPT else _nullable(v) for k, v in field_schemas().items()},
            [*KEPT, "timeout"],
        )
        | {"description": "a job's spec as it is kept: every default filled in"},
    }
