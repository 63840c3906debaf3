"""/api/v1/datasets: upload an archive as `name:version` (multipart: name, version, file) and list versions."""

from __future__ import annotations

from flask import Blueprint, request

from api import auth, deps
from jobs import datasets, disk

bp = Blueprint("datasets", __name__)


@bp.post("/datasets")
def upload():
    s = deps.settings()
    disk.ensure_room(s, "an upload")
    # The archive may be as large as the expanded limit plus a tar header per entry; other routes keep 1 MiB.
    request.max_content_length = s.dataset_max_bytes + 1024 * s.dataset_max_files
    deps.only_args(request.form, ("name", "version", "file"), where="form field")
    deps.only_args(request.files, ("file",), where="file field")
    name, version = request.form.get("name"), request.form.get("version")
    meta = datasets.upload(deps.redis(), s, name, version, deps.upload_stream(), auth.owner_name())
    return meta, 201, {"Location": f"/api/v1/datasets/{meta['name']}"}


@bp.get("/datasets")
def list_datasets():
    return {"datasets": datasets.list_all(deps.redis()), "next_cursor": None}


@bp.delete("/datasets/<name>/<version>")
def delete(name: str, version: str):
    """A dataset version, gone (409 naming the jobs while a queued or running one uses it)."""
    return datasets.delete(
        deps.redis(),
        deps.settings(),
        name,
        version,
        lambda owner: auth.may(owner, "delete", f"dataset {name}:{version}"),
    )


@bp.get("/datasets/<name>")
def show(name: str):
    return datasets.describe(deps.redis(), name)
