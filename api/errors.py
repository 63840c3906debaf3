"""One error shape for every error: {"error": code, "message": sentence, "details": {...}}."""

from __future__ import annotations

import errno
import logging

from flask import Flask, jsonify, request
from redis.exceptions import RedisError
from werkzeug.exceptions import HTTPException

from jobs import store
from jobs.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    Forbidden,
    GpudeckError,
    InsufficientStorage,
    NotFound,
    NotImplementedHere,
    ReferenceForbidden,
    ReferenceNotFound,
    TooLarge,
    TooMany,
    Unavailable,
    Unprocessable,
    ValidationError,
)

log = logging.getLogger(__name__)

STATUS = {
    ReferenceNotFound: 404,  # before ValidationError, their base: the first match decides
    ReferenceForbidden: 403,
    ValidationError: 400,
    BadRequest: 400,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    TooLarge: 413,
    Unprocessable: 422,
    TooMany: 429,
    InsufficientStorage: 507,
    ConfigError: 500,
    Unavailable: 503,
    NotImplementedHere: 501,
}
"""HTTP status of each domain exception; the one place where they are mapped."""


def error_response(status: int, code: str, message: str, details: dict | None = None):
    """A JSON error answer."""
    return jsonify({"error": code, "message": message, "details": details or {}}), status


def register(app: Flask) -> None:
    """Install the handlers that turn every exception into the one error shape."""

    @app.errorhandler(GpudeckError)
    def domain_error(exc: GpudeckError):
        status = next((s for cls, s in STATUS.items() if isinstance(exc, cls)), 500)
        body, status = error_response(status, exc.code, exc.message, exc.details)
        retry = (exc.details or {}).get("retry_after_s")
        return body, status, {"Retry-After": str(retry)} if retry is not None else {}

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        code = (exc.name or "error").lower().replace(" ", "_")
        body, status = error_response(exc.code or 500, code, exc.description or exc.name)
        # Keep what the exception says in headers: a 405's Allow (RFC 9110), a 413's, …
        headers = {k: v for k, v in exc.get_headers() if k.lower() != "content-type"}
        return body, status, headers

    @app.errorhandler(RedisError)
    def redis_down(exc: RedisError):
        log.error("redis error: %s", exc)
        if store.cannot_write(exc):
            return error_response(
                503,
                "redis_cannot_write",
                f"the job store (Redis) refuses writes because it cannot save to its disk ({exc}); nothing was "
                "changed. Free space where Redis keeps its data (under GPUDECK_HOME for `gpudeck up`); it takes "
                "writes again by itself once it can save",
            )
        return error_response(503, "redis_unavailable", f"the job store (Redis) is unavailable: {exc}")

    @app.errorhandler(OSError)
    def no_space(exc: OSError):
        """The disk filled up during the request (an upload above the floor when it began): 507, as below it."""
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            return unexpected(exc)
        log.error("no space left during %s %s: %s", request.method, request.path, exc)
        return error_response(
            507,
            "insufficient_storage",
            "the disk under GPUDECK_HOME filled up during this request; nothing of it was kept. Delete ended jobs "
            "(gpudeck rm --status failed,canceled --older-than 7d) or datasets, then try again",
        )

    @app.errorhandler(OverflowError)
    def overflow(exc: OverflowError):
        """A number no field's check caught beyond a float (10**400): bad input, never a 500 (issue 62 #8)."""
        log.warning("a number too large reached %s %s: %s", request.method, request.path, exc)
        return error_response(400, "bad_request", f"a number in the request is too large ({exc})")

    @app.errorhandler(Exception)
    def unexpected(exc: Exception):
        log.exception("unhandled error")
        return error_response(500, "internal_error", "an internal error occurred; see the API log")
