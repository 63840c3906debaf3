"""/api/v1/workers, /api/v1/gpus, /api/v1/share, /api/v1/usage and /api/v1/sweeps."""

from __future__ import annotations

import json
import time
from typing import Any

from flask import Blueprint, request

from api import auth, deps
from jobs import accounts, control, disk, forecast, gpuhealth, gpus, queues, quota, search, sweeps, worker
from jobs.errors import BadRequest, Conflict, NotFound
from jobs.keys import worker_info_key
from jobs.run import pyenv
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


@bp.get("/envs")
def environments():
    """The projects' Python environments built on this host (jobs.run.pyenv): size, when built and last used, by
    which jobs."""
    deps.only_args(request.args, ())
    return {"envs": pyenv.listing(deps.settings())}


@bp.get("/gpus")
def gpu_stats():
    """Each host's newest sample, each GPU with the jobs (and their owners) that hold it now: `holders`, one job of
    whole GPUs or the jobs sharing it (`gpu_memory`: a share's bytes); `held_by`, the first of them."""
    hosts, held = gpus.read_all(deps.redis()), quota.holders(deps.redis())
    out = gpuhealth.cordons(deps.redis())
    for host in hosts:
        for gpu in host.get("gpus", []):
            who = held.get((host["host"], str(gpu.get("index"))), [])
            gpu["holders"] = who
            gpu["held_by"] = who[0] if who else None
            gpu["cordoned"] = out.get((host["host"], str(gpu.get("index"))))
    return {"hosts": hosts, "next_cursor": None}


CLOCK_SKEW_S = 5.0
"""How far a worker host's clock may be from the API's before `gpudeck doctor` says so (beats are a second apart)."""


@bp.get("/doctor")
def doctor() -> dict[str, Any]:
    """What each worker host says of itself for `gpudeck doctor` (admins only, where there are tokens): its NVIDIA
    driver, whether MPS is installed and asked for, its clock against the API's, its sandbox, its GPUs."""
    auth.admin_only("read the hosts' checks")
    redis, now = deps.redis(), time.time()
    live = [w for w in worker.describe(redis) if w["alive"]]
    said = worker.clocks(redis, [w["name"] for w in live])
    hosts: dict[str, dict[str, Any]] = {}
    for w in live:
        raw = redis.get(worker_info_key(w["name"]))
        facts = (json.loads(raw) if raw else {}).get("facts") or {}
        one = hosts.setdefault(w["host"], {"host": w["host"], "workers": 0, "gpus": [], "clock_offset_s": None})
        one["workers"] += 1
        one["gpus"] = sorted({*one["gpus"], *w["gpus"]})
        one.update({k: facts.get(k) for k in ("driver", "mps_installed", "mps", "tensorflow", "uv", "jupyter")})
        one["sandboxed"] = bool(w.get("sandboxed")) and one.get("sandboxed", True)
        if w["name"] in said:
            offset = round(now - said[w["name"]], 3)
            known = one["clock_offset_s"]
            one["clock_offset_s"] = offset if known is None or abs(offset) < abs(known) else known
    return {"hosts": sorted(hosts.values(), key=lambda h: h["host"]), "clock_skew_max_s": CLOCK_SKEW_S}


@bp.post("/gpus/<host>/<gpu>/cordon")
def cordon(host: str, gpu: str):
    """Take a GPU out of service by hand (admins only, where there are tokens): no job is placed on it until it is
    uncordoned; what runs there runs on. The optional body: {"reason": "…"}."""
    auth.admin_only("cordon a GPU")
    body = deps.json_body() if request.content_length else {}
    if not isinstance(body, dict) or set(body) - {"reason"}:
        raise BadRequest('the body, when there is one, is {"reason": "…"}', {"field": "body"})
    reason = body.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > 300):
        raise BadRequest("reason must be a string of at most 300 characters", {"field": "reason"})
    redis = deps.redis()
    known = {(h["host"], str(g.get("index"))) for h in gpus.read_all(redis) for g in h.get("gpus", [])}
    if (host, gpu) not in known:
        raise NotFound(f"no GPU {gpu} on {host} has been sampled (gpudeck gpu ls)", {"host": host, "gpu": gpu})
    was = gpuhealth.cordons(redis).get((host, gpu))
    if was is not None:
        raise Conflict(f"GPU {gpu} of {host} is cordoned already ({was['cause']})", {"host": host, "gpu": gpu})
    why = {"xid": None, "at": time.time(), "text": reason or "", "by": auth.owner_name() or "an admin"}
    gpuhealth.cordon(redis, host, gpu, why)
    return {"host": host, "gpu": gpu, "cordoned": gpuhealth.cordons(redis)[(host, gpu)]}


@bp.post("/gpus/<host>/<gpu>/uncordon")
def uncordon(host: str, gpu: str):
    """Put a GPU a hardware error took out of service back in service (admins only, where there are tokens)."""
    auth.admin_only("uncordon a GPU")
    was = gpuhealth.cordons(deps.redis()).get((host, gpu))
    if not gpuhealth.uncordon(deps.redis(), host, gpu):
        raise NotFound(f"GPU {gpu} of {host} is not cordoned", {"host": host, "gpu": gpu})
    return {"host": host, "gpu": gpu, "uncordoned": True, "was": was}


LINE_MAX = 500


@bp.get("/line")
def line():
    """The queued jobs in the order the scheduler reads them (the first `limit`), how many are in line, and how
    many wait for their dependencies."""
    from api.jobs import views

    deps.only_args(request.args, ("limit",))
    limit = deps.int_arg("limit", 20, 1, LINE_MAX)
    ids, queued, waiting = queues.head(deps.redis(), deps.settings(), limit)
    recs = [r for r in deps.store().get_many(ids) if r is not None]
    return {"queued": queued, "waiting_for_dependencies": waiting, "jobs": views(recs)}


@bp.get("/share")
def fair_share():
    """What each owner has used (decayed GPU-hours), their share of it, and what they run and wait for now."""
    settings = deps.settings()
    owners = forecast.share_table(deps.redis(), settings)
    return {
        "fairshare": settings.fairshare,
        "halflife_s": settings.fairshare_halflife_s,
        "preempt": settings.preempt,
        "preempt_after_s": settings.preempt_after_s,
        "projects": forecast.project_table(deps.redis(), owners),
        "owners": owners,
    }


@bp.get("/usage")
def usage() -> dict[str, Any]:
    """The accounts: GPU-hours (shares as their parts), idle GPU-hours, jobs by end state and queue waits of the
    jobs that ended in [since, until) — deleted ones too — per owner (`by=user`) and `period` (day, week, month,
    all). since: 30 days ago by default; until: now."""
    deps.only_args(request.args, ("since", "until", "by", "period"))
    now = time.time()
    bounds: dict[str, float] = {}
    for name, default in (("since", now - 30 * 86400), ("until", now)):
        given = request.args.get(name)
        try:
            bounds[name] = default if not given else accounts.moment(given, now)
        except ValueError as exc:
            raise BadRequest(f"{name}: {exc}", {"field": name}) from None
    if bounds["since"] >= bounds["until"]:
        raise BadRequest("since must come before until", {"field": "since"})
    chosen: dict[str, str] = {}
    for name, allowed, fallback in (("by", accounts.BY, "user"), ("period", accounts.PERIODS, "all")):
        chosen[name] = request.args.get(name) or fallback
        if chosen[name] not in allowed:
            raise BadRequest(f"{name} must be one of {', '.join(allowed)}, got {chosen[name]!r}", {"field": name})
    return accounts.usage(deps.redis(), bounds["since"], bounds["until"], chosen["by"], chosen["period"])


@bp.post("/sweeps")
def create_sweep():
    disk.ensure_room(deps.settings(), "a new sweep")
    body = deps.json_body()
    if isinstance(body, dict) and isinstance(body.get("base"), dict):
        body = {**body, "base": auth.with_defaults(body["base"])}  # (its trials tell the user's endpoints)
    settings = deps.settings()
    grid = isinstance(body, dict) and not search.is_search(body) and isinstance(body.get("grid"), dict)
    if grid and isinstance(body.get("base"), dict):
        for spec in sweeps.expand(body["base"], body["grid"]):  # (a grid may make a model job a command job)
            settings = auth.settings_for_submit(spec)
    elif isinstance(body, dict) and isinstance(body.get("base"), dict):
        settings = auth.settings_for_submit(body["base"])  # (a search's trials run the base's kind of job)
    if deps.bool_arg("dry_run"):  # (validated as a sweep is, every trial; nothing stored)
        return sweeps.create(deps.redis(), body, settings, owner=auth.owner_name(), dry_run=True), 200
    sweep = sweeps.create(deps.redis(), body, settings, owner=auth.owner_name())
    sweep["jobs"] = [job_view(j) for j in sweep["jobs"]]
    sweep["base"] = shown(sweep["base"])
    return sweep, 201, {"Location": f"/api/v1/sweeps/{sweep['id']}"}


@bp.get("/sweeps")
def list_sweeps():
    deps.only_args(request.args, ("limit",))
    return {"sweeps": sweeps.listing(deps.redis(), deps.int_arg("limit", 50, 1, 500))}


@bp.get("/sweeps/<int:sweep_id>")
def show_sweep(sweep_id: int):
    summary = sweeps.summary(deps.redis(), sweep_id, deps.settings().redis_url)
    return {**summary, "base": shown(summary["base"], auth.names_only(summary.get("owner")))}


@bp.post("/sweeps/<int:sweep_id>/stop")
def stop_sweep(sweep_id: int):
    """Launch no more trials; running ones finish (a grid's queued jobs are canceled)."""
    auth.may(sweeps.record_of(deps.redis(), sweep_id).get("owner"), "stop", f"sweep {sweep_id}")  # (404 first)
    summary = control.stop_sweep(deps.redis(), sweep_id, deps.settings().redis_url)
    return {**summary, "base": shown(summary["base"], auth.names_only(summary.get("owner")))}
