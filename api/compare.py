"""/api/v1/compare: jobs side by side (jobs.compare), as JSON or CSV."""

from __future__ import annotations

from flask import Blueprint, Response, request

from api import deps
from api.jobs import views
from jobs import compare as comparing
from jobs.errors import BadRequest, NotFound

bp = Blueprint("compare", __name__)


@bp.get("/compare")
def compare():
    deps.only_args(request.args, ("jobs", "metric", "x", "points", "format"))
    ids = comparing.parse_ids(request.args.get("jobs"))
    fmt = request.args.get("format", "json")
    if fmt not in ("json", "csv"):
        raise BadRequest(f"query argument format must be json or csv, got {fmt!r}", {"field": "format"})
    store = deps.store()
    recs = store.get_many(ids)
    missing = [job_id for job_id, rec in zip(ids, recs) if rec is None]
    if missing:
        raise NotFound(f"job {missing[0]} does not exist", {"id": missing[0]})
    shown = [
        {**view, "gpu_seconds": rec.get("gpu_seconds"), "env_digest": rec.get("env_digest")}
        for view, rec in zip(views([r for r in recs if r is not None]), recs)
        if rec is not None
    ]
    doc = comparing.compare(
        shown,
        store.read_points,
        request.args.get("metric") or None,
        request.args.get("x", "step"),
        deps.int_arg("points", comparing.MAX_POINTS, 2, 100_000),
    )
    if fmt == "csv":
        return Response(comparing.csv_text(doc), mimetype="text/csv")
    return doc
