"""What a job was, as plain fields: its configuration as dotted names (what `gpudeck compare` diffs and what an
MLflow run's params are) and its metric points as series (what an export logs). It reads the API's view of a job
(`GET /api/v1/jobs/ID`), so the server and a client make the same fields from it."""

from __future__ import annotations

import math
from typing import Any, TypeGuard

NOT_CONFIG = frozenset({"name", "after", "notify", "tags", "export", "project"})
"""Spec fields that name or steer a job rather than configure what it trains."""
POINT_KEYS = ("step", "epoch", "time", "run")
"""Fields of a metric point that place it rather than measure something."""


def number(value: Any) -> TypeGuard[float]:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """`value` into `out` as dotted fields under `prefix` (a dict's keys one level down; anything else as it is)."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            flat(f"{prefix}.{k}" if prefix else k, v, out)
    else:
        out[prefix] = value


def config_of(view: dict[str, Any]) -> dict[str, Any]:
    """A job's configuration as dotted fields: its spec (env values as the view shows them: hidden from who is not
    the job's owner; secret_env by name only), its kind, its source's git commit, and its project environment's
    digest."""
    spec = {k: v for k, v in view["spec"].items() if k not in NOT_CONFIG and k != "secret_env"}
    out: dict[str, Any] = {"kind": view.get("kind")}
    flat("", spec, out)
    if view["spec"].get("secret_env"):
        out["secret_env names"] = ",".join(sorted(view["spec"]["secret_env"]))
    source = view.get("source") or {}
    for key in ("git_commit", "git_dirty"):
        if key in source:
            out[f"source.{key}"] = source[key]
    if view.get("env_digest"):
        out["environment digest"] = view["env_digest"]
    return out


def metric_names(point: dict[str, Any]) -> list[str]:
    """The names of the numbers a point measures."""
    return [k for k, v in point.items() if k not in POINT_KEYS and number(v)]
