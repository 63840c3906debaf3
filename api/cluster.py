"""/api/v1/workers, /api/v1/gpus and /api/v1/sweeps."""

from __future__ import annotations

from flask import Blueprint

from api import deps
from jobs import disk, gpus, sweeps, worker
from jobs.views import job_view

bp = Blueprint("cluster", __name__)


@bp.get("/workers")
def workers():
    return {"workers": worker.describe(deps.redis()), "next_cursor": None}


@bp.post("/workers/<name>/drain")
def drain(name: str):
    return worker.drain(deps.redis(), name)


@bp.get("/gpus")
def gpu_stats():
    return {"hosts": gpus.read_all(deps.redis()), "next_cursor": None}


@bp.post("/sweeps")
def create_sweep():
    disk.ensure_room(deps.settings(), "a new sweep")
    sweep = sweeps.create(deps.redis(), deps.json_body(), deps.settings())
    sweep["jobs"] = [job_view(j) for j in sweep["jobs"]]
    return sweep, 201, {"Location": f"/api/v1/sweeps/{sweep['id']}"}


@bp.get("/sweeps/<int:sweep_id>")
def show_sweep(sweep_id: int):
    return sweeps.summary(deps.redis(), sweep_id)
