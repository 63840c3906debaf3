"""The OpenAPI document's part for sweeps."""

from __future__ import annotations

from typing import Any

from api.openapi.base import (
    BOOL,
    INT,
    NUM,
    OWNER,
    STR,
    TIME,
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
from jobs.search import DEFAULT_CONCURRENT, DEFAULT_TRIALS, ZOO_METRICS
from jobs.search import MAX_TRIALS as SEARCH_MAX_TRIALS
from jobs.spec import COMMAND_ONLY, FIELDS, NOT_SYNTHETIC, param_schema
from jobs.sweeps import MAX_JOBS as SWEEP_MAX_JOBS
from models.params import PARAMS


def schemas() -> dict[str, Any]:
    """The components/schemas of sweeps."""
    spec_props = field_schemas()
    return {
        "SweepInput": {
            "description": "a grid (one job per combination) or a search (trials sampled and stopped early)",
            "oneOf": [_ref("GridSweepInput"), _ref("SearchSweepInput")],
        },
        "SearchSweepInput": _obj(
            {
                "base": _ref("JobSpecInput"),
                "search": {**STR, "enum": ["random", "tpe"], "description": "random sampling, or Bayesian (TPE)"},
                "space": {
                    "type": "object",
                    "minProperties": 1,
                    "description": "params.<name> (a model job), env.<NAME> or args.<NAME> (a {NAME} in a command "
                    "job's command), or a spec field -> how its values are sampled",
                    "additionalProperties": _ref("Distribution"),
                },
                "stopping": _nullable(_ref("Stopping")),
                "metric": {
                    **STR,
                    "description": "a scalar the jobs report (a model job: "
                    + ", ".join(ZOO_METRICS)
                    + "); needed for a command job",
                },  # fmt: skip
                "mode": {**STR, "enum": ["min", "max"], "description": "default: min for a loss or error, else max"},
                "max_trials": {**INT, "minimum": 1, "maximum": SEARCH_MAX_TRIALS, "default": DEFAULT_TRIALS},
                "max_concurrent": {**INT, "minimum": 1, "default": DEFAULT_CONCURRENT},
                "time_budget": {
                    "description": "seconds, or an age (30m, 2h): after it no trial is launched and running ones are "
                    "stopped early",
                    "anyOf": [{**INT, "minimum": 1}, {**STR, "pattern": "^([0-9]+[smhdw])+$"}],
                },
                "seed": {**INT, "minimum": 0, "maximum": 2**31 - 1, "description": "the same seed, the same trials"},
            },
            ["base", "search", "space"],
            extra=False,
        ),
        "Distribution": {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "properties": {
                "loguniform": {"type": "array", "prefixItems": [NUM, NUM], "minItems": 2, "maxItems": 2},
                "uniform": {"type": "array", "prefixItems": [NUM, NUM], "minItems": 2, "maxItems": 2},
                "int": {"type": "array", "prefixItems": [INT, INT], "minItems": 2, "maxItems": 2},
                "choice": {"type": "array", "minItems": 1, "items": {"anyOf": [NUM, STR, BOOL]}},
            },
            "additionalProperties": False,
            "description": "[low, high] with low < high (loguniform: low > 0), or a list of choices",
        },
        "Stopping": _obj(
            {
                "kind": {**STR, "enum": ["asha", "median"]},
                "min_steps": {**INT, "minimum": 1, "description": "the first rung (asha), the warm-up (median)"},
                "reduction_factor": {**INT, "minimum": 2, "description": "asha: 1 in this many goes on at a rung"},
            },
            ["kind"],
            extra=False,
        ),
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
                "search": {**STR, "enum": ["grid", "random", "tpe"]},
                "state": {**STR, "enum": ["running", "done", "stopped", "failed"]},
                "stopped": _nullable({**STR, "description": "why it launches no more trials"}),
                "grid": {"type": "object"},
                "space": _nullable({"type": "object"}),
                "stopping": _nullable({"type": "object"}),
                "metric": STR,
                "mode": {**STR, "enum": ["min", "max"]},
                "base": {"type": "object"},
                "owner": OWNER,
                "max_concurrent": _nullable(INT),
                "max_trials": _nullable(INT),
                "time_budget": _nullable(INT),
                "seed": _nullable(INT),
                "created_at": _nullable(TIME),
                "trials": {"type": "array", "items": _ref("Trial")},
                "rungs": {
                    "type": "array",
                    "items": _obj(
                        {
                            "rung": INT,
                            "step": INT,
                            "trials": {
                                "type": "array",
                                "items": _obj(
                                    {"job": _nullable(INT), "trial": INT, "value": _nullable(NUM), "passed": BOOL}
                                ),
                            },
                        }
                    ),
                    "description": "successive halving's rungs: each one's step, who reached it and who went on",
                },
                "budget": _obj(
                    {
                        "trials": INT,
                        "trials_left": INT,
                        "steps": INT,
                        "time_used_s": NUM,
                        "time_left_s": _nullable(NUM),
                    }
                ),
                "jobs": {
                    "type": "array",
                    "items": _obj(
                        {
                            "job_id": INT,
                            "name": _nullable(STR),
                            "rank": _nullable(INT),
                            "status": STR,
                            "fraction": _nullable(NUM),
                            "metric": _nullable(NUM),
                            "test_accuracy": _nullable(NUM),
                            "test_loss": _nullable(NUM),
                            "last_loss": _nullable(NUM),
                        },
                        ["job_id", "rank", "status"],
                    ),
                },
                "ended": INT,
                "total": INT,
                "best": _nullable(_ref("Trial")),
            },
            ["id", "search", "state", "trials", "jobs", "ended", "total", "best", "budget"],
        ),
        "Trial": _obj(
            {
                "number": INT,
                "job": _nullable(INT),
                "name": _nullable(STR),
                "values": {"type": "object", "description": "keyed like the space (or the grid): params.lr -> 0.03"},
                "metric": _nullable({**NUM, "description": "its final value (running: the last reported)"}),
                "status": STR,
                "reason": _nullable(STR),
                "stopped_early": BOOL,
                "rung": _nullable(INT),
                "step": _nullable(INT),
                "fraction": _nullable(NUM),
            },
            ["number", "job", "values", "metric", "status", "stopped_early"],
        ),
        "SweepList": _obj(
            {
                "sweeps": {
                    "type": "array",
                    "items": _obj(
                        {
                            "id": INT,
                            "search": STR,
                            "name": _nullable(STR),
                            "owner": OWNER,
                            "metric": STR,
                            "trials": INT,
                            "max_trials": _nullable(INT),
                            "state": _nullable(STR),
                            "created_at": _nullable(TIME),
                        }
                    ),
                }
            },
            ["sweeps"],
        ),
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
