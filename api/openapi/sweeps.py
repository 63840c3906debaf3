"""The OpenAPI document's part for sweeps."""

from __future__ import annotations

from typing import Any

from api.openapi.base import (
    INT,
    NOT_SYNTHETIC,
    NUM,
    OWNER,
    STR,
    _body,
    _errors,
    _json,
    _nullable,
    _obj,
    _op,
    _param_schema,
    _path_id,
    _ref,
)
from api.openapi.base import spec_props as base_spec_props
from jobs.spec import (
    COMMAND_ONLY,
    FIELDS,
)
from jobs.sweeps import MAX_JOBS as SWEEP_MAX_JOBS
from models.params import PARAMS


def schemas() -> dict[str, Any]:
    """The components/schemas of sweeps."""
    spec_props = base_spec_props()
    return {
        "SweepInput": _obj(
            {
                "base": _ref("JobSpecInput"),
                "grid": {
                    "type": "object",
                    "description": f'field ("model", "params.lr", ...) -> list of values; at most {SWEEP_MAX_JOBS} '
                    "combinations",
                    "minProperties": 1,
                    "properties": {
                        **{
                            k: {"type": "array", "minItems": 1, "items": spec_props[k]} for k in FIELDS if k != "params"
                        },
                        **{f"params.{k}": {"type": "array", "minItems": 1, "items": _param_schema(k)} for k in PARAMS},
                    },
                    "additionalProperties": False,
                },
                "max_concurrent": _nullable(
                    {**INT, "minimum": 1, "description": "at most this many of the sweep's jobs hold workers at once"}
                ),
            },
            ["base", "grid"],
            extra=False,
        )
        | {
            "allOf": [
                {  # a command job's grid varies no model and no params, and gives no synthetic dataset
                    "if": {"properties": {"base": {"required": ["command"]}}},
                    "then": {
                        "properties": {
                            "grid": {
                                "propertyNames": {"not": {"pattern": "^(model$|params)"}},
                                "properties": {"dataset": {"items": NOT_SYNTHETIC}},
                            }
                        }
                    },
                },
                {  # a model job's grid varies none of a command's fields
                    "if": {"properties": {"base": {"required": ["model"]}}},
                    "then": {"properties": {"grid": {"propertyNames": {"not": {"enum": ["command", *COMMAND_ONLY]}}}}},
                },
                {  # a chief the grid asks for needs workers (>= 2) from the grid or the base
                    "if": {
                        "properties": {
                            "grid": {"required": ["chief"], "properties": {"chief": {"contains": {"const": True}}}}
                        }
                    },
                    "then": {
                        "anyOf": [
                            {
                                "properties": {
                                    "grid": {
                                        "required": ["workers"],
                                        "properties": {"workers": {"items": {"type": "integer", "minimum": 2}}},
                                    }
                                }
                            },
                            {
                                "properties": {
                                    "base": {
                                        "required": ["workers"],
                                        "properties": {"workers": {"type": "integer", "minimum": 2}},
                                    },
                                    "grid": {"not": {"required": ["workers"]}},
                                }
                            },
                        ]
                    },
                },
                {  # a chief needs workers in every combination
                    "if": {"properties": {"base": {"required": ["chief"], "properties": {"chief": {"const": True}}}}},
                    "then": {"properties": {"grid": {"properties": {"workers": {"items": {"minimum": 2}}}}}},
                },
            ]
        },
        "Sweep": _obj(
            {
                "id": INT,
                "grid": {"type": "object"},
                "base": {"type": "object"},
                "job_ids": {"type": "array", "items": INT},
                "jobs": {"type": "array", "items": _ref("Job")},
                "owner": OWNER,
                "max_concurrent": _nullable(INT),
            },
            ["id", "job_ids", "jobs"],
        ),
        "SweepSummary": _obj(
            {
                "id": INT,
                "grid": {"type": "object"},
                "base": {"type": "object"},
                "owner": OWNER,
                "max_concurrent": _nullable(INT),
                "jobs": {
                    "type": "array",
                    "items": _obj(
                        {
                            "job_id": INT,
                            "name": _nullable(STR),
                            "rank": _nullable(INT),
                            "status": STR,
                            "fraction": _nullable(NUM),
                            "test_accuracy": _nullable(NUM),
                            "test_loss": _nullable(NUM),
                            "last_loss": _nullable(NUM),
                        },
                        ["job_id", "rank", "status"],
                    ),
                },
                "ended": INT,
                "total": INT,
                "best": _nullable({"type": "object"}),
            },
            ["id", "jobs", "ended", "total", "best"],
        ),
    }


def paths() -> dict[str, Any]:
    """The paths of sweeps."""
    job = [_path_id()]
    return {
        "/api/v1/sweeps": {
            "post": _op(
                "A grid of params, one job each",
                {"201": _json("Sweep"), **_errors(400, 403, 404, 413, 507)},
                requestBody=_body("SweepInput"),
            )
        },
        "/api/v1/sweeps/{id}": {
            "get": _op("Sweep summary, best first", {"200": _json("SweepSummary"), **_errors(404)}, parameters=job)
        },
    }
