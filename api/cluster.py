"""/api/v1/workers, /api/v1/gpus and /api/v1/sweeps."""

from __future__ import annotations

from flask import Blueprint

from api import auth, deps
from jobs import disk, forecast, gpus, quota, sweeps, worker
from jobs.spec import shown
from jobs.views import job_view

bp = Blueprint("cluster", __name__)


@bp.get("/workers")
def workers():
    return {"workers": worker.describe(deps.redis()), "next_cursor": None}


@bp.post("/workers/<name>/drain")
def drain(name: str):
    auth.admin_only("drain a worker")
    return worker.drain(deps.redis(), name)


@bp.get("/gpus")
def gpu_stats():
    """Each host's newest sample, each GPU with the job (and its owner) that holds it now."""
    hosts, held = gpus.read_all(deps.redis()), quota.holders(deps.redis())
    for host in hosts:
        for gpu in host.get("gpus", []):
            gpu["held_by"] = held.get((host["host"], str(gpu.get("index"))))
    return {"hosts": hosts, "next_cursor": None}


@bp.get("/share")
def fair_share():
    """What each owner has used (decayed GPU-hours), their share of it, and what they run and wait for now."""
    settings = deps.settings()
    return {
        "fairshare": settings.fairshare,
        "halflife_s": settings.fairshare_halflife_s,
        "preempt": settings.preempt,
        "preempt_after_s": settings.preempt_after_s,
        "owners": forecast.share_table(deps.redis(), settings),
    }


@bp.post("/sweeps")
def create_sweep():
    disk.ensure_room(deps.settings(), "a new sweep")
    body = deps.json_body()
    settings = deps.settings()
    if isinstance(body, dict) and isinstance(body.get("base"), dict) and isinstance(body.get("grid"), dict):
        for spec in sweeps.expand(body["base"], body["grid"]):  # (a grid may make a model job a command job)
            settings = auth.settings_for_submit(spec)
    sweep = sweeps.create(deps.redis(), body, settings, owner=auth.owner_name())
    sweep["jobs"] = [job_view(j) for j in sweep["jobs"]]
    sweep["base"] = shown(sweep["base"])
    return sweep, 201, {"Location": f"/api/v1/sweeps/{sweep['id']}"}


@bp.get("/sweeps/<int:sweep_id>")
def show_sweep(sweep_id: int):
    summary = sweeps.summary(deps.redis(), sweep_id)
    return {**summary, "base": shown(summary["base"], auth.names_only(summary.get("owner")))}
