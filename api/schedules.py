"""/api/v1/schedules: schedules that repeat (a job spec or a sweep made at each firing of a cron expression)."""

from __future__ import annotations

from flask import Blueprint, request

from api import auth, deps
from jobs import cronjobs, disk

bp = Blueprint("schedules", __name__)


@bp.post("/schedules")
def create_schedule():
    """Checked as its job (or sweep) would be submitted now, by this request's token; each firing submits it as
    this token's user (a token revoked or narrowed since makes nothing, and the firing says why)."""
    disk.ensure_room(deps.settings(), "a new schedule")
    body = deps.json_body()
    settings = deps.settings()
    # (its jobs tell the user's endpoints, as theirs do, and are checked by this token's rules, as a submission is)
    if isinstance(body, dict) and isinstance(body.get("job"), dict):
        body = {**body, "job": auth.with_defaults(body["job"])}
        settings = auth.settings_for_submit(body["job"])
    if isinstance(body, dict) and isinstance(body.get("sweep"), dict) and isinstance(body["sweep"].get("base"), dict):
        body = {**body, "sweep": {**body["sweep"], "base": auth.with_defaults(body["sweep"]["base"])}}
        settings = auth.settings_for_submit(body["sweep"]["base"])
    made = cronjobs.create(deps.redis(), body, settings, owner=auth.owner_name())
    return made, 201, {"Location": f"/api/v1/schedules/{made['name']}"}


@bp.get("/schedules")
def list_schedules():
    deps.only_args(request.args, ())
    return {"schedules": cronjobs.listing(deps.redis())}


@bp.get("/schedules/<name>")
def show_schedule(name: str):
    return cronjobs.get(deps.redis(), name)


def _owned(name: str, action: str) -> None:
    auth.may(cronjobs.owner_of(deps.redis(), name), action, f"schedule {name}")  # (404 first)


@bp.post("/schedules/<name>/pause")
def pause_schedule(name: str):
    _owned(name, "pause")
    return cronjobs.pause(deps.redis(), name)


@bp.post("/schedules/<name>/resume")
def resume_schedule(name: str):
    _owned(name, "resume")
    return cronjobs.resume(deps.redis(), name)


@bp.delete("/schedules/<name>")
def delete_schedule(name: str):
    """The schedule goes; the jobs it made stay."""
    _owned(name, "delete")
    cronjobs.delete(deps.redis(), name)
    return "", 204
