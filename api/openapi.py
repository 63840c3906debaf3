"""The OpenAPI 3.1 document served at /api/v1/openapi.json, built from the same constants the code validates with
(job fields, params, states, priorities), so the two cannot drift apart silently; tests/api/test_openapi.py checks
real responses against it."""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint

from api.finite import NONFINITE
from api.jobs import MAX_OFFSET, MAX_PAGE, MAX_WAIT_S
from api.users import MAX_AUDIT
from jobs.keys import PRIORITIES
from jobs.settings import AGE, DEFAULT_API
from jobs.sources import GIT_COMMIT
from jobs.spec import (
    COMMAND_ONLY,
    ENV_NAME,
    FIELDS,
    INJECTED,
    MAX_COMMAND,
    MAX_GPUS,
    MAX_TIMEOUT_S,
    MAX_TOTAL_STEPS,
    MAX_WORKERS,
)
from jobs.sweeps import MAX_JOBS as SWEEP_MAX_JOBS
from models.catalog import ALIASES, MODELS, NAME
from models.params import AUGMENT_PARTS, PARAMS
from models.sourcetree import REF
from models.states import Reason, Status

bp = Blueprint("openapi", __name__)

VERSION = "1.0.0"
_JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(props: dict[str, Any], required: list[str] | None = None, extra: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    if not extra:
        out["additionalProperties"] = False
    return out


def _param_schema(name: str) -> dict[str, Any]:
    p = PARAMS[name]
    if p.kind is list:
        return {
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        }
    out = {"type": _JSON_TYPES[p.kind], "description": p.help, **p.bounds(choices="enum")}
    if name == "augment":
        part = "|".join(re.escape(a) for a in AUGMENT_PARTS)
        out["pattern"] = rf"^({part})(\+({part}))*$"
    return out


_SIDE, _CLASSES = r"([1-9][0-9]{0,2}|10[01][0-9]|102[0-4])", r"([2-9]|[1-9][0-9]{1,3}|10000)"
DATASET_PATTERN = (
    rf"^(synthetic(:{_SIDE}x{_SIDE}x[13](:{_CLASSES})?)?"  # generated: H, W in 1..1024, C 1 or 3, K classes
    rf"|{NAME}(:{NAME})?"  # an uploaded NAME[:VERSION]
    r"|/.+)$"  # a server path (under GPUDECK_DATA_ROOTS, else 403)
)
"""The forms models.catalog.parse_dataset reads."""
NOT_SYNTHETIC = {"not": {"pattern": "^synthetic(:|$)"}}
"""A command job's dataset: its DATA_DIR is a folder, never generated data."""

NULL_IS_DEFAULT = ("gpus", "name", "tags", "priority", "max_retries", "workers", "chief", "env", "dataset")
"""Optional spec fields a null stands for the default of (the others are nullable in the spec itself)."""

STR, INT, NUM, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
TIME = {"type": "string", "format": "date-time"}


OWNER = _nullable({**STR, "description": "the name of the token that made it (null: no named tokens then)"})


def _schemas() -> dict[str, Any]:
    params = {
        **_obj({k: _param_schema(k) for k in PARAMS}, extra=False),
        "not": {"required": ["epochs", "steps"]},  # one or the other
    }
    spec_props = {
        "model": {
            **STR,
            "enum": [*MODELS, *sorted(ALIASES)],
            "description": "a model name or alias (GET /api/v1/models)",
        },
        "dataset": {
            **STR,
            "pattern": DATASET_PATTERN,
            "description": "synthetic[:HxWxC[:K]], an uploaded NAME[:VERSION], or a server path under "
            "GPUDECK_DATA_ROOTS",
        },
        "params": params,
        "gpus": {**INT, "minimum": 0, "maximum": MAX_GPUS},
        "name": {**STR, "minLength": 1, "maxLength": 200},
        "tags": {"type": "array", "maxItems": 50, "items": {**STR, "minLength": 1, "maxLength": 64}},
        "priority": {**STR, "enum": list(PRIORITIES)},
        "timeout": _nullable({**INT, "minimum": 1, "maximum": MAX_TIMEOUT_S}),
        "max_retries": {**INT, "minimum": 0, "maximum": 10},
        "workers": {**INT, "minimum": 1, "maximum": MAX_WORKERS, "description": "tasks of a multi-worker job"},
        "chief": {**BOOL, "description": "task 0 runs as TF_CONFIG type chief (needs workers >= 2)"},
        "command": {
            "description": "your own code instead of a model: a shell string (/bin/sh -c) or a list of arguments; "
            "needs GPUDECK_TOKENS or GPUDECK_COMMAND_JOBS=1 on the API (else 403)",
            "anyOf": [
                {**STR, "minLength": 1, "maxLength": MAX_COMMAND},
                {"type": "array", "minItems": 1, "prefixItems": [{**STR, "minLength": 1}], "items": STR},
            ],
        },
        "source": _nullable(
            {
                **STR,
                "pattern": f"^({REF.pattern}|/.+)$",
                "description": "src:<sha256> from POST /api/v1/sources, or a server folder under "
                "GPUDECK_DATA_ROOTS (snapshotted at submission)",
            }
        ),
        "env": {
            "type": "object",
            "description": f"variables for the command; not one of {', '.join(INJECTED)}",
            "propertyNames": {"pattern": f"^{ENV_NAME.pattern}$"},
            "additionalProperties": STR,
        },
        "env_name": _nullable({**STR, "description": "an environment registered with GPUDECK_ENVS"}),
        "total_steps": _nullable(
            {**INT, "minimum": 1, "maximum": MAX_TOTAL_STEPS, "description": "for progress and ETA of a command job"}
        ),
    }
    point = _obj(
        {
            **{
                k: _nullable(NUM)
                for k in ("step", "epoch", "loss", "accuracy", "lr", "images_per_sec", "val_loss", "val_accuracy")
            },
            NONFINITE: _ref("Nonfinite"),
        }
    )
    return {
        "Error": _obj(
            {"error": STR, "message": STR, "details": {"type": "object"}}, ["error", "message", "details"], extra=False
        ),
        "JobSpecInput": {
            # null is the default for every optional field
            **_obj({k: _nullable(v) if k in NULL_IS_DEFAULT else v for k, v in spec_props.items()}, extra=False),
            "description": "a model job (model, dataset, params) or a command job (command, source, env, ...)",
            "oneOf": [
                {
                    "required": ["model", "dataset"],
                    "properties": {"dataset": {"type": "string"}},  # a model job's is not null
                    "not": {"anyOf": [{"required": [k]} for k in ("command", *COMMAND_ONLY)]},
                },
                {
                    "required": ["command"],
                    "not": {"anyOf": [{"required": ["model"]}, {"required": ["params"]}]},
                    "properties": {"dataset": NOT_SYNTHETIC},
                },
            ],
            "if": {"required": ["chief"], "properties": {"chief": {"const": True}}},
            "then": {"required": ["workers"], "properties": {"workers": {"type": "integer", "minimum": 2}}},
        },
        # what a job shows of its spec: every field, null where it does not apply (a command job's model, …)
        "JobSpec": _obj(
            {
                k: v if k in ("gpus", "name", "tags", "priority", "max_retries", "workers") else _nullable(v)
                for k, v in spec_props.items()
            },
            ["gpus", "name", "tags", "priority", "timeout", "max_retries", "workers"],
        ),
        "Source": _obj(
            {
                "ref": STR,
                "sha256": STR,
                "files": INT,
                "size_bytes": INT,
                "created_at": TIME,
                "git_commit": STR,
                "git_dirty": BOOL,
                "path": STR,
            },
            ["ref", "sha256", "files", "size_bytes", "created_at"],
        ),
        "Progress": _obj(
            {
                "step": _nullable(INT),
                "total_steps": _nullable(INT),
                "epoch": _nullable(NUM),
                "epochs": _nullable(NUM),
                "fraction": _nullable(NUM),
            }
        ),
        "Nonfinite": {
            "type": "object",
            "description": "fields of this object whose value was not a finite number (a diverged loss): JSON has "
            "no NaN or Infinity, so such a value is answered as null and named here",
            "additionalProperties": {**STR, "enum": ["nan", "inf", "-inf"]},
        },
        "Result": _obj(
            {
                **{
                    k: _nullable(NUM)
                    for k in (
                        "test_accuracy",
                        "test_top5",
                        "test_loss",
                        "steps",
                        "epochs",
                        "images_per_sec",
                        "duration_s",
                    )
                },
                NONFINITE: _ref("Nonfinite"),
            }
        ),
        "Job": _obj(
            {
                "id": INT,
                "name": STR,
                "owner": OWNER,
                "status": {**STR, "enum": [s.value for s in Status]},
                "reason": _nullable({**STR, "enum": [r.value for r in Reason]}),
                "message": _nullable(STR),
                "spec": _ref("JobSpec"),
                "queue": STR,
                "worker": _nullable(STR),
                "gpu_ids": _nullable({"type": "array", "items": STR}),
                "attempt": INT,
                "created_at": TIME,
                "started_at": _nullable(TIME),
                "ended_at": _nullable(TIME),
                "elapsed_s": _nullable(NUM),
                "eta_s": _nullable(NUM),
                "progress": _ref("Progress"),
                "metrics": _nullable(_obj({NONFINITE: _ref("Nonfinite")})),
                "result": _nullable(_ref("Result")),
                "log_tail": _nullable({"type": "array", "items": STR}),
                "tasks": _nullable({"type": "array", "items": _ref("Task")}),
                "source": _nullable(_ref("Source")),
                "environment": _nullable({"type": "object", "additionalProperties": STR}),
                "queue_position": _nullable(
                    {**INT, "description": "a queued job's place in line: 1 is the next a free worker of its kind runs"}
                ),
                "usage": _nullable(_ref("Usage")),
                "disk_bytes": _nullable(
                    {**INT, "description": "bytes of the job dir: measured every 30 s while it runs, and at its end"}
                ),
                "resumes": _nullable(
                    {**INT, "description": "a retry of a model job: the job whose last checkpoint it starts from"}
                ),
                "sweep_id": _nullable(
                    {**INT, "description": "the sweep that made this job (it also has a sweep:N tag)"}
                ),
            },
            ["id", "name", "status", "spec", "attempt", "created_at", "progress"],
        ),
        "Usage": {
            **_obj(
                {
                    "cpu_percent": _nullable(NUM),
                    "rss_bytes": INT,
                    "processes": INT,
                    "gpus": {
                        "type": "array",
                        "items": _obj(
                            {
                                "index": _nullable(INT),
                                "utilization": _nullable(NUM),
                                "memory_used_mib": _nullable(NUM),
                                "host": STR,
                            }
                        ),
                    },
                    "hosts": {"type": "array", "items": STR},
                    "sampled_at": NUM,
                },
                ["cpu_percent", "rss_bytes", "processes", "gpus", "hosts", "sampled_at"],
            ),
            "description": "what a starting or running job's processes use, sampled every 2 s on each host it runs "
            "on: CPU % of one core (summed; null on the first sample), resident memory, and per GPU its "
            "utilization and the memory the job's processes hold (from nvidia-smi)",
        },
        "Deleted": _obj(
            {"id": INT, "deleted": {"type": "boolean"}, "bytes_freed": INT}, ["id", "deleted", "bytes_freed"]
        ),
        "DeletedDataset": _obj(
            {"name": STR, "version": STR, "deleted": {"type": "boolean"}, "bytes_freed": INT},
            ["name", "version", "deleted", "bytes_freed"],
        ),
        "FileList": _obj(
            {
                "job_id": INT,
                "files": {
                    "type": "array",
                    "items": _obj({"path": STR, "size": INT, "modified": TIME}, ["path", "size", "modified"]),
                },
                "total_bytes": INT,
                "truncated": {"type": "boolean", "description": "more files than one listing answers (100,000)"},
            },
            ["job_id", "files", "total_bytes", "truncated"],
        ),
        "Task": _obj(
            {
                "index": INT,
                "type": {**STR, "enum": ["chief", "worker"]},
                "task_index": INT,
                "worker": _nullable(STR),
                "host": _nullable(STR),
                "gpu_ids": {"type": "array", "items": STR},
                "address": _nullable(STR),
                "pid": _nullable(INT),
                "status": {**STR, "enum": ["placed", "running", "succeeded", "failed", "stopped"]},
                "reason": _nullable(STR),
                "message": _nullable(STR),
            },
            ["index", "type", "task_index", "worker", "status"],
        ),
        "JobList": _obj(
            {"jobs": {"type": "array", "items": _ref("Job")}, "next_cursor": _nullable(INT)}, ["jobs", "next_cursor"]
        ),
        "MetricPoint": point,
        "Metrics": _obj(
            {
                "job_id": INT,
                "train": {"type": "array", "items": _ref("MetricPoint")},
                "validation": {"type": "array", "items": _ref("MetricPoint")},
            },
            ["job_id", "train", "validation"],
        ),
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
            },
            ["id", "job_ids", "jobs"],
        ),
        "SweepSummary": _obj(
            {
                "id": INT,
                "grid": {"type": "object"},
                "base": {"type": "object"},
                "owner": OWNER,
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
        "ModelList": _obj(
            {
                "models": {
                    "type": "array",
                    "items": _obj(
                        {
                            "name": STR,
                            "family": STR,
                            "input_shape": {"type": "array", "items": INT},
                            "parameters": INT,
                            "aliases": {"type": "array", "items": STR},
                            "params": {"type": "object"},
                        },
                        ["name", "family", "input_shape", "parameters", "params"],
                    ),
                },
                "recipes": {"type": "object"},
                "next_cursor": {"type": "null"},
            },
            ["models", "recipes"],
        ),
        "DatasetVersion": _obj(
            {
                "name": STR,
                "version": STR,
                "ref": STR,
                "format": STR,
                "files": INT,
                "size_bytes": INT,
                "created_at": TIME,
                "owner": OWNER,
            },
            ["name", "version", "ref", "format", "files", "size_bytes", "created_at"],
        ),
        "Dataset": _obj(
            {"name": STR, "latest": STR, "versions": {"type": "array", "items": _ref("DatasetVersion")}},
            ["name", "latest", "versions"],
        ),
        "DatasetList": _obj(
            {"datasets": {"type": "array", "items": _ref("Dataset")}, "next_cursor": {"type": "null"}},
            ["datasets", "next_cursor"],
        ),
        "Worker": _obj(
            {
                "name": STR,
                "host": STR,
                "pid": _nullable(INT),
                "gpus": {"type": "array", "items": STR},
                "queues": {"type": "array", "items": STR},
                "state": {**STR, "description": "RQ's state (idle, busy, …), or lost: it stopped beating"},
                "alive": {**BOOL, "description": "it beat in the last 10 s"},
                "job_id": _nullable(INT),
                "draining": BOOL,
                "last_heartbeat": _nullable(STR),
            },
            ["name", "host", "gpus", "queues", "state", "alive", "job_id", "draining"],
        ),
        "WorkerList": _obj(
            {"workers": {"type": "array", "items": _ref("Worker")}, "next_cursor": {"type": "null"}}, ["workers"]
        ),
        "Gpu": _obj(
            {
                "index": INT,
                "uuid": STR,
                "name": STR,
                **{
                    k: _nullable(NUM)
                    for k in (
                        "utilization",
                        "memory_used_mib",
                        "memory_total_mib",
                        "temperature_c",
                        "power_draw_w",
                        "power_limit_w",
                    )
                },
                "processes": {
                    "type": "array",
                    "items": _obj(
                        {"pid": INT, "name": STR, "used_memory_mib": _nullable(NUM), "job_id": _nullable(INT)},
                        ["pid", "job_id"],
                    ),
                },
                "held_by": _nullable(
                    {
                        **_obj({"job_id": INT, "owner": _nullable(STR)}, ["job_id", "owner"]),
                        "description": "the active job whose worker is pinned to this GPU, and who owns it",
                    }
                ),
            },
            ["index", "uuid", "name", "utilization", "memory_used_mib", "memory_total_mib", "processes"],
        ),
        "GpuHosts": _obj(
            {
                "hosts": {
                    "type": "array",
                    "items": _obj(
                        {"host": STR, "sampled_at": NUM, "gpus": {"type": "array", "items": _ref("Gpu")}},
                        ["host", "sampled_at", "gpus"],
                    ),
                },
                "next_cursor": {"type": "null"},
            },
            ["hosts"],
        ),
        "TensorBoardInput": _obj(
            {"jobs": {"type": "array", "items": {**INT, "minimum": 1}, "minItems": 1, "maxItems": 100}},
            ["jobs"],
            extra=False,
        ),
        "TensorBoard": _obj(
            {
                "url": {**STR, "format": "uri"},
                "port": INT,
                "host": STR,
                "jobs": {"type": "array", "items": INT},
                "runs": {"type": "array", "items": STR},
                "ssh_tunnel": STR,
                "started_at": TIME,
                "last_used_at": TIME,
                "reused": BOOL,
                "owner": OWNER,
            },
            ["url", "port", "host", "jobs", "runs", "ssh_tunnel"],
        ),
        "TensorBoardList": _obj(
            {"tensorboards": {"type": "array", "items": _ref("TensorBoard")}, "next_cursor": {"type": "null"}},
            ["tensorboards"],
        ),
        "Health": _obj(
            {
                "status": {**STR, "enum": ["ok", "degraded", "unavailable"]},
                "redis": STR,
                "workers": INT,
                "workers_alive": INT,
                "long_polls": {
                    **_obj(
                        {"open": INT, "limit": INT, "per_client": INT},
                        ["open", "limit", "per_client"],
                    ),
                    "description": "log follows and waits the answering API process holds, and its limits",
                },
                "command_jobs": {
                    "type": "boolean",
                    "description": "whether this API accepts command jobs (tokens on, or GPUDECK_COMMAND_JOBS=1)",
                },
                "disk": {
                    **_obj(
                        {
                            "path": STR,
                            "free_bytes": INT,
                            "total_bytes": INT,
                            "min_free_bytes": INT,
                            "low": {"type": "boolean"},
                        },
                        ["path", "free_bytes", "total_bytes", "min_free_bytes", "low"],
                    ),
                    "description": "space under GPUDECK_HOME; `low`: below GPUDECK_MIN_FREE, new jobs and uploads "
                    "are refused (507) and workers take no new job",
                },
            },
            ["status", "redis", "workers", "workers_alive", "long_polls", "command_jobs"],
        ),
        "WhoAmI": _obj(
            {
                "name": _nullable(STR),
                "role": {**STR, "enum": ["admin", "user"]},
                "auth": {
                    **STR,
                    "enum": ["named", "shared", "none"],
                    "description": "a named token, a GPUDECK_TOKENS one, or none configured (anyone may do anything)",
                },
                "max_gpus": _nullable(INT),
                "commands": _nullable({"type": "boolean"}),
            },
            ["name", "role", "auth"],
        ),
        "AuditTrail": _obj(
            {
                "entries": {
                    "type": "array",
                    "items": _obj(
                        {
                            "time": TIME,
                            "user": STR,
                            "address": STR,
                            "method": STR,
                            "path": STR,
                            "status": INT,
                            "detail": STR,
                        },
                        ["time", "user", "method", "path", "status"],
                    ),
                },
                "next_cursor": {"type": "null"},
            },
            ["entries"],
        ),
        "RetryInput": _obj(
            {
                "resume": {
                    "type": "boolean",
                    "description": "a model job starts from the last checkpoint the job left (default true); "
                    "false trains from the start",
                }
            },
            extra=False,
        ),
    }


def _json(schema: str, description: str = "OK", headers: dict | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}
    if headers:
        out["headers"] = headers
    return out


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "bad input; details name the field",
        401: "missing or wrong bearer token",
        403: "not allowed here, e.g. a path outside GPUDECK_DATA_ROOTS, or another user's job; the message says which "
        "rule refused it and how to allow it",
        404: "no such resource (or a spec whose one problem is a dataset that does not exist)",
        409: "conflicts with the resource's state",
        413: "body or archive over a limit",
        422: "well-formed but refused",
        429: "too many concurrent streams, or too many bad tokens from this address (Retry-After: when to try again)",
        503: "Redis or a started service unavailable (`redis_cannot_write`: Redis cannot save to its disk and refuses "
        "writes; nothing was changed)",
        507: "less than GPUDECK_MIN_FREE is free under GPUDECK_HOME: new jobs and uploads wait for room (the message "
        "says how much is free and what to delete)",
    }
    return {str(c): {"description": text[c], "content": {"application/json": {"schema": _ref("Error")}}} for c in codes}


def _list_of(words: list[str]) -> str:
    """A pattern for a comma-separated list of `words` (spaces and empty items allowed, as the server reads it)."""
    one = f"\\s*(?:(?:{'|'.join(words)})\\s*)?"
    return f"^{one}(?:,{one})*$"


def _q(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _path_id(name: str = "id") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {**INT, "minimum": 0}}


def _op(summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": {**responses, **_errors(401, 429), **URI_TOO_LONG}, **extra}


URI_TOO_LONG = {
    "414": {
        "description": "the request line is over 4,094 bytes (gunicorn answers before the API sees it)",
        "content": {"text/html": {"schema": STR}},
    }
}


JOB_LINKS = {
    name: {
        "operationRef": f"#/paths/~1api~1v1~1jobs~1{{id}}{tail.replace('/', '~1')}/{method}",
        "parameters": {"id": "$response.body#/id"},
        "description": f"{method.upper()} /api/v1/jobs/{{id}}{tail} of the job just submitted",
    }
    for name, tail, method in (
        ("GetJob", "", "get"),
        ("CancelJob", "/cancel", "post"),
        ("RetryJob", "/retry", "post"),
        ("JobLogs", "/logs", "get"),
        ("JobMetrics", "/metrics", "get"),
        ("WaitJob", "/wait", "get"),
    )
}
"""From a submitted job to the routes of that job (generated clients and stateful testing follow them)."""

NEXT_OFFSET = {
    "X-Next-Offset": {
        "description": "the offset to resume from (follow: the start; add the lines received)",
        "schema": INT,
    }
}


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(schema)}}}


def _paths() -> dict[str, Any]:
    job = [_path_id()]
    text = {"text/plain": {"schema": STR}}
    return {
        "/api/v1/jobs": {
            "post": _op(
                "Submit a job",
                {
                    "201": {**_json("Job", "created", {"Location": {"schema": STR}}), "links": JOB_LINKS},
                    "200": {
                        **_json("Job", "replayed for an Idempotency-Key seen in the last 24 h"),
                        "links": JOB_LINKS,
                    },
                    **_errors(400, 403, 404, 409, 413, 422, 503, 507),
                },
                parameters=[
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "schema": {**STR, "minLength": 1, "maxLength": 255},
                    }
                ],
                requestBody=_body("JobSpecInput"),
            ),
            "get": _op(
                "List jobs, newest first",
                {
                    "200": _json("JobList", "a page, with an ETag", {"ETag": {"schema": STR}}),
                    "304": {"description": "the page is the same as the one whose ETag the If-None-Match named"},
                    **_errors(400),
                },
                parameters=[
                    _q("status", {**STR, "pattern": _list_of([s.value for s in Status])}, "comma-separated statuses"),
                    _q("model", STR, "model name"),
                    _q("tag", STR, "a tag the job has"),
                    _q("owner", STR, "jobs of this token name (`me`: this request's)"),
                    _q("limit", {**INT, "minimum": 1, "maximum": MAX_PAGE}, "page size (50)"),
                    _q("cursor", {**INT, "minimum": 0, "maximum": MAX_OFFSET}, "next_cursor of the previous page"),
                ],
            ),
        },
        "/api/v1/jobs/{id}": {
            "get": _op("One job", {"200": _json("Job"), **_errors(404)}, parameters=job),
            "delete": _op(
                "Delete an ended job for good: its record, log, metrics, references and job dir",
                {"200": _json("Deleted"), **_errors(403, 404, 409)},
                parameters=job,
            ),
        },
        "/api/v1/jobs/{id}/cancel": {
            "post": _op("Cancel a job", {"200": _json("Job"), **_errors(403, 404, 409)}, parameters=job)
        },
        "/api/v1/jobs/{id}/retry": {
            "post": _op(
                "Submit an ended job again; a model job resumes from the last checkpoint the job left",
                {"201": _json("Job"), **_errors(400, 403, 404, 409, 507)},
                parameters=job,
                requestBody={
                    "required": False,
                    "content": {"application/json": {"schema": _ref("RetryInput")}},
                },
            )
        },
        "/api/v1/jobs/{id}/wait": {
            "get": _op(
                "Answer when the job ends or the timeout passes",
                {"200": _json("Job"), **_errors(400, 404)},
                parameters=[*job, _q("timeout", {**INT, "minimum": 0, "maximum": MAX_WAIT_S}, "seconds (60)")],
            )
        },
        "/api/v1/jobs/{id}/logs": {
            "get": _op(
                "Log lines after offset; follow=1 streams until the job ends",
                {
                    "200": {"description": "log lines", "headers": NEXT_OFFSET, "content": text},
                    **_errors(400, 404, 429),
                },
                parameters=[
                    *job,
                    _q("offset", {**INT, "minimum": 0, "maximum": MAX_OFFSET}, "lines already read"),
                    _q("follow", {**STR, "enum": ["0", "1", "true", "false", "yes", "no"]}, "stream"),
                ],
            )
        },
        "/api/v1/jobs/{id}/files": {
            "get": _op(
                "The files of a job's dir (recursive, by path)",
                {"200": _json("FileList"), **_errors(400, 404)},
                parameters=[*job, _q("prefix", STR, "only paths starting with this, e.g. checkpoints/")],
            )
        },
        "/api/v1/jobs/{id}/files/{path}": {
            "get": _op(
                "One file of a job's dir (ranges: a broken download resumes), or a folder as a .tar.gz",
                {
                    "200": {
                        "description": "the file (Content-Length, ETag, Accept-Ranges), or the folder's archive",
                        # bytes (3.1: no schema), typed by the file's name: application/octet-stream when unknown
                        "content": {"application/octet-stream": {}, "application/gzip": {}, "*/*": {}},
                    },
                    "206": {
                        "description": "the bytes a Range header asked for",
                        "content": {"application/octet-stream": {}, "*/*": {}},
                    },
                    "304": {"description": "unchanged since the ETag of If-None-Match"},
                    "416": {"description": "the Range asked for is past the end of the file"},
                    **_errors(400, 404),
                },
                parameters=[
                    *job,
                    {
                        "name": "path",
                        "in": "path",
                        "required": True,
                        "schema": STR,
                        "description": "relative to the job dir (slashes allowed; no '..', no absolute path)",
                    },
                    _q("archive", {**STR, "enum": ["tar.gz"]}, "a folder as one .tar.gz, streamed"),
                ],
            )
        },
        "/api/v1/jobs/{id}/metrics": {
            "get": _op(
                "Metric points (JSON or CSV)",
                {
                    "200": {
                        "description": "metric series",
                        "content": {"application/json": {"schema": _ref("Metrics")}, "text/csv": {}},
                    },
                    **_errors(400, 404),
                },
                parameters=[*job, _q("format", {**STR, "enum": ["json", "csv"]}, "json (default) or csv")],
            )
        },
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
        "/api/v1/models": {"get": _op("The model zoo", {"200": _json("ModelList")})},
        "/api/v1/datasets": {
            "get": _op("Uploaded datasets", {"200": _json("DatasetList")}),
            "post": _op(
                "Upload an archive as name:version",
                {"201": _json("DatasetVersion"), **_errors(400, 409, 413, 422, 507)},
                requestBody={
                    "required": True,
                    "content": {
                        "multipart/form-data": {
                            "schema": _obj(
                                {
                                    "name": {**STR, "pattern": f"^{NAME}$", "not": {"const": "synthetic"}},
                                    "version": {**STR, "pattern": f"^{NAME}$"},
                                    "file": {**STR, "contentMediaType": "application/gzip"},
                                },
                                ["name", "version", "file"],
                                extra=False,
                            )
                        }
                    },
                },
            ),
        },
        "/api/v1/datasets/{name}": {
            "get": _op(
                "One dataset's versions",
                {"200": _json("Dataset"), **_errors(404)},
                parameters=[{"name": "name", "in": "path", "required": True, "schema": STR}],
            )
        },
        "/api/v1/datasets/{name}/{version}": {
            "delete": _op(
                "Delete a dataset version: its files and entry (409 naming the queued or running jobs that use it)",
                {"200": _json("DeletedDataset"), **_errors(400, 403, 404, 409)},
                parameters=[
                    {"name": "name", "in": "path", "required": True, "schema": STR},
                    {"name": "version", "in": "path", "required": True, "schema": STR},
                ],
            )
        },
        "/api/v1/sources": {
            "post": _op(
                "Store a source folder (tar in any compression, or zip) by the sha256 of its content",
                {
                    "201": _json("Source", "stored", {"Location": {"schema": STR}}),
                    "200": _json("Source", "this tree was already stored", {"Location": {"schema": STR}}),
                    **_errors(400, 413, 422, 507),
                },
                requestBody={
                    "required": True,
                    "content": {
                        "multipart/form-data": {
                            "schema": _obj(
                                {
                                    "file": {**STR, "contentMediaType": "application/gzip"},
                                    "git_commit": {**STR, "pattern": f"^({GIT_COMMIT.pattern})?$"},
                                    "git_dirty": {**STR, "enum": ["true", "false", "1", "0", ""]},
                                },
                                ["file"],
                                extra=False,
                            )
                        }
                    },
                },
            ),
        },
        "/api/v1/sources/{ref}": {
            "get": _op(
                "One stored source",
                {"200": _json("Source"), **_errors(400, 404)},
                parameters=[
                    {"name": "ref", "in": "path", "required": True, "schema": {**STR, "pattern": f"^{REF.pattern}$"}}
                ],
            )
        },
        "/api/v1/workers": {"get": _op("Live workers", {"200": _json("WorkerList")})},
        "/api/v1/workers/{name}/drain": {
            "post": _op(
                "Finish the current job, take no new one, exit",
                {"200": {"description": "draining", "content": {"application/json": {"schema": {"type": "object"}}}}}
                | _errors(403, 404),
                parameters=[{"name": "name", "in": "path", "required": True, "schema": STR}],
            )
        },
        "/api/v1/gpus": {"get": _op("nvidia-smi stats per host and GPU", {"200": _json("GpuHosts")})},
        "/api/v1/tensorboard": {
            "post": _op(
                "Start or reuse a TensorBoard over these jobs",
                {
                    "201": _json("TensorBoard", "started"),
                    "200": _json("TensorBoard", "reused"),
                    **_errors(400, 404, 503),
                },
                requestBody=_body("TensorBoardInput"),
            ),
            "get": _op("Running TensorBoards of this host", {"200": _json("TensorBoardList")}),
        },
        "/api/v1/tensorboard/{port}": {
            "delete": _op(
                "Stop a TensorBoard",
                {"204": {"description": "stopped"}, **_errors(403, 404)},
                parameters=[_path_id("port")],
            )
        },
        "/api/v1/whoami": {"get": _op("Who this request's token is", {"200": _json("WhoAmI")})},
        "/api/v1/audit": {
            "get": _op(
                "State-changing requests, newest first (admins; recorded where tokens are configured)",
                {"200": _json("AuditTrail"), **_errors(400, 403)},
                parameters=[
                    _q("user", STR, "only this token name's"),
                    _q("since", {**STR, "pattern": AGE.pattern}, "only the last 30d, 12h, …"),
                    _q("limit", {**INT, "minimum": 1, "maximum": MAX_AUDIT}, "most entries (100)"),
                ],
            )
        },
        "/api/v1/openapi.json": {
            "get": _op(
                "This document",
                {
                    "200": {
                        "description": "OpenAPI 3.1",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            )
        },
        "/healthz": {
            "get": {
                "summary": "Redis reachable, workers alive (no token needed)",
                "security": [],
                "responses": {"200": _json("Health"), "503": _json("Health", "Redis unreachable")},
            }
        },
        "/metrics": {
            "get": _op(
                "Prometheus text: jobs by status, queue lengths, workers, GPU utilization and memory",
                {"200": {"description": "Prometheus exposition format", "content": text}},
            )
        },
    }


def document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "gpudeck",
            "version": VERSION,
            "description": "Training jobs on GPU machines: submit, watch, cancel; datasets; TensorBoard. "
            "Errors are {error, message, details}. With GPUDECK_TOKENS set, every route but /healthz needs "
            "Authorization: Bearer <token>.",
        },
        "servers": [{"url": DEFAULT_API}],
        "security": [{"bearer": []}],
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


@bp.get("/api/v1/openapi.json")
def openapi():
    return document()
