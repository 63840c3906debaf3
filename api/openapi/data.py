"""The OpenAPI document's part for the model zoo, datasets and sources."""

from __future__ import annotations

from typing import Any

from api.openapi.base import STR, _errors, _json, _obj, _op
from jobs.sources import GIT_COMMIT
from models.catalog import NAME
from models.sourcetree import REF


def paths() -> dict[str, Any]:
    """The paths of the model zoo, datasets and sources."""
    return {
        "/api/v1/models": {"get": _op("The model zoo", {"200": _json("ModelList")})},
        "/api/v1/datasets": {
            "get": _op("Uploaded datasets", {"200": _json("DatasetList")}),
            "post": _op(
                "Upload an archive as name:version",
                {"201": _json("DatasetVersion"), **_errors(400, 409, 413, 422, 507)},
                requestBody={
                    "required": True,
                    "content": {
                        "multipart/form-data": {
                            "schema": _obj(
                                {
                                    "name": {**STR, "pattern": f"^{NAME}$", "not": {"const": "synthetic"}},
                                    "version": {**STR, "pattern": f"^{NAME}$"},
                                    "file": {**STR, "contentMediaType": "application/gzip"},
                                },
                                ["name", "version", "file"],
                                extra=False,
                            )
                        }
                    },
                },
            ),
        },
        "/api/v1/datasets/{name}": {
            "get": _op(
                "One dataset's versions",
                {"200": _json("Dataset"), **_errors(404)},
                parameters=[{"name": "name", "in": "path", "required": True, "schema": STR}],
            )
        },
        "/api/v1/datasets/{name}/{version}": {
            "delete": _op(
                "Delete a dataset version: its files and entry (409 naming the queued or running jobs that use it)",
                {"200": _json("DeletedDataset"), **_errors(400, 403, 404, 409)},
                parameters=[
                    {"name": "name", "in": "path", "required": True, "schema": STR},
                    {"name": "version", "in": "path", "required": True, "schema": STR},
                ],
            )
        },
        "/api/v1/sources": {
            "post": _op(
                "Store a source folder (tar in any compression, or zip) by the sha256 of its content",
                {
                    "201": _json("Source", "stored", {"Location": {"schema": STR}}),
                    "200": _json("Source", "this tree was already stored", {"Location": {"schema": STR}}),
                    **_errors(400, 413, 422, 507),
                },
                requestBody={
                    "required": True,
                    "content": {
                        "multipart/form-data": {
                            "schema": _obj(
                                {
                                    "file": {**STR, "contentMediaType": "application/gzip"},
                                    "git_commit": {**STR, "pattern": f"^({GIT_COMMIT.pattern})?$"},
                                    "git_dirty": {**STR, "enum": ["true", "false", "1", "0", ""]},
                                },
                                ["file"],
                                extra=False,
                            )
                        }
                    },
                },
            ),
        },
        "/api/v1/sources/{ref}": {
            "get": _op(
                "One stored source",
                {"200": _json("Source"), **_errors(400, 404)},
                parameters=[
                    {"name": "ref", "in": "path", "required": True, "schema": {**STR, "pattern": f"^{REF.pattern}$"}}
                ],
            )
        },
    }
