"""Pieces every part of the OpenAPI document uses: schema helpers, the common types, the error answers and
the forms of a job's fields the code validates with (so the document and the code cannot drift apart)."""

from __future__ import annotations

from typing import Any

from jobs import spec as spec_mod

VERSION = "1.0.0"


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
        501: "not with this server's backend (a session on Slurm: GPUDECK_BACKEND=slurm); the message says why",
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


def _untitled(node: Any) -> Any:
    """A pydantic JSON Schema without the titles it makes up from field names (a generator names types by them)."""
    if isinstance(node, dict):
        return {k: _untitled(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_untitled(v) for v in node]
    return node


def spec_schemas() -> dict[str, Any]:
    """Each kind of job spec a client submits, as jobs.spec declares it (pydantic's JSON Schema)."""
    return {
        cls.__name__: _untitled(cls.model_json_schema(ref_template="#/components/schemas/{model}"))
        for cls in spec_mod.KINDS.values()
    }


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's schema without its null (a null stands for the field's default)."""
    ways = schema.get("anyOf")
    if ways and {"type": "null"} in ways:
        rest = [w for w in ways if w != {"type": "null"}]
        out = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        return {**out, **rest[0]} if len(rest) == 1 else {**out, "anyOf": rest}
    return {k: v for k, v in schema.items() if k != "default"}


def field_schemas() -> dict[str, Any]:
    """Every field of a job spec of any kind -> its schema (not null), from the first kind that declares it."""
    out: dict[str, Any] = {}
    for schema in spec_schemas().values():
        for name, prop in schema["properties"].items():
            out.setdefault(name, _not_null(prop))
    return out
