"""Sweeps: a grid over spec fields (`model`, `params.lr`, …) expanded into one job per combination."""

from __future__ import annotations

import itertools
import json
import math
import time
from typing import Any

from redis import Redis

from jobs import queues, quota, search, views
from jobs import spec as spec_mod
from jobs.errors import NotFound, TooLarge, ValidationError
from jobs.keys import SEARCHING_KEY, SWEEP_COUNTER_KEY, sweep_key, sweep_stop_key
from jobs.record import Job, Kept
from jobs.settings import Settings
from jobs.store import JobStore, iso
from models.states import ENDED

MAX_JOBS = 500
"""Most jobs one sweep may create."""


def combinations(base: Any, grid: Any) -> list[dict[str, Any]]:
    """Every combination of the grid (field -> value), in grid order; ValidationError names bad keys. A field is
    a spec field, params.<name> (a model job), env.<NAME> or args.<NAME> (a {NAME} in a command job's command)."""
    if not isinstance(base, dict):
        raise ValidationError({"base": "must be a job spec object"})
    if not isinstance(grid, dict) or not grid:
        raise ValidationError({"grid": "must be a non-empty object of field -> list of values"})
    errors = {}
    command = base.get("command") is not None
    for key, values in grid.items():
        top, _, sub = key.partition(".")
        if sub and top in ("params", "env", "args"):
            problem = search.key_problem(key, base, command)
        elif top in spec_mod.FIELDS and not sub and top != "params":
            problem = None
        else:
            problem = "must name a spec field (model, dataset, gpus, …), params.<name>, env.<NAME> or args.<NAME>"
        if problem:
            errors[f"grid.{key}"] = problem
        elif not isinstance(values, list) or not values:
            errors[f"grid.{key}"] = "must be a non-empty list of values"
    if errors:
        raise ValidationError(errors)
    count = 1
    for values in grid.values():
        count *= len(values)
    if count > MAX_JOBS:
        raise TooLarge(f"grid: expands to {count} jobs; at most {MAX_JOBS}", {"field": "grid", "jobs": count})
    return [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]


def expand(base: Any, grid: Any) -> list[dict[str, Any]]:
    """Every combination of the grid applied to the base spec, in grid order."""
    return [search.apply(base, combo) for combo in combinations(base, grid)]


def create(
    redis: Redis, body: Any, settings: Settings, owner: str | None = None, dry_run: bool = False
) -> dict[str, Any]:
    """A grid: validate every combination first (all or nothing), then submit one job each (all `owner`'s) under a
    new sweep id. A search (random, tpe): validate it, then create its study and launch its first trials.
    `dry_run`: validated as that, nothing stored: what it would be (a grid's jobs' specs; a search's rules)."""
    if search.is_search(body):
        return _create_search(redis, body, settings, owner, dry_run)
    if not isinstance(body, dict) or set(body) - {"base", "grid", "max_concurrent", "search", "metric", "mode"}:
        raise ValidationError(
            {
                "body": 'must be {"base": <job spec>, "grid": {field: [values]}} (and optionally "max_concurrent": N), '
                'or a search: {"search": "random"|"tpe", "base": …, "space": {…}, …}'
            }  # fmt: skip
        )
    if body.get("search", "grid") not in search.SEARCHES:
        raise ValidationError({"search": f"must be one of {', '.join(search.SEARCHES)}, got {body['search']!r}"})
    cap = body.get("max_concurrent")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise ValidationError({"max_concurrent": f"must be a whole number of 1 or more, got {cap!r}"})
    metric = body.get("metric", "test_accuracy")
    if not isinstance(metric, str) or not search.METRIC_NAME.fullmatch(metric):
        raise ValidationError({"metric": "must name a scalar the jobs report, e.g. test_accuracy or val_loss"})
    mode = body.get("mode", "min" if "loss" in metric or "error" in metric else "max")
    if mode not in ("min", "max"):
        raise ValidationError({"mode": f"must be min or max, got {mode!r}"})
    combos = combinations(body.get("base"), body.get("grid"))
    specs = [search.apply(body["base"], combo) for combo in combos]
    checked = []
    for i, (s, combo) in enumerate(zip(specs, combos)):
        try:
            checked.append(queues.validate(redis, s, settings))  # (as submitted: the live default GPUs)
            quota.check_fits(redis, owner, Kept(checked[-1]))
        except ValidationError as exc:
            raise type(exc)(  # a combination whose one problem is a missing dataset is a 404, as a job's
                {f"combination {i + 1} {json.dumps(combo)}: {k}": v for k, v in exc.fields.items()}
            ) from None
    if dry_run:  # (each as it would be submitted: its GPUs the live workers' default, as a trial's are — #67)
        shown_specs = [spec_mod.shown(s) for s in checked]
        return {"dry_run": True, "search": "grid", "jobs": len(specs), "specs": shown_specs, "metric": metric,
                "mode": mode, "max_concurrent": cap}  # fmt: skip
    sweep_id = int(redis.incr(SWEEP_COUNTER_KEY))
    record = {
        "id": sweep_id,
        "search": "grid",
        "grid": body["grid"],
        "base": spec_mod.shown(body["base"]) if isinstance(body["base"], dict) else body["base"],  # no secret kept
        "job_ids": [],
        "created_at": time.time(),
        "owner": owner,
        "max_concurrent": cap,
        "metric": metric,
        "mode": mode,
    }
    # (written first: the scheduler may place the first jobs while the others are submitted, by max_concurrent)
    redis.set(sweep_key(sweep_id), json.dumps(record))
    jobs = []
    for n, (s, combo) in enumerate(zip(specs, combos)):
        s = {**s, "tags": [*(s.get("tags") or []), f"sweep:{sweep_id}"], "name": _name(combo, body, sweep_id)}
        extra = {"sweep_id": sweep_id, "trial": {"number": n, "values": combo}, **({"owner": owner} if owner else {})}
        jobs.append(queues.submit(redis, s, settings, extra=extra))
    record["job_ids"] = [j["id"] for j in jobs]
    redis.set(sweep_key(sweep_id), json.dumps(record))
    return {**record, "jobs": jobs}


def _create_search(
    redis: Redis, body: dict[str, Any], settings: Settings, owner: str | None, dry_run: bool = False
) -> dict[str, Any]:
    if body.get("search") not in search.SEARCHES:
        raise ValidationError({"search": f"must be one of {', '.join(search.SEARCHES)}, got {body.get('search')!r}"})
    fields = search.parse(redis, body, settings, owner)
    base_spec = queues.validate(redis, body["base"], settings)
    quota.check_fits(redis, owner, Kept(base_spec))
    if dry_run:  # (the base as its trials are submitted: the live workers' default GPUs — issue 67 #5)
        return {"dry_run": True, **fields, "base": spec_mod.shown(base_spec)}
    sweep_id = int(redis.incr(SWEEP_COUNTER_KEY))
    base = body["base"]  # (kept whole: its trials are submitted later, secret_env and all)
    record = {"id": sweep_id, **fields, "base": base, "job_ids": [], "created_at": time.time(), "owner": owner}
    redis.set(sweep_key(sweep_id), json.dumps(record))
    try:
        launched = search.start(redis, settings, record)
    except Exception:  # (all or nothing: no sweep is left without its study or its first trials)
        search.forget(redis, sweep_id)
        raise
    store = JobStore(redis)
    return {**record, "base": spec_mod.shown(base), "job_ids": [t["job"] for t in launched if t["job"]],
            "jobs": [store.get(t["job"]) for t in launched if t["job"]]}  # fmt: skip


def _name(combo: dict[str, Any], body: dict[str, Any], sweep_id: int) -> str:
    """A job of a sweep is named by its swept values: `sweep 3 lr=0.1 model=lenet` (the base's name, when it has
    one, instead of `sweep 3`); a grid over `name` itself keeps those names."""
    if "name" in body["grid"]:
        return str(combo["name"])
    swept = " ".join(f"{key.rpartition('.')[2]}={_short(value)}" for key, value in combo.items())
    return f"{body['base'].get('name') or f'sweep {sweep_id}'} {swept}"[: spec_mod.NAME_MAX]


def _short(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _get(spec: dict[str, Any], key: str) -> Any:
    top, _, sub = key.partition(".")
    return (spec.get("params") or {}).get(sub) if sub else spec.get(top)


def max_concurrent(redis: Redis, sweep_id: int) -> int | None:
    """How many of a sweep's jobs may hold workers at once (None: no limit, or the sweep is gone)."""
    raw = redis.get(sweep_key(sweep_id))
    return json.loads(raw).get("max_concurrent") if raw else None


def record_of(redis: Redis, sweep_id: int) -> dict[str, Any]:
    """A sweep's record (base, grid or search space and rules, owner); NotFound when there is none."""
    raw = redis.get(sweep_key(sweep_id))
    if raw is None:
        raise NotFound(f"sweep {sweep_id} does not exist", {"id": sweep_id})
    return json.loads(raw)


def summary(redis: Redis, sweep_id: int, redis_url: str | None = None) -> dict[str, Any]:
    """A sweep as its user reads it, grid or search alike: its state, its trials ranked by the metric (each with
    its job, values, metric, status, whether it was stopped early and at which rung), the best, the rungs of a
    search stopped by successive halving, the budget left; and `jobs` (the rows of older clients)."""
    record = record_of(redis, sweep_id)
    kind = record.get("search", "grid")
    if kind == "grid":
        kept = [{"number": n, "job": j, "values": None} for n, j in enumerate(record["job_ids"])]
    else:
        kept = search.trials(redis, sweep_id)
    metric, mode = record.get("metric", "test_accuracy"), record.get("mode", "max")
    store = JobStore(redis)
    rows, trials = [], []
    last_end = 0.0  # (when its last trial ended: a sweep's time stops there once nothing of it runs)
    for trial in kept:
        try:
            rec = store.get(trial["job"]) if trial["job"] is not None else None
        except NotFound:
            rec = None  # (deleted since)
        had: dict[str, Any] = rec or {}
        spec = rec["spec"] if rec else apply_values(record, trial)
        values = trial["values"]
        if values is None:  # a grid's job: its combination (jobs of sweeps made before it was kept: from the spec)
            values = (had.get("trial") or {}).get("values") or {k: _get(spec, k) for k in record["grid"]}
        result = had.get("result") or {}
        value = trial.get("metric") if kind != "grid" else _metric_of(rec, metric)
        if kind != "grid" and value is None and trial.get("state") != "ended":
            value = trial.get("last")  # (running: the last reported)
        status = rec["status"] if rec else "deleted"
        if rec and rec.get("ended_at"):
            last_end = max(last_end, float(rec["ended_at"]))
        early = bool(rec and rec.get("reason") == "stopped_early")
        trials.append(
            {
                "number": trial["number"],
                "job": trial["job"],
                "name": spec.get("name"),
                "values": values,
                "metric": value,
                "status": status,
                "reason": had.get("reason") or trial.get("error"),
                "stopped_early": early,
                "rung": (had.get("early_stop") or {}).get("rung", trial.get("rung")) if early else trial.get("rung"),
                "step": trial.get("step") if kind != "grid" else (had.get("progress") or {}).get("step"),
                "fraction": views.fraction(rec) if rec else None,
            }
        )
        if rec is not None:
            rows.append(
                {
                    "job_id": trial["job"],
                    "name": spec.get("name"),
                    "status": status,
                    "fraction": views.fraction(rec),
                    "reason": rec.get("reason"),
                    **values,
                    "metric": value,
                    "stopped_early": early,
                    "rung": trials[-1]["rung"],
                    "test_accuracy": result.get("test_accuracy"),
                    "test_loss": result.get("test_loss"),
                    "last_loss": (rec.get("metrics") or {}).get("loss"),
                }
            )
    sign = -1.0 if mode == "max" else 1.0

    def ranked(r: dict[str, Any]) -> bool:
        """Trials that ended well, finished or stopped early, rank by their metric (the last a stopped one reported:
        as Determined and Ray Tune rank); running and failed ones do not."""
        return r["metric"] is not None and r["status"] == "succeeded"

    def order(r: dict[str, Any]) -> tuple:
        """Ranked trials best first, then the rest (running, failed) by their last value."""
        return (not ranked(r), r["metric"] is None, sign * (r["metric"] or 0.0), r.get("job") or r.get("job_id") or 0)

    trials.sort(key=order)
    rows.sort(key=order)
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank if ranked(row) else None
    done = sum(r["status"] in ENDED for r in rows)
    best = next((t for t in trials if ranked(t)), None)
    stopped = redis.get(sweep_stop_key(sweep_id))
    unended = any(t["status"] not in (*ENDED, "deleted") for t in trials)
    if kind == "grid":
        state = "running" if unended else "stopped" if stopped else "done"
    else:
        state = "running" if redis.sismember(SEARCHING_KEY, sweep_id) or unended else "stopped" if stopped else "done"
        if state == "stopped" and stopped and stopped.decode().startswith(search.FAILED):
            state = "failed"
    out = {
        "id": sweep_id,
        "search": kind,
        "state": state,
        "stopped": stopped.decode() if stopped else None,
        "base": record["base"],
        "grid": record.get("grid") or {},
        "space": record.get("space"),
        "stopping": record.get("stopping"),
        "metric": metric,
        "mode": mode,
        "owner": record.get("owner"),
        "max_concurrent": record.get("max_concurrent"),
        "max_trials": record.get("max_trials", len(kept)),
        "time_budget": record.get("time_budget"),
        "seed": record.get("seed"),
        "created_at": iso(record.get("created_at")),
        "trials": trials,
        "best": {**best, "job_id": best["job"], "test_accuracy": _best_row(rows, best)} if best else None,
        "rungs": [],
        "budget": _budget(record, trials, None if state == "running" else last_end or None),
        "jobs": rows,
        "ended": done,
        "total": len(rows),
    }
    if kind != "grid" and redis_url is not None:
        out["rungs"] = search.rungs(record, kept, search.frozen_trials(redis_url, record))
    return out


def _best_row(rows: list[dict[str, Any]], best: dict[str, Any]) -> Any:
    return next((r["test_accuracy"] for r in rows if r["job_id"] == best["job"]), None)


def _budget(record: dict[str, Any], trials: list[dict[str, Any]], ended_at: float | None = None) -> dict[str, Any]:
    """What a sweep has used and has left: trials, steps trained, time (until `ended_at`, its last trial's end, once
    it runs no more: a finished sweep's time does not grow — issue 67 #5)."""
    created = record.get("created_at", time.time())
    used_s = max(0.0, (ended_at if ended_at is not None else time.time()) - created)
    budget = record.get("time_budget")
    return {
        "trials": len(trials),
        "trials_left": max(0, record.get("max_trials", len(trials)) - len(trials)),
        "steps": sum(t["step"] or 0 for t in trials),
        "time_used_s": round(used_s, 1),
        "time_left_s": round(max(0.0, budget - used_s), 1) if budget is not None else None,
    }


def _metric_of(rec: Job | None, metric: str) -> float | None:
    """A grid job's value of the metric: its result's, else its newest point's."""
    if rec is None:
        return None
    for source in (rec.get("result") or {}, rec.get("metrics") or {}):
        value = source.get(metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def apply_values(record: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    """The spec a trial's job was given (for a trial whose job is gone)."""
    return search.apply(record["base"], trial["values"] or {})


def listing(redis: Redis, limit: int = 50) -> list[dict[str, Any]]:
    """The newest sweeps, each in brief."""
    last = int(redis.get(SWEEP_COUNTER_KEY) or 0)
    out: list[dict[str, Any]] = []
    for sweep_id in range(last, 0, -1):
        if len(out) >= limit:
            break
        raw = redis.get(sweep_key(sweep_id))
        if raw is None:
            continue
        record = json.loads(raw)
        kept = search.trials(redis, sweep_id) if record.get("search", "grid") != "grid" else record["job_ids"]
        stopped = redis.exists(sweep_stop_key(sweep_id))
        searching = redis.sismember(SEARCHING_KEY, sweep_id)
        out.append(
            {
                "id": sweep_id,
                "search": record.get("search", "grid"),
                "name": record["base"].get("name") if isinstance(record.get("base"), dict) else None,
                "owner": record.get("owner"),
                "metric": record.get("metric", "test_accuracy"),
                "trials": len(kept),
                "max_trials": record.get("max_trials", len(kept)),
                "state": "running" if searching else ("stopped" if stopped else None),  # (a failed one: stopped)
                "created_at": iso(record.get("created_at")),
            }
        )
    return out
