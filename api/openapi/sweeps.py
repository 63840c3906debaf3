"""The OpenAPI document's part for sweeps."""

from __future__ import annotations

from typing import Any

from api.openapi.base import (
    BOOL,
    INT,
    STR,
    _body,
    _errors,
    _json,
    _nullable,
    _obj,
    _op,
    _path_id,
    _q,
    _ref,
    field_schemas,
)
from jobs.spec import COMMAND_ONLY, FIELDS, NOT_SYNTHETIC, param_schema
from jobs.sweeps import MAX_JOBS as SWEEP_MAX_JOBS
from models.params import PARAMS


def schemas() -> dict[str, Any]:
    """The components/schemas of sweeps made from the job spec's declaration: a grid over its fields (the others are
    models of api.schemas)."""
    spec_props = field_schemas()
    return {
        "GridSweepInput": _obj(
            {
                "base": _ref("JobSpecInput"),
                "search": {**STR, "const": "grid"},
                "metric": {**STR, "description": "what ranks the jobs (default test_accuracy)"},
                "mode": {**STR, "enum": ["min", "max"]},
                "grid": {
                    "type": "object",
                    "description": f'field ("model", "params.lr", ...) -> list of values; at most {SWEEP_MAX_JOBS} '
                    "combinations",
                    "minProperties": 1,
                    "properties": {
                        **{
                            k: {"type": "array", "minItems": 1, "items": spec_props[k]} for k in FIELDS if k != "params"
                        },
                        **{f"params.{k}": {"type": "array", "minItems": 1, "items": param_schema(k)} for k in PARAMS},
                    },
                    "patternProperties": {  # (a command job's variables and {NAME}s: issue 67 #5)
                        r"^(env|args)\.[A-Za-z_][A-Za-z0-9_]*$": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": ["string", "number", "boolean"]},
                        }
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
    }


def paths() -> dict[str, Any]:
    """The paths of sweeps."""
    job = [_path_id()]
    return {
        "/api/v1/sweeps": {
            "post": _op(
                "A grid of params (one job each) or a search (trials sampled and stopped early)",
                {
                    "201": _json("Sweep"),
                    "200": {
                        "description": "with dry_run=true: what it would be, validated as a sweep is (every "
                        "combination of a grid, a search's space and base), nothing stored",
                        "content": {
                            "application/json": {
                                "schema": _obj({"dry_run": {**BOOL, "enum": [True]}, "search": STR}, ["dry_run"])
                            }
                        },
                    },
                    **_errors(400, 403, 404, 413, 507),
                },
                parameters=[
                    _q(
                        "dry_run",
                        {**STR, "enum": ["0", "1", "true", "false", "yes", "no"]},
                        "true: validate it, store nothing, answer what it would be",
                    )
                ],
                requestBody=_body("SweepInput"),
            ),
            "get": _op(
                "The newest sweeps",
                {"200": _json("SweepList"), **_errors(400)},
                parameters=[_q("limit", {**INT, "minimum": 1, "maximum": 500}, "at most this many (50)")],
            ),
        },
        "/api/v1/sweeps/{id}": {
            "get": _op("Sweep summary, best first", {"200": _json("SweepSummary"), **_errors(404)}, parameters=job)
        },
        "/api/v1/sweeps/{id}/stop": {
            "post": _op(
                "Launch no more trials (running ones finish; a grid's queued jobs are canceled)",
                {"200": _json("SweepSummary"), **_errors(403, 404)},
                parameters=job,
            )
        },
    }
