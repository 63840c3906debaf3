"""Pieces every part of the OpenAPI document uses: schema helpers, the common types, the error answers and
the forms of a job's fields the code validates with (so the document and the code cannot drift apart)."""

from __future__ import annotations

import re
from typing import Any

from jobs.keys import PRIORITIES
from jobs.spec import (
    ENV_NAME,
    INJECTED,
    MAX_AFTER,
    MAX_COMMAND,
    MAX_GPUS,
    MAX_TIMEOUT_S,
    MAX_TOTAL_STEPS,
    MAX_WORKERS,
)
from models.catalog import ALIASES, MODELS, NAME
from models.params import AUGMENT_PARTS, PARAMS
from models.sourcetree import REF

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

NULL_IS_DEFAULT = (
    "gpus",
    "name",
    "tags",
    "priority",
    "max_retries",
    "workers",
    "chief",
    "env",
    "secret_env",
    "dataset",
    "after",
    "preemptible",
    "notify",
)
"""Optional spec fields a null stands for the default of (the others are nullable in the spec itself)."""

STR, INT, NUM, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
TIME = {"type": "string", "format": "date-time"}
"""Every date-time in one form: RFC 3339 in UTC with milliseconds, 2026-11-24T15:17:02.123Z (jobs.store.iso)."""
UNIX_S = {"type": "number", "description": "unix time, seconds (a sample's clock, for arithmetic, not a date)"}


OWNER = _nullable({**STR, "description": "the name of the token that made it (null: no named tokens then)"})


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


def spec_props() -> dict[str, Any]:
    """Every field of a job spec, as the code validates it (jobs.spec, models.params)."""
    params = {
        **_obj({k: _param_schema(k) for k in PARAMS}, extra=False),
        "not": {"required": ["epochs", "steps"]},  # one or the other
    }
    return {
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
        "secret_env": {
            "type": "object",
            "description": "variables like env whose values are never shown (names only, values ***) nor written "
            "to the job dir",
            "propertyNames": {"pattern": f"^{ENV_NAME.pattern}$"},
            "additionalProperties": STR,
        },
        "env_name": _nullable({**STR, "description": "an environment registered with GPUDECK_ENVS"}),
        "total_steps": _nullable(
            {**INT, "minimum": 1, "maximum": MAX_TOTAL_STEPS, "description": "for progress and ETA of a command job"}
        ),
        "after": {
            "type": "array",
            "maxItems": MAX_AFTER,
            "items": {**INT, "minimum": 1},
            "description": "job ids this job waits for: it starts once all succeeded, and is canceled "
            "(dependency_failed) when one fails or is canceled",
        },
        "preemptible": {
            **BOOL,
            "description": "false: never stopped to make room for a higher-priority job (only an admin may say so "
            "when tokens are configured); default true",
        },
        "requirements": _nullable(
            {
                **STR,
                "description": "a requirements file in the source to build the job's environment from (default: "
                "the source's uv.lock with pyproject.toml, else its requirements.txt)",
            }
        ),
        "isolated_env": {**BOOL, "description": "its built environment does not see the worker's packages"},
        "notify": {
            "type": "array",
            "maxItems": 10,
            "items": {**STR, "pattern": "^[A-Za-z0-9_-]{1,40}(:[a-z_]+(,[a-z_]+)*)?$"},
            "description": "the operator's endpoints (GPUDECK_WEBHOOKS) told when the job ends: `lab`, or "
            "`lab:failed,canceled` (events: succeeded, failed, canceled, stopped_early, any)",
        },
        "kind": {
            **STR,
            "enum": ["session"],
            "description": "session: an interactive shell (or a notebook: jupyter) on a worker, released when idle",
        },
        "jupyter": {**BOOL, "description": "a session runs Jupyter (Lab, else Server) instead of a shell"},
        "idle": {
            "description": "a session ends (reason idle) after this long with nobody attached and its GPUs under 5% "
            "(default 30m, at most GPUDECK_SESSION_IDLE_MAX): seconds or an age (30m)",
            "anyOf": [{**INT, "minimum": 1}, {**STR, "pattern": "^[0-9]+[smhdw]$"}],
        },
        "max": {
            "description": "a session ends (reason timeout) after this long (default 8h): seconds or an age (8h)",
            "anyOf": [{**INT, "minimum": 60}, {**STR, "pattern": "^[0-9]+[smhdw]$"}],
        },
        "expected_duration": _nullable(
            {
                "description": "how long the job is expected to run, seconds or an age (20m): the scheduler lets it "
                "start early in a gap another job's reservation leaves when it ends in time (backfill); it is never "
                "stopped for running longer (timeout does that)",
                "anyOf": [{**INT, "minimum": 1, "maximum": MAX_TIMEOUT_S}, {**STR, "pattern": "^[0-9]+[smhdw]$"}],
            }
        ),
        "checkpoint_every": {
            "description": "a model job also checkpoints every N steps, or every duration (90s, 5m): a preempted "
            "job loses at most that much",
            "anyOf": [{**INT, "minimum": 1}, {**STR, "pattern": "^[0-9]+[smhdw]$"}],
        },
    }
