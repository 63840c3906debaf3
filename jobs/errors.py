"""Domain exceptions, one line each; the API maps them to status codes in one place."""

from __future__ import annotations

from typing import Any


class GpudeckError(Exception):
    """Base of every error gpudeck raises on purpose."""

    code = "error"

    def __init__(self, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.details = details or {}


class ConfigError(GpudeckError):
    """The environment or the command line asks for something impossible."""

    code = "config_error"


class ValidationError(GpudeckError):
    """A job spec (or another input) is invalid; `details["fields"]` maps field path -> problem."""

    code = "validation_error"

    def __init__(self, fields: dict[str, str]):
        first = next(iter(fields.items()))
        more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
        super().__init__(f"{first[0]}: {first[1]}{more}", {"fields": fields})
        self.fields = fields


class ReferenceNotFound(ValidationError):
    """A well-formed spec whose one problem is a reference to what does not exist (an uploaded dataset or
    version): the API answers 404, with the same `details["fields"]`."""

    code = "not_found"


class ReferenceForbidden(ValidationError):
    """A well-formed spec whose one problem is a server path the operator has not allowed (outside
    GPUDECK_DATA_ROOTS): the API answers 403, with the same `details["fields"]`."""

    code = "forbidden"


class BadRequest(GpudeckError):
    """A request is malformed: not JSON, a bad query argument."""

    code = "bad_request"


class Forbidden(GpudeckError):
    """The request is understood but not allowed here (how to allow it is in the message)."""

    code = "forbidden"


class NotFound(GpudeckError):
    """The job (or other object) does not exist."""

    code = "not_found"


class Unprocessable(GpudeckError):
    """Well-formed but not acceptable, such as an Idempotency-Key reused with another body."""

    code = "unprocessable"


class Conflict(GpudeckError):
    """The request does not fit the object's current state."""

    code = "conflict"


class InsufficientStorage(GpudeckError):
    """Less than GPUDECK_MIN_FREE is free under GPUDECK_HOME: new jobs and uploads wait for space."""

    code = "insufficient_storage"


class TooLarge(GpudeckError):
    """An upload (or its expanded contents) passes a configured size or file-count limit."""

    code = "too_large"


class TooMany(GpudeckError):
    """A resource with a concurrency cap is at its cap; try again later."""

    code = "too_many_requests"


class NotImplementedHere(GpudeckError):
    """What this gpudeck does elsewhere but not with its backend (a session on Slurm): the message says why."""

    code = "not_implemented"


class Unavailable(GpudeckError):
    """A service gpudeck starts (TensorBoard) could not be started or reached."""

    code = "unavailable"
