"""/api/v1/jobs/ID/files: what a job left in its job dir: the listing, one file (ranges, ETag), a folder as a
.tar.gz streamed while it is made; from the object store (GPUDECK_ARTIFACTS) where this host has no job dir."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, current_app, request, send_file

from api import deps, longpoll
from jobs import artifacts, jobfiles, objectstore
from jobs.errors import BadRequest, NotFound, Unavailable

bp = Blueprint("files", __name__)


def _kept(job_id: int) -> tuple[Any, objectstore.Store | None]:
    """The job's dir on this host, or (None, the store) where this host has none and the store may have its files;
    NotFound where neither."""
    rec = deps.store().get(job_id)
    try:
        return artifacts.job_dir(deps.settings(), rec), None
    except NotFound:
        store = objectstore.Store.of(deps.settings().artifacts)
        if store is None or not rec.get("artifacts"):
            raise
        return None, store


@bp.get("/<int:job_id>/files")
def list_files(job_id: int):
    deps.only_args(request.args, ("prefix",))
    prefix = request.args.get("prefix", "")
    root, store = _kept(job_id)
    if store is None:
        return {"job_id": job_id, **artifacts.listing(root, prefix)}
    files = _from_store(lambda: store.listing(job_id, prefix))
    return {"job_id": job_id, "store": str(store), "files": files, "total_bytes": sum(f["size"] for f in files),
            "truncated": False}  # fmt: skip


@bp.get("/<int:job_id>/files/<path:path>")
def get_file(job_id: int, path: str):
    """A file, streamed, with Content-Length, an ETag and byte ranges (`curl -C -` resumes); a folder only as
    `?archive=tar.gz`."""
    deps.only_args(request.args, ("archive",))
    archive = request.args.get("archive")
    root, store = _kept(job_id)
    if store is not None:
        return _stored(store, job_id, path, archive)
    fd, folder = artifacts.opened(root, path)  # (through no link out of the job dir: jobs.jobfiles)
    if folder:
        name = path.rstrip("/").rsplit("/", 1)[-1] if jobfiles.parts(path) else f"job-{job_id}"
        if archive != "tar.gz":
            os.close(fd)
            raise BadRequest(f"{path} is a folder: add ?archive=tar.gz to download it as a file", {"field": "archive"})
        return _streamed(
            Response(
                artifacts.tar_stream(fd, name),
                mimetype="application/gzip",
                headers={"Content-Disposition": f'attachment; filename="{name}.tar.gz"'},
            )
        )
    if archive is not None:
        os.close(fd)
        raise BadRequest(f"{path} is a file: archive applies to folders only", {"field": "archive"})
    try:  # (werkzeug opens the magic link of the very file checked: that inode, whatever the name holds now)
        st = os.fstat(fd)
        response = send_file(
            jobfiles.fd_path(fd),
            conditional=True,
            etag=f"{st.st_mtime_ns:x}-{st.st_size:x}-{st.st_ino:x}",
            download_name=path.rsplit("/", 1)[-1],
            as_attachment=True,
        )
    finally:
        os.close(fd)
    return _streamed(response)


def _streamed(response: Response) -> Response:
    """A download holds a server thread while it is sent: it takes one of the slots long polls take, so clients
    that never read cannot take every thread (api.longpoll, api.guard)."""
    slots = current_app.extensions["gpudeck.longpolls"]
    return longpoll.held_while_sent(response, slots, request.remote_addr or "unknown")


def _from_store(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except objectstore.StoreError as exc:
        raise Unavailable(f"the object store did not answer: {exc}", {"store": deps.settings().artifacts}) from None


def _stored(store: objectstore.Store, job_id: int, path: str, archive: str | None) -> Response:
    """A file (byte ranges passed on) or a folder (?archive=tar.gz) of the job, from the object store."""
    artifacts.relative(path)
    under = [f["path"] for f in _from_store(lambda: store.listing(job_id, path.rstrip("/") + "/"))]
    if under:
        if archive != "tar.gz":
            raise BadRequest(f"{path} is a folder: add ?archive=tar.gz to download it as a file", {"field": "archive"})
        name = path.rstrip("/").rsplit("/", 1)[-1]
        stream = artifacts.objects_tar_stream(store.objects(job_id, under), path.rstrip("/"), name)
        headers = {"Content-Disposition": f'attachment; filename="{name}.tar.gz"'}
        return _streamed(Response(stream, mimetype="application/gzip", headers=headers))
    if archive is not None:
        raise BadRequest(f"{path} is a file: archive applies to folders only", {"field": "archive"})
    wanted = request.headers.get("Range")
    try:
        got = store.get(job_id, path, wanted)
    except objectstore.StoreError as exc:
        if "NoSuchKey" in str(exc) or "404" in str(exc):
            raise NotFound(f"path {path!r} does not exist in the job's files in {store}", {"field": "path"}) from None
        if "InvalidRange" in str(exc) or "416" in str(exc):
            return Response(status=416)
        raise Unavailable(f"the object store did not answer: {exc}", {"store": str(store)}) from None
    headers = {
        "Content-Length": str(got["ContentLength"]),
        "ETag": got.get("ETag", ""),
        "Accept-Ranges": "bytes",
        "Content-Disposition": f'attachment; filename="{path.rsplit("/", 1)[-1]}"',
    }
    if got.get("ContentRange"):
        headers["Content-Range"] = got["ContentRange"]
    body = got["Body"]
    partial = 206 if got.get("ContentRange") else 200  # (a range the store did not apply: the whole object)
    response = Response(iter(lambda: body.read(1 << 20), b""), status=partial, headers=headers,
                        mimetype="application/octet-stream")  # fmt: skip
    return _streamed(response)
