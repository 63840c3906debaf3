"""The OpenAPI document's part for jobs: its paths (a job, its tasks, logs, files, metrics, export, a comparison); the
component schemas they name are in api.openapi.jobschemas."""

from __future__ import annotations

from typing import Any

from api.jobs import MAX_OFFSET, MAX_PAGE, MAX_WAIT_S
from api.openapi.base import (
    INT,
    JOB_LINKS,
    NEXT_OFFSET,
    STR,
    _body,
    _errors,
    _json,
    _list_of,
    _obj,
    _op,
    _path_id,
    _q,
    _ref,
)
from api.openapi.jobschemas import KEPT, schemas  # noqa: F401 (the components made from the spec's declaration)
from jobs.compare import MAX_JOBS as MAX_COMPARED
from jobs.compare import X_AXES
from models.states import Status


def paths() -> dict[str, Any]:
    """The paths of jobs: a spec, a job, its tasks, logs, files and metrics."""
    job = [_path_id()]
    text = {"text/plain": {"schema": STR}}
    return {
        "/api/v1/jobs": {
            "post": _op(
                "Submit a job",
                {
                    "201": {**_json("Job", "created", {"Location": {"schema": STR}}), "links": JOB_LINKS},
                    "200": {
                        "description": "replayed for an Idempotency-Key seen in the last 24 h (a Job), or, with "
                        "dry_run=true, what submitting it would do with nothing stored (a DryRun)",
                        "content": {"application/json": {"schema": {"oneOf": [_ref("Job"), _ref("DryRun")]}}},
                    },
                    **_errors(400, 403, 404, 409, 413, 422, 501, 503, 507),
                },
                parameters=[
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "schema": {**STR, "minLength": 1, "maxLength": 255},
                    },
                    _q(
                        "dry_run",
                        {**STR, "enum": ["0", "1", "true", "false", "yes", "no"]},
                        "true: check it as a submission, store nothing, answer a DryRun (its spec, expected start "
                        "and GPU-hours)",
                    ),
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
                    _q("q", STR, "words that must all be in the id, name, model or command, status, tags or owner"),
                    _q("limit", {**INT, "minimum": 1, "maximum": MAX_PAGE}, "page size (50)"),
                    _q("cursor", {**INT, "minimum": 0, "maximum": MAX_OFFSET}, "next_cursor of the previous page"),
                ],
            ),
        },
        "/api/v1/jobs/{id}": {
            "get": _op("One job", {"200": _json("Job"), **_errors(404)}, parameters=job),
            "patch": _op(
                "Change a queued job's priority (its owner or an admin; a token's --max-priority caps it)",
                {"200": _json("Job"), **_errors(400, 403, 404, 409)},
                parameters=job,
                requestBody=_body("PriorityInput"),
            ),
            "delete": _op(
                "Delete an ended job for good: its record, log, metrics, references and job dir",
                {"200": _json("Deleted"), **_errors(403, 404, 409)},
                parameters=job,
            ),
        },
        "/api/v1/jobs/{id}/move": {
            "post": _op(
                "Move a queued job within its line (its owner's jobs of its priority)",
                {"200": _json("Job"), **_errors(400, 403, 404, 409)},
                parameters=job,
                requestBody=_body("MoveInput"),
            )
        },
        "/api/v1/jobs/{id}/cancel": {
            "post": _op(
                "Cancel a job (202: a running job is being stopped, but Redis cannot record it yet: its disk is full)",
                {"200": _json("Job"), "202": _json("Job"), **_errors(403, 404, 409)},
                parameters=job,
            )
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
                    _q(
                        "live",
                        {**STR, "enum": ["0", "1", "true", "false", "yes", "no"]},
                        "also the line being drawn (a progress bar before its newline), after a \\r, no newline",
                    ),
                ],
            )
        },
        "/api/v1/jobs/{id}/notifications": {
            "get": _op(
                "Every delivery attempt of the job's notifications",
                {"200": _json("Notifications"), **_errors(400, 404)},
                parameters=job,
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
        "/api/v1/jobs/{id}/export": {
            "post": _op(
                "Export an ended job to the operator's MLflow (GPUDECK_MLFLOW_URI) now: queued, made by the API "
                "within seconds; its state in the job's `export`",
                {
                    "202": _json("Job", "queued: the job, its export pending"),
                    **_errors(400, 403, 404, 409, 422),
                },
                parameters=job,
                requestBody={
                    "required": False,
                    "content": {
                        "application/json": {"schema": _obj({"target": {**STR, "enum": ["mlflow"]}}, extra=False)}
                    },
                },
            )
        },
        "/api/v1/compare": {
            "get": _op(
                "Jobs side by side: the configuration fields that differ, results with each column's best, one "
                "metric's curves (JSON or CSV: a row a job)",
                {
                    "200": {
                        "description": "the comparison",
                        "content": {"application/json": {"schema": _ref("Comparison")}, "text/csv": {}},
                    },
                    **_errors(400, 404),
                },
                parameters=[
                    {
                        "name": "jobs",
                        "in": "query",
                        "required": True,
                        "schema": {**STR, "pattern": "^\\s*\\d+\\s*(,\\s*\\d+\\s*)+$"},
                        "description": f"two to {MAX_COMPARED} job ids, comma-separated: 12,15,19",
                    },
                    _q("metric", STR, "the metric whose curves come back (default: loss, else the first reported)"),
                    _q(
                        "x",
                        {**STR, "enum": list(X_AXES)},
                        "the curves' x: step (default), epoch, or seconds since the job's first point",
                    ),
                    _q("points", {**INT, "minimum": 2, "maximum": 100000}, "most points a curve (default 1000)"),
                    _q("format", {**STR, "enum": ["json", "csv"]}, "json (default) or csv"),
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
                parameters=[
                    *job,
                    _q("format", {**STR, "enum": ["json", "csv"]}, "json (default) or csv"),
                    _q("run", STR, "only the points of this run (one of the job's `runs`)"),
                ],
            )
        },
    }
