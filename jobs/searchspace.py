"""What a search asks for, checked (the request half of jobs.search): its body validated field by field (the space's
keys and distributions, the metric, the budget, the stopping rule), each range's ends and each choice applied to the
base and validated as a job spec (a trial is never refused later), and a trial's values applied to the base
(`apply`, `trial_name`). Nothing of Optuna: jobs.search samples, stops and drives; it re-exports these names."""

from __future__ import annotations

import copy
import json
import math
import random
import re
from typing import Any

from redis import Redis

from jobs import queues, tokens
from jobs import spec as spec_mod
from jobs.errors import Forbidden, ValidationError
from jobs.settings import Settings
from models.common import AGE, parse_age
from models.searchinput import (  # noqa: F401 (declared there, with the body they check)
    DEFAULT_CONCURRENT,
    DEFAULT_TRIALS,
    DISTRIBUTIONS,
    MAX_TRIALS,
    SEARCHES,
    STOPPINGS,
    ZOO_METRICS,
    problems,
)

METRIC_NAME = re.compile(r"[A-Za-z0-9_./-]{1,100}")
FIELDS = {
    "base", "grid", "space", "search", "stopping", "metric", "mode", "max_trials", "max_concurrent", "time_budget",
    "seed",
}  # fmt: skip


# -- the request -------------------------------------------------------------------------------------------------
def is_search(body: Any) -> bool:
    return isinstance(body, dict) and body.get("search", "grid") != "grid"


def parse(redis: Redis, body: dict[str, Any], settings: Settings, owner: str | None = None) -> dict[str, Any]:
    """The record fields of a search (random or tpe), every field checked; ValidationError names each bad one.
    The base is validated with every range's ends and every choice, so a trial is not refused later; each of them
    passes `owner`'s token's rules as a job sent directly would (Forbidden naming `space.KEY`)."""
    errors: dict[str, str] = {}
    unknown = set(body) - FIELDS
    if unknown:
        errors["body"] = f"unknown fields {sorted(unknown)}; a search takes {sorted(FIELDS - {'grid'})}"
    base = body.get("base")
    if not isinstance(base, dict):
        raise ValidationError({"base": "must be a job spec object", **errors})
    command = base.get("command") is not None
    if body.get("grid") is not None:
        errors["grid"] = f'a {body["search"]} search samples from `space`; `grid` is for "search": "grid"'
    space = body.get("space")
    if not isinstance(space, dict) or not space:
        errors["space"] = 'must be a non-empty object: {"params.lr": {"loguniform": [1e-4, 1.0]}, …}'
        space = {}
    for key, dist in space.items():
        problem = key_problem(key, base, command) or _distribution_problem(dist)
        if problem:
            errors[f"space.{key}"] = problem
    metric = body.get("metric", "test_accuracy" if not command else None)
    if metric is None:
        errors["metric"] = "a command job's search needs one: a scalar its script logs, e.g. val_accuracy or loss"
    elif not isinstance(metric, str) or not METRIC_NAME.fullmatch(metric):
        errors["metric"] = "must name a scalar the job reports, e.g. val_accuracy or loss"
    elif not command and metric not in ZOO_METRICS:
        errors["metric"] = f"a model job reports {', '.join(ZOO_METRICS)}; got {metric!r}"
    mode = body.get("mode", "min" if isinstance(metric, str) and ("loss" in metric or "error" in metric) else "max")
    if mode not in ("min", "max"):
        errors["mode"] = f"must be min or max, got {mode!r}"
    max_trials = _whole(body.get("max_trials", DEFAULT_TRIALS), "max_trials", 1, MAX_TRIALS, errors)
    concurrent = _whole(body.get("max_concurrent", DEFAULT_CONCURRENT), "max_concurrent", 1, MAX_TRIALS, errors)
    budget = body.get("time_budget")
    if isinstance(budget, str) and AGE.match(budget.strip().lower()):  # (the one grammar: 90m, 1h30m)
        budget = parse_age(budget)
    if budget is not None and (
        not isinstance(budget, int) or isinstance(budget, bool) or not 1 <= budget <= MAX_BUDGET_S
    ):
        shown_budget = budget if not isinstance(budget, int) or abs(budget) < 10**12 else f"{len(str(budget))} digits"
        errors["time_budget"] = (
            f"must be seconds (a whole number from 1 to {MAX_BUDGET_S}) or an age such as 30m, got {shown_budget!r}"
        )
    seed = body.get("seed", random.randrange(2**31))
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**31:
        errors["seed"] = f"must be a whole number from 0 to 2147483647, got {seed!r}"
    stopping = _stopping(body.get("stopping"), errors)
    if not errors:  # (what the document says of the body: a search it refuses is never taken)
        errors.update(problems(body))
    if errors:
        raise ValidationError(errors)
    who = tokens.named(redis, owner)[0] if owner else None
    for key, values in _probes(space).items():  # each range's ends, each choice: the spec takes them all
        for value in values:
            probe = apply(base, {**_firsts(space), key: value})
            try:
                queues.validate(redis, probe, settings)
            except ValidationError as exc:
                fields = {f"space.{key}": f"with {key}={value!r}: {k}: {v}" for k, v in exc.fields.items()}
                raise type(exc)(fields) from None
            refused = tokens.refusal(who, probe, spec_mod.is_command(probe))
            if refused is not None:
                raise Forbidden(
                    f"space.{key}: with {key}={value!r}: {refused[0]}", {**refused[1], "field": f"space.{key}"}
                )
    queues.validate(redis, base, settings)
    return {
        "search": body["search"],
        "space": space,
        "stopping": stopping,
        "metric": metric,
        "mode": mode,
        "max_trials": max_trials,
        "max_concurrent": concurrent,
        "time_budget": budget,
        "seed": seed,
    }


def _whole(value: Any, field: str, low: int, high: int, errors: dict[str, str]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        errors[field] = f"must be a whole number from {low} to {high}, got {value!r}"
        return low
    return value


def _stopping(raw: Any, errors: dict[str, str]) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("kind") not in STOPPINGS:
        errors["stopping"] = 'must be {"kind": "asha", "min_steps": N, "reduction_factor": 3} or {"kind": "median"}'
        return None
    allowed = {"kind", "min_steps", "reduction_factor"} if raw["kind"] == "asha" else {"kind", "min_steps"}
    if set(raw) - allowed:
        errors["stopping"] = f"{raw['kind']} takes {sorted(allowed)}; unknown {sorted(set(raw) - allowed)}"
    out = {"kind": raw["kind"], "min_steps": _whole(raw.get("min_steps", 1), "stopping.min_steps", 1, 10**9, errors)}
    if raw["kind"] == "asha":
        out["reduction_factor"] = _whole(raw.get("reduction_factor", 3), "stopping.reduction_factor", 2, 100, errors)
    return out


def key_problem(key: str, base: dict[str, Any], command: bool) -> str | None:
    """Why `key` cannot be searched over for this base (None: it can)."""
    top, _, sub = key.partition(".")
    if top == "params" and sub:
        return "params are a model job's; a command job searches env.NAME or args.NAME" if command else None
    if top in ("env", "args") and sub:
        if not command:
            return f"{top}.NAME is a command job's; a model job searches params.<name>"
        if not spec_mod.ENV_NAME.fullmatch(sub):
            return f"{sub!r} is not a variable name (letters, digits, _)"
        if top == "args" and "{" + sub + "}" not in json.dumps(base.get("command")):
            return f"the command has no {{{sub}}} to put the value in"
        return None
    if top in spec_mod.FIELDS and not sub and top not in ("command", "env", "params", "secret_env"):
        return None
    return "must be params.<name>, env.<NAME>, args.<NAME> (a {NAME} in the command) or a spec field"


def _distribution_problem(dist: Any) -> str | None:
    if not isinstance(dist, dict) or len(dist) != 1 or next(iter(dist)) not in DISTRIBUTIONS:
        return f"must be one of {{{', '.join(f'{k!r}: …' for k in DISTRIBUTIONS)}}}"
    ((kind, arg),) = dist.items()
    if kind == "choice":
        ok = isinstance(arg, list) and arg and all(v is None or isinstance(v, (bool, int, float, str)) for v in arg)
        if not ok:
            return "choice: must be a non-empty list of numbers, strings, booleans or null"
        if len(arg) > MAX_CHOICES:
            return f"choice: at most {MAX_CHOICES} values, got {len(arg)}"
        if any(isinstance(v, (int, float)) and not isinstance(v, bool) and not _number(v) for v in arg):
            return f"choice: numbers must be finite and within ±{MAX_INT}"
        return None
    numbers = isinstance(arg, list) and len(arg) == 2 and all(_number(v) for v in arg)
    if not numbers:
        return f"{kind}: must be [low, high], two finite numbers within ±{MAX_INT}"
    low, high = arg
    if not math.isfinite(float(high) - float(low)):
        return f"{kind}: the range [{low}, {high}] is wider than a float can hold"
    if kind == "int" and not all(isinstance(v, int) for v in arg):
        return f"int: [low, high] must be whole numbers, got {arg}"
    if not low < high:
        return f"{kind}: the range [{low}, {high}] is empty or inverted: low must be below high"
    if kind == "loguniform" and low <= 0:
        return f"loguniform: both bounds must be above 0, got {low}"
    return None


MAX_INT = 2**53
"""The largest bound of an `int` range (and a number of a range at all): what a float holds exactly and Optuna's
samplers draw from."""
MAX_CHOICES = 1000
"""The most distinct values of one `choice` (issue 62 #8: 20,000 took 83 s of an API process to validate)."""
MAX_BUDGET_S = 366 * 86400
"""The longest `time_budget`: a year."""
PROBED = 32
"""How many of a choice's values are applied to the base and validated as a job spec one by one (the first ones,
and the least and the greatest number); the rest are checked by type."""


def _number(v: Any) -> bool:
    """A finite number of a range (an int within MAX_INT: 10**400 is none, and no float either)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, int):
        return -MAX_INT <= v <= MAX_INT
    return math.isfinite(v)


def _probes(space: dict[str, Any]) -> dict[str, list[Any]]:
    """The values of each key validated as a job spec: a range's ends; a choice's distinct values, at most PROBED
    of them (the first ones, the least and the greatest number, one of each type): validating a spec is
    milliseconds, and a choice of a thousand values must not cost seconds of the API."""
    out = {}
    for k, d in space.items():
        if "choice" not in d:
            out[k] = list(next(iter(d.values())))
            continue
        distinct = list({(type(v).__name__, v): v for v in d["choice"]}.values())
        numbers = [v for v in distinct if isinstance(v, (int, float)) and not isinstance(v, bool)]
        picked = distinct[:PROBED] + ([min(numbers), max(numbers)] if numbers else [])
        picked += list({type(v).__name__: v for v in distinct}.values())
        out[k] = list({(type(v).__name__, v): v for v in picked}.values())
    return out


def _firsts(space: dict[str, Any]) -> dict[str, Any]:
    return {k: v[0] for k, v in _probes(space).items()}


def apply(base: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The base spec with a trial's values: params.X into params, env.X into env (as text), args.X for each {X}
    of the command, a spec field as itself."""
    spec = copy.deepcopy(base)
    for key, value in values.items():
        top, _, sub = key.partition(".")
        if not sub:
            spec[top] = value
        elif top == "params":
            spec["params"] = {**(spec.get("params") or {}), sub: value}
        elif top == "env":
            spec["env"] = {**(spec.get("env") or {}), sub: _text(value)}
        elif top == "args":
            command = spec["command"]
            put = "{" + sub + "}"
            if isinstance(command, list):
                spec["command"] = [part.replace(put, _text(value)) for part in command]
            else:
                spec["command"] = command.replace(put, _text(value))
        else:
            spec[top] = value
    return spec


def _text(value: Any) -> str:
    return format(value, ".6g") if isinstance(value, float) else str(value)


def trial_name(base: dict[str, Any], sweep_id: int, values: dict[str, Any]) -> str:
    """`sweep 3 lr=0.0123 momentum=0.9` (the base's name instead of `sweep 3` when it has one)."""
    swept = " ".join(f"{k.rpartition('.')[2]}={_text(v)}" for k, v in values.items())
    return f"{base.get('name') or f'sweep {sweep_id}'} {swept}"[: spec_mod.NAME_MAX]
