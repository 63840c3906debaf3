"""The OpenAPI document's part for the service: errors, workers, GPUs, TensorBoards, health, who and the audit."""

from __future__ import annotations

from typing import Any

from api.openapi.base import (
    BOOL,
    INT,
    NUM,
    OWNER,
    STR,
    TIME,
    UNIX_S,
    _body,
    _errors,
    _json,
    _nullable,
    _obj,
    _op,
    _path_id,
    _q,
    _ref,
)
from api.users import MAX_AUDIT
from jobs.keys import PRIORITIES
from jobs.settings import AGE


def schemas() -> dict[str, Any]:
    """The components/schemas of the service: errors, workers, GPUs, TensorBoards, health, who and the audit."""
    return {
        "EnvList": _obj(
            {
                "envs": {
                    "type": "array",
                    "items": _obj(
                        {
                            "digest": STR,
                            "path": STR,
                            "size_bytes": INT,
                            "kind": {**STR, "enum": ["requirements", "uv.lock"]},
                            "packages": INT,
                            "isolated": BOOL,
                            "python": STR,
                            "built_at": UNIX_S,
                            "built_by": INT,
                            "last_used": _nullable(UNIX_S),
                            "jobs": {"type": "array", "items": INT, "description": "the newest 20 that used it"},
                        }
                    ),
                }
            },
            ["envs"],
        ),
        "Error": _obj(
            {"error": STR, "message": STR, "details": {"type": "object"}}, ["error", "message", "details"], extra=False
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
                "last_heartbeat": _nullable(TIME),
                "sandboxed": {**_nullable(BOOL), "description": "whether its jobs run in a bubblewrap sandbox"},
                "isolation": {**_nullable(STR), "description": "how its jobs are isolated, as it said at start"},
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
                        {
                            "pid": INT,
                            "name": STR,
                            "used_memory_mib": _nullable(NUM),
                            "job_id": _nullable(INT),
                            "user": _nullable({**STR, "description": "who runs it (a foreign process: no job_id)"}),
                            "left_by": _nullable(
                                {**INT, "description": "the job this process outlived (it still holds memory)"}
                            ),
                            "left_since": _nullable({**NUM, "description": "when it was first seen so (Unix s)"}),
                        },
                        ["pid", "job_id"],
                    ),
                },
                "held_by": _nullable(
                    {
                        **_ref("GpuHolder"),
                        "description": "the first of `holders` (null: nobody holds it)",
                    }
                ),
                "cordoned": _nullable(
                    {
                        **_obj({"xid": INT, "at": NUM, "text": STR}, ["xid", "at"]),
                        "description": "out of service after a hardware error (the kernel log's XID), until an "
                        "admin uncordons it",
                    }
                ),
                "holders": {
                    "type": "array",
                    "items": _ref("GpuHolder"),
                    "description": "the active jobs on this GPU: one that holds it whole, or the jobs sharing it "
                    "(each with its gpu_memory)",
                },
            },
            ["index", "uuid", "name", "utilization", "memory_used_mib", "memory_total_mib", "processes"],
        ),
        "Doctor": _obj(
            {
                "hosts": {
                    "type": "array",
                    "items": _obj(
                        {
                            "host": STR,
                            "workers": INT,
                            "gpus": {"type": "array", "items": STR},
                            "driver": _nullable({**STR, "description": "the NVIDIA driver (null: no nvidia-smi)"}),
                            "mps_installed": _nullable({"type": "boolean"}),
                            "mps": _nullable({"type": "boolean", "description": "GPUDECK_MPS on its workers"}),
                            "tensorflow": _nullable(
                                {"type": "boolean", "description": "its workers train zoo models (gpudeck[tensorflow])"}
                            ),
                            "uv": _nullable(
                                {"type": "boolean", "description": "its workers build project environments"}
                            ),
                            "jupyter": _nullable({"type": "boolean", "description": "its workers serve notebooks"}),
                            "sandboxed": {"type": "boolean"},
                            "clock_offset_s": _nullable(
                                {**NUM, "description": "the API's clock less the host's, as its workers last beat"}
                            ),
                        },
                        ["host", "workers", "gpus", "clock_offset_s"],
                    ),
                },
                "clock_skew_max_s": NUM,
            },
            ["hosts", "clock_skew_max_s"],
        ),
        "GpuHolder": _obj(
            {
                "job_id": INT,
                "owner": _nullable(STR),
                "kind": {**STR, "enum": ["job", "session"]},
                "gpu_memory": _nullable({**INT, "description": "a share's bytes of the GPU (null: it holds it whole)"}),
            },
            ["job_id", "owner"],
        ),
        "GpuHosts": _obj(
            {
                "hosts": {
                    "type": "array",
                    "items": _obj(
                        {"host": STR, "sampled_at": UNIX_S, "gpus": {"type": "array", "items": _ref("Gpu")}},
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
                "redis_saving": {
                    **STR,
                    "enum": ["appendonly", "snapshots", "none", "unknown"],
                    "description": "how Redis keeps the queue across its restart (none: a restart loses every job)",
                },
                "gpus_not_released": {
                    "type": "array",
                    "items": _obj(
                        {
                            "host": STR,
                            "gpu": STR,
                            "job_id": INT,
                            "pid": INT,
                            "used_memory_mib": _nullable(NUM),
                            "for_s": INT,
                        },
                        ["host", "gpu", "job_id", "pid", "for_s"],
                    ),
                    "description": "GPU memory a process still holds a minute after its job ended: that GPU takes "
                    "no job of whole GPUs until it is released",
                },
            },
            ["status", "redis", "workers", "workers_alive", "long_polls", "command_jobs"],
        ),
        "Line": _obj(
            {
                "queued": {**INT, "description": "jobs in line"},
                "waiting_for_dependencies": {**INT, "description": "jobs waiting for their dependencies (in no line)"},
                "jobs": {"type": "array", "items": _ref("Job"), "description": "the first, in the scheduler's order"},
            },
            ["queued", "waiting_for_dependencies", "jobs"],
        ),
        "Share": _obj(
            {
                "fairshare": {"type": "boolean", "description": "GPUDECK_FAIRSHARE: the line is ordered by usage"},
                "halflife_s": {**INT, "description": "GPUDECK_FAIRSHARE_HALFLIFE in seconds"},
                "preempt": {"type": "boolean", "description": "GPUDECK_PREEMPT"},
                "preempt_after_s": {**INT, "description": "GPUDECK_PREEMPT_AFTER in seconds"},
                "owners": {
                    "type": "array",
                    "items": _obj(
                        {
                            "owner": _nullable(STR),
                            "usage_gpu_hours": {"type": "number", "description": "decayed GPU-hours"},
                            "share": {"type": "number", "description": "of everybody's decayed usage"},
                            "gpus": {"type": "number", "description": "GPUs held now (a share counts its part)"},
                            "running": INT,
                            "queued": INT,
                            "idle_gpu_hours": {
                                "type": "number",
                                "description": "GPU-hours their jobs held GPUs under 5 % utilization (not decayed)",
                            },
                        },
                        ["owner", "usage_gpu_hours", "share", "gpus", "running", "queued"],
                    ),
                },
            },
            ["fairshare", "halflife_s", "owners"],
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
                "max_priority": _nullable({**STR, "enum": list(PRIORITIES)}),
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
    }


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
