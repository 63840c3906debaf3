"""The OpenAPI 3.1 document served at /api/v1/openapi.json, one module a resource beside the pieces they share
(base), each built from the same constants the code validates with (job fields, params, states, priorities), so
the two cannot drift apart silently; tests/api/test_openapi.py checks real responses against it."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from api.openapi import data, jobs, service, sweeps
from api.openapi.base import VERSION
from models.common import DEFAULT_API

bp = Blueprint("openapi", __name__)

PARTS = (jobs, sweeps, data, service)
"""The document's parts, in the order their paths are listed."""


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
        "paths": {k: v for part in PARTS for k, v in part.paths().items()},
        "components": {
            "schemas": {k: v for part in PARTS for k, v in part.schemas().items()},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


@bp.get("/api/v1/openapi.json")
def openapi():
    return document()
