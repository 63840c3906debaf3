"""The OpenAPI 3.1 document served at /api/v1/openapi.json, one module a resource beside the pieces they share
(base), each built from the same constants the code validates with (job fields, params, states, priorities), so
the two cannot drift apart silently; tests/api/test_openapi.py checks real responses against it."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from api import schemas
from api.openapi import data, jobs, schedules, service, sweeps
from api.openapi.base import VERSION
from models.common import DEFAULT_API

bp = Blueprint("openapi", __name__)

PARTS = (jobs, sweeps, schedules, data, service)
"""The document's parts, in the order their paths are listed."""

OPERATIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("post", "/api/v1/jobs"): ("submit_job", "jobs"),
    ("get", "/api/v1/jobs"): ("list_jobs", "jobs"),
    ("get", "/api/v1/jobs/{id}"): ("get_job", "jobs"),
    ("patch", "/api/v1/jobs/{id}"): ("set_job_priority", "jobs"),
    ("delete", "/api/v1/jobs/{id}"): ("delete_job", "jobs"),
    ("post", "/api/v1/jobs/{id}/move"): ("move_job", "jobs"),
    ("post", "/api/v1/jobs/{id}/cancel"): ("cancel_job", "jobs"),
    ("post", "/api/v1/jobs/{id}/retry"): ("retry_job", "jobs"),
    ("get", "/api/v1/jobs/{id}/wait"): ("wait_job", "jobs"),
    ("get", "/api/v1/jobs/{id}/logs"): ("get_job_logs", "jobs"),
    ("get", "/api/v1/jobs/{id}/notifications"): ("get_job_notifications", "jobs"),
    ("get", "/api/v1/jobs/{id}/files"): ("list_job_files", "jobs"),
    ("get", "/api/v1/jobs/{id}/files/{path}"): ("get_job_file", "jobs"),
    ("get", "/api/v1/jobs/{id}/metrics"): ("get_job_metrics", "jobs"),
    ("get", "/api/v1/compare"): ("compare_jobs", "jobs"),
    ("post", "/api/v1/jobs/{id}/export"): ("export_job", "jobs"),
    ("post", "/api/v1/sweeps"): ("submit_sweep", "sweeps"),
    ("get", "/api/v1/sweeps/{id}"): ("get_sweep", "sweeps"),
    ("get", "/api/v1/sweeps"): ("list_sweeps", "sweeps"),
    ("get", "/api/v1/envs"): ("list_envs", "cluster"),
    ("post", "/api/v1/schedules"): ("create_schedule", "schedules"),
    ("get", "/api/v1/schedules"): ("list_schedules", "schedules"),
    ("get", "/api/v1/schedules/{name}"): ("get_schedule", "schedules"),
    ("delete", "/api/v1/schedules/{name}"): ("delete_schedule", "schedules"),
    ("post", "/api/v1/schedules/{name}/pause"): ("pause_schedule", "schedules"),
    ("post", "/api/v1/schedules/{name}/resume"): ("resume_schedule", "schedules"),
    ("post", "/api/v1/sweeps/{id}/stop"): ("stop_sweep", "sweeps"),
    ("get", "/api/v1/models"): ("list_models", "data"),
    ("get", "/api/v1/datasets"): ("list_datasets", "data"),
    ("post", "/api/v1/datasets"): ("upload_dataset", "data"),
    ("get", "/api/v1/datasets/{name}"): ("get_dataset", "data"),
    ("delete", "/api/v1/datasets/{name}/{version}"): ("delete_dataset_version", "data"),
    ("post", "/api/v1/sources"): ("upload_source", "data"),
    ("get", "/api/v1/sources/{ref}"): ("get_source", "data"),
    ("get", "/api/v1/workers"): ("list_workers", "cluster"),
    ("post", "/api/v1/workers/{name}/drain"): ("drain_worker", "cluster"),
    ("get", "/api/v1/gpus"): ("list_gpus", "cluster"),
    ("get", "/api/v1/doctor"): ("get_doctor", "cluster"),
    ("post", "/api/v1/gpus/{host}/{gpu}/cordon"): ("cordon_gpu", "cluster"),
    ("post", "/api/v1/gpus/{host}/{gpu}/uncordon"): ("uncordon_gpu", "cluster"),
    ("get", "/api/v1/line"): ("get_line", "cluster"),
    ("get", "/api/v1/share"): ("get_share", "cluster"),
    ("get", "/api/v1/usage"): ("get_usage", "cluster"),
    ("post", "/api/v1/tensorboard"): ("start_tensorboard", "tensorboard"),
    ("get", "/api/v1/tensorboard"): ("list_tensorboards", "tensorboard"),
    ("delete", "/api/v1/tensorboard/{port}"): ("stop_tensorboard", "tensorboard"),
    ("get", "/api/v1/whoami"): ("whoami", "users"),
    ("get", "/api/v1/audit"): ("get_audit", "users"),
    ("get", "/api/v1/openapi.json"): ("get_openapi", "service"),
    ("get", "/healthz"): ("healthz", "service"),
    ("get", "/metrics"): ("prometheus_metrics", "service"),
}
"""Each operation's operationId (what a generated client names its function) and tag (the module it goes in)."""
TAGS = {
    "jobs": "submit, list, watch, cancel, retry, compare and delete training jobs; their logs, files and metrics",
    "sweeps": "grids and searches of jobs, ranked",
    "schedules": "jobs and sweeps made on a cron, in a time zone",
    "data": "models, datasets and source snapshots",
    "cluster": "workers, GPUs and the fair share",
    "tensorboard": "TensorBoard over jobs",
    "users": "who a token is, and the audit trail",
    "service": "health, Prometheus metrics and this document",
}


def _named(paths: dict[str, Any]) -> dict[str, Any]:
    """`paths` with each operation's operationId and tag (KeyError for an operation OPERATIONS does not name)."""
    out: dict[str, Any] = {}
    for path, ops in paths.items():
        out[path] = {}
        for method, op in ops.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                out[path][method] = op
                continue
            operation_id, tag = OPERATIONS[(method, path)]
            out[path][method] = {"operationId": operation_id, "tags": [tag], **op}
    return out


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
        "tags": [{"name": name, "description": text} for name, text in TAGS.items()],
        "paths": _named({k: v for part in PARTS for k, v in part.paths().items()}),
        "components": {
            "schemas": components(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def components() -> dict[str, Any]:
    """The component schemas: the bodies api.schemas declares, and those made from the job spec's declaration."""
    return {**schemas.components(), **jobs.schemas(), **sweeps.schemas()}


@bp.get("/api/v1/openapi.json")
def openapi():
    return document()
