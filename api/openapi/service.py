"""The OpenAPI document's part for the service: errors, workers, GPUs, TensorBoards, health, who and the audit."""

from __future__ import annotations

from typing import Any

from api.openapi.base import (
    INT,
    STR,
    _body,
    _errors,
    _json,
    _obj,
    _op,
    _path_id,
    _q,
)
from api.users import MAX_AUDIT
from jobs.accounts import BY, PERIODS
from jobs.settings import AGE


def paths() -> dict[str, Any]:
    """The paths of the service: errors, workers, GPUs, TensorBoards, health, who and the audit."""
    text = {"text/plain": {"schema": STR}}
    return {
        "/api/v1/workers": {"get": _op("Live workers", {"200": _json("WorkerList")})},
        "/api/v1/envs": {"get": _op("The projects' Python environments built on this host", {"200": _json("EnvList")})},
        "/api/v1/workers/{name}/drain": {
            "post": _op(
                "Finish the current job, take no new one, exit",
                {"200": {"description": "draining", "content": {"application/json": {"schema": {"type": "object"}}}}}
                | _errors(403, 404),
                parameters=[{"name": "name", "in": "path", "required": True, "schema": STR}],
            )
        },
        "/api/v1/gpus": {"get": _op("nvidia-smi stats per host and GPU", {"200": _json("GpuHosts")})},
        "/api/v1/doctor": {
            "get": _op("What each worker host says of itself (gpudeck doctor)", {"200": _json("Doctor")} | _errors(403))
        },
        "/api/v1/gpus/{host}/{gpu}/cordon": {
            "post": _op(
                "Take a GPU out of service by hand (no job is placed on it until it is uncordoned)",
                {"200": {"description": "cordoned", "content": {"application/json": {"schema": {"type": "object"}}}}}
                | _errors(400, 403, 404, 409),
                parameters=[
                    {"name": "host", "in": "path", "required": True, "schema": STR},
                    {"name": "gpu", "in": "path", "required": True, "schema": STR},
                ],
                requestBody={
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": _obj(
                                {"reason": {**STR, "maxLength": 300, "description": "why, for the others"}}, []
                            )
                        }
                    },
                },
            )
        },
        "/api/v1/gpus/{host}/{gpu}/uncordon": {
            "post": _op(
                "Put a GPU a hardware error cordoned back in service",
                {"200": {"description": "uncordoned", "content": {"application/json": {"schema": {"type": "object"}}}}}
                | _errors(403, 404),
                parameters=[
                    {"name": "host", "in": "path", "required": True, "schema": STR},
                    {"name": "gpu", "in": "path", "required": True, "schema": STR},
                ],
            )
        },
        "/api/v1/line": {
            "get": _op(
                "The queued jobs in the order the scheduler reads them",
                {"200": _json("Line"), **_errors(400)},
                parameters=[_q("limit", {**INT, "minimum": 1, "maximum": 500}, "the first N (20)")],
            )
        },
        "/api/v1/share": {
            "get": _op("Fair share: each owner's decayed usage and what they hold", {"200": _json("Share")})
        },
        "/api/v1/usage": {
            "get": _op(
                "The accounts: GPU-hours, idle GPU-hours, jobs by end state and queue waits of the jobs that ended "
                "in a range (deleted ones too), per owner and period",
                {"200": _json("Accounts"), **_errors(400)},
                parameters=[
                    _q("since", STR, "a date (2026-11-01, UTC), a date-time with its zone, or an age (30d): 30d"),
                    _q("until", STR, "the same (default now); the range ends before it"),
                    _q("by", {**STR, "enum": list(BY)}, "user (default): a row per owner; none: totals"),
                    _q("period", {**STR, "enum": list(PERIODS)}, "day, week, month or all (default)"),
                ],
            )
        },
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
