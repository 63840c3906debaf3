"""/api/v1/sources: a command job's source folder, uploaded as an archive (multipart `file`) and stored by the
sha256 of its content; the same tree uploaded again stores nothing new."""

from __future__ import annotations

from flask import Blueprint, request

from api import deps
from jobs import disk, sources
from jobs.errors import BadRequest
from models import sourcetree

bp = Blueprint("sources", __name__)


@bp.post("/sources")
def upload():
    s = deps.settings()
    disk.ensure_room(s, "an upload")
    request.max_content_length = s.source_max_bytes + 1024 * min(s.source_max_files, 100_000)
    deps.only_args(request.form, ("git_commit", "git_dirty", "file"), where="form field")
    deps.only_args(request.files, ("file",), where="file field")
    meta, created = sources.upload(
        deps.redis(), s, deps.upload_stream(), request.form.get("git_commit"), request.form.get("git_dirty")
    )
    return meta, 201 if created else 200, {"Location": f"/api/v1/sources/{meta['ref']}"}


@bp.get("/sources/<ref>")
def show(ref: str):
    sha = sourcetree.parse_ref(ref)
    if sha is None:
        raise BadRequest(f"{ref!r} is not a source ref (src:<sha256>, 64 lowercase hex digits)", {"field": "ref"})
    return sources.get(deps.redis(), sha)
