"""The OpenAPI document's part for schedules."""

from __future__ import annotations

from typing import Any

from api.openapi.base import STR, _body, _errors, _json, _op
from models.scheduleinput import NAME_PATTERN

NAME = [{"name": "name", "in": "path", "required": True, "schema": {**STR, "pattern": NAME_PATTERN}}]


def paths() -> dict[str, Any]:
    """The paths of schedules."""
    return {
        "/api/v1/schedules": {
            "post": _op(
                "A schedule: a job (or a sweep) made at each firing of a cron expression, as this token's user",
                {"201": _json("Schedule"), **_errors(400, 403, 404, 409, 507)},
                requestBody=_body("ScheduleInput"),
            ),
            "get": _op("Every schedule", {"200": _json("ScheduleList"), **_errors(400)}),
        },
        "/api/v1/schedules/{name}": {
            "get": _op("A schedule and its last firings", {"200": _json("Schedule"), **_errors(404)}, parameters=NAME),
            "delete": _op(
                "Delete a schedule (the jobs it made stay)",
                {"204": {"description": "deleted"}, **_errors(403, 404)},
                parameters=NAME,
            ),
        },
        "/api/v1/schedules/{name}/pause": {
            "post": _op("No firing until resumed", {"200": _json("Schedule"), **_errors(403, 404)}, parameters=NAME)
        },
        "/api/v1/schedules/{name}/resume": {
            "post": _op(
                "Firing again, from its next time after now",
                {"200": _json("Schedule"), **_errors(403, 404)},
                parameters=NAME,
            )
        },
    }
