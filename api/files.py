"""/api/v1/jobs/ID/files: what a job left in its job dir: the listing, one file (ranges, ETag), a folder as a
.tar.gz streamed while it is made."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, request, send_file

from api import deps, longpoll
from jobs import artifacts
from jobs.errors import BadRequest

bp = Blueprint("files", __name__)


@bp.get("/<int:job_id>/files")
def list_files(job_id: int):
    deps.only_args(request.args, ("prefix",))
    root = artifacts.job_dir(deps.settings(), deps.store().get(job_id))
    return {"job_id": job_id, **artifacts.listing(root, request.args.get("prefix", ""))}


@bp.get("/<int:job_id>/files/<path:path>")
def get_file(job_id: int, path: str):
    """A file, streamed, with Content-Length, an ETag and byte ranges (`curl -C -` resumes); a folder only as
    `?archive=tar.gz`."""
    deps.only_args(request.args, ("archive",))
    root = artifacts.job_dir(deps.settings(), deps.store().get(job_id))
    found = artifacts.inside(root, path)
    archive = request.args.get("archive")
    if found.is_dir():
        if archive != "tar.gz":
            raise BadRequest(f"{path} is a folder: add ?archive=tar.gz to download it as a file", {"field": "archive"})
        name = found.name if found != root else f"job-{job_id}"
        return _streamed(
            Response(
                artifacts.tar_stream(found, name),
                mimetype="application/gzip",
                headers={"Content-Disposition": f'attachment; filename="{name}.tar.gz"'},
            )
        )
    if archive is not None:
        raise BadRequest(f"{path} is a file: archive applies to folders only", {"field": "archive"})
    artifacts.regular(found, path)
    return _streamed(send_file(found, conditional=True, etag=True, download_name=found.name, as_attachment=True))


def _streamed(response: Response) -> Response:
    """A download holds a server thread while it is sent: it takes one of the slots long polls take, so clients
    that never read cannot take every thread (api.longpoll, api.guard)."""
    slots = current_app.extensions["gpudeck.longpolls"]
    return longpoll.held_while_sent(response, slots, request.remote_addr or "unknown")
