"""Sweeps: a grid over spec fields (`model`, `params.lr`, …) expanded into one job per combination."""

from __future__ import annotations

import copy
import itertools
import json
import time
from typing import Any

from redis import Redis

from jobs import queues, quota
from jobs import spec as spec_mod
from jobs.errors import NotFound, TooLarge, ValidationError
from jobs.keys import SWEEP_COUNTER_KEY, sweep_key
from jobs.settings import Settings
from jobs.store import JobStore
from models.states import ENDED

MAX_JOBS = 500
"""Most jobs one sweep may create."""


def expand(base: Any, grid: Any) -> list[dict[str, Any]]:
    """Every combination of the grid applied to the base spec, in grid order; ValidationError names bad keys."""
    if not isinstance(base, dict):
        raise ValidationError({"base": "must be a job spec object"})
    if not isinstance(grid, dict) or not grid:
        raise ValidationError({"grid": "must be a non-empty object of field -> list of values"})
    errors = {}
    for key, values in grid.items():
        top, _, sub = key.partition(".")
        if top not in spec_mod.FIELDS or (sub and top != "params") or (top == "params" and not sub):
            errors[f"grid.{key}"] = "must name a spec field (model, dataset, gpus, …) or params.<name>"
        elif not isinstance(values, list) or not values:
            errors[f"grid.{key}"] = "must be a non-empty list of values"
    if errors:
        raise ValidationError(errors)
    count = 1
    for values in grid.values():
        count *= len(values)
    if count > MAX_JOBS:
        raise TooLarge(f"grid: expands to {count} jobs; at most {MAX_JOBS}", {"field": "grid", "jobs": count})
    specs = []
    for combo in itertools.product(*grid.values()):
        spec = copy.deepcopy(base)
        for key, value in zip(grid, combo):
            top, _, sub = key.partition(".")
            if sub:
                spec.setdefault("params", {})
                if isinstance(spec["params"], dict):
                    spec["params"][sub] = value
            else:
                spec[top] = value
        specs.append(spec)
    return specs


def create(redis: Redis, body: Any, settings: Settings | None = None, owner: str | None = None) -> dict[str, Any]:
    """Validate every combination first (all or nothing), then submit one job each (all `owner`'s) under a new
    sweep id."""
    if not isinstance(body, dict) or set(body) - {"base", "grid", "max_concurrent"}:
        raise ValidationError(
            {"body": 'must be {"base": <job spec>, "grid": {field: [values]}} (and optionally "max_concurrent": N)'}
        )
    cap = body.get("max_concurrent")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise ValidationError({"max_concurrent": f"must be a whole number of 1 or more, got {cap!r}"})
    specs = expand(body.get("base"), body.get("grid"))
    for i, s in enumerate(specs):
        try:
            quota.check_fits(redis, owner, queues.validate(redis, s, settings, default_gpus=0))
        except ValidationError as exc:
            combo = {k: _get(s, k) for k in body["grid"]}
            raise type(exc)(  # a combination whose one problem is a missing dataset is a 404, as a job's
                {f"combination {i + 1} {json.dumps(combo)}: {k}": v for k, v in exc.fields.items()}
            ) from None
    sweep_id = int(redis.incr(SWEEP_COUNTER_KEY))
    record = {
        "id": sweep_id,
        "grid": body["grid"],
        "base": spec_mod.shown(body["base"]) if isinstance(body["base"], dict) else body["base"],  # no secret kept
        "job_ids": [],
        "created_at": time.time(),
        "owner": owner,
        "max_concurrent": cap,
    }
    # (written first: the scheduler may place the first jobs while the others are submitted, by max_concurrent)
    redis.set(sweep_key(sweep_id), json.dumps(record))
    jobs = []
    for s in specs:
        s = {**s, "tags": [*(s.get("tags") or []), f"sweep:{sweep_id}"], "name": _name(s, body, sweep_id)}
        extra = {"sweep_id": sweep_id, **({"owner": owner} if owner else {})}
        jobs.append(queues.submit(redis, s, settings, extra=extra))
    record["job_ids"] = [j["id"] for j in jobs]
    redis.set(sweep_key(sweep_id), json.dumps(record))
    return {**record, "jobs": jobs}


def _name(spec: dict[str, Any], body: dict[str, Any], sweep_id: int) -> str:
    """A job of a sweep is named by its swept values: `sweep 3 lr=0.1 model=lenet` (the base's name, when it has
    one, instead of `sweep 3`); a grid over `name` itself keeps those names."""
    if "name" in body["grid"]:
        return str(spec["name"])
    swept = " ".join(f"{key.rpartition('.')[2]}={_short(_get(spec, key))}" for key in body["grid"])
    return f"{body['base'].get('name') or f'sweep {sweep_id}'} {swept}"[: spec_mod.NAME_MAX]


def _short(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _get(spec: dict[str, Any], key: str) -> Any:
    top, _, sub = key.partition(".")
    return (spec.get("params") or {}).get(sub) if sub else spec.get(top)


def _fraction(rec: dict[str, Any]) -> float | None:
    p = rec.get("progress") or {}
    return round(p["step"] / p["total_steps"], 4) if p.get("step") is not None and p.get("total_steps") else None


def max_concurrent(redis: Redis, sweep_id: int) -> int | None:
    """How many of a sweep's jobs may hold workers at once (None: no limit, or the sweep is gone)."""
    raw = redis.get(sweep_key(sweep_id))
    return json.loads(raw).get("max_concurrent") if raw else None


def summary(redis: Redis, sweep_id: int) -> dict[str, Any]:
    """The sweep's jobs as a table, best final test accuracy first (unfinished jobs last)."""
    raw = redis.get(sweep_key(sweep_id))
    if raw is None:
        raise NotFound(f"sweep {sweep_id} does not exist", {"id": sweep_id})
    record = json.loads(raw)
    store = JobStore(redis)
    rows = []
    for job_id in record["job_ids"]:
        rec = store.get(job_id)
        result = rec.get("result") or {}
        rows.append(
            {
                "job_id": job_id,
                "name": rec["spec"].get("name"),
                "status": rec["status"],
                "fraction": _fraction(rec),
                "reason": rec.get("reason"),
                **{k: _get(rec["spec"], k) for k in record["grid"]},
                "test_accuracy": result.get("test_accuracy"),
                "test_loss": result.get("test_loss"),
                "last_loss": (rec.get("metrics") or {}).get("loss"),
            }
        )
    rows.sort(key=lambda r: (r["test_accuracy"] is None, -(r["test_accuracy"] or 0.0), r["job_id"]))
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank if row["test_accuracy"] is not None else None
    done = sum(r["status"] in ENDED for r in rows)
    return {
        "id": sweep_id,
        "grid": record["grid"],
        "base": record["base"],
        "owner": record.get("owner"),
        "max_concurrent": record.get("max_concurrent"),
        "jobs": rows,
        "ended": done,
        "total": len(rows),
        "best": rows[0] if rows and rows[0]["rank"] else None,
    }
