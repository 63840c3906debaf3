"""Request-time access to what create_app put in app.extensions."""

from __future__ import annotations

import json
from typing import Any

from flask import current_app, request
from redis import Redis

from jobs.errors import BadRequest
from jobs.settings import Settings
from jobs.store import JobStore


def redis() -> Redis:
    """The app's Redis client."""
    return current_app.extensions["gpudeck.redis"]


def settings() -> Settings:
    """The app's Settings."""
    return current_app.extensions["gpudeck.settings"]


def store() -> JobStore:
    """A JobStore on the app's Redis."""
    return JobStore(redis())


def json_body() -> Any:
    """The request's JSON body, or BadRequest saying why it is not one."""
    if not request.is_json:
        raise BadRequest(
            f"the body must be JSON with Content-Type: application/json (got {request.mimetype or 'none'})"
        )
    body = request.get_json(silent=True)
    if body is None:
        raise BadRequest("the body is not valid JSON")
    return without_lone_surrogates(body)


def without_lone_surrogates(value: Any) -> Any:
    """`value` with every lone UTF-16 surrogate (JSON lets "\\ud890" through; no text can hold it, and Redis
    cannot store it) replaced by U+FFFD, in keys and values at any depth."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass

    def clean(v: Any) -> Any:
        if isinstance(v, str):
            return v.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        if isinstance(v, list):
            return [clean(x) for x in v]
        if isinstance(v, dict):
            return {clean(k): clean(x) for k, x in v.items()}
        return v

    return clean(value)


def int_arg(name: str, default: int, lo: int, hi: int) -> int:
    """An integer query argument within [lo, hi], or BadRequest naming it."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query argument {name} must be an integer, got {raw!r}", {"field": name}) from None
    if not lo <= value <= hi:
        raise BadRequest(f"query argument {name} must be between {lo} and {hi}, got {value}", {"field": name})
    return value


def only_args(given, allowed: tuple[str, ...], where: str = "query argument") -> None:
    """Refuse any key of `given` (query args, form fields) not in `allowed`, by name."""
    unknown = [k for k in given if k not in allowed]
    if unknown:
        raise BadRequest(
            f"unknown {where} {unknown[0]!r}; accepted: {', '.join(allowed) or 'none'}",
            {"field": unknown[0], "accepted": list(allowed)},
        )


def bool_arg(name: str) -> bool:
    """A boolean query argument (1/true/yes, 0/false/no; absent is false), or BadRequest naming it."""
    raw = (request.args.get(name) or "0").lower()
    if raw not in ("1", "true", "yes", "0", "false", "no"):
        raise BadRequest(f"query argument {name} must be 1 or 0 (true/false), got {raw!r}", {"field": name})
    return raw in ("1", "true", "yes")


def upload_stream(name: str = "file") -> Any:
    """The uploaded archive of multipart field `name`: a file part, or a plain field (a client that sends the
    bytes without a filename, as generated clients do); None when absent."""
    from io import BytesIO

    f = request.files.get(name)
    if f is not None:
        return f.stream
    value = request.form.get(name)
    return None if value is None else BytesIO(value.encode("utf-8", "surrogateescape"))
