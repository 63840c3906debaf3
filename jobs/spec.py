"""Job specs: every field validated before anything is queued; unknown fields refused by name."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs.errors import ValidationError
from jobs.keys import PRIORITIES
from models import params as params_mod
from models.catalog import MODELS, model_info, parse_dataset

MAX_GPUS = 16
"""Most GPUs one job (one worker) may ask for."""
MAX_WORKERS = 64
"""Most tasks (workers) of one multi-worker job."""

FIELDS = (
    "model",
    "dataset",
    "params",
    "gpus",
    "name",
    "tags",
    "priority",
    "timeout",
    "max_retries",
    "workers",
    "chief",
)


def is_multi_worker(spec: dict[str, Any]) -> bool:
    """Whether a spec runs as several tasks (gang-scheduled, see jobs.gang)."""
    return int(spec.get("workers") or 1) > 1


def _int_in(value: Any, lo: int, hi: int) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"must be an integer, got {type(value).__name__} {value!r}"
    if not lo <= value <= hi:
        return f"must be between {lo} and {hi}, got {value}"
    return None


def check_data_path(path: str, roots: tuple[Path, ...]) -> str | None:
    """None when `path` (symlinks and .. resolved) lies under one of `roots`, else what is wrong."""
    if not roots:
        return f"server path {path!r} refused: no GPUDECK_DATA_ROOTS are configured"
    real = Path(os.path.realpath(path))
    if not any(real == root or root in real.parents for root in roots):
        return f"server path {path!r} is not under GPUDECK_DATA_ROOTS ({', '.join(map(str, roots))})"
    return None


Pin = Callable[[str, "str | None"], "tuple[str | None, str | None]"]
"""Looks up an uploaded dataset: (name, version or None) -> (`name:version`, None) or (None, problem)."""


def validate(
    body: Any, *, default_gpus: int, data_roots: tuple[Path, ...] = (), pin: Pin | None = None
) -> dict[str, Any]:
    """The normalized spec (defaults filled in, an uploaded dataset pinned to its version), or ValidationError
    naming every bad field."""
    if not isinstance(body, dict):
        raise ValidationError({"body": f"must be a JSON object, got {type(body).__name__}"})
    errors: dict[str, str] = {}
    for key in body:
        if key not in FIELDS:
            errors[key] = f"unknown field; accepted: {', '.join(FIELDS)}"
    for key in ("model", "dataset"):
        if key not in body:
            errors[key] = "is required"
    model = body.get("model")
    if "model" in body and (not isinstance(model, str) or model_info(model) is None):
        errors["model"] = f"unknown model {model!r}; known: {', '.join(MODELS)}"
    dataset = body.get("dataset")
    if "dataset" in body:
        try:
            ref = parse_dataset(body["dataset"])
            problem = check_data_path(ref.path, data_roots) if ref.kind == "path" else None
            if ref.kind == "stored":
                dataset, problem = pin(ref.name, ref.version) if pin else (None, "uploaded datasets are not available")
            if problem:
                errors["dataset"] = problem
        except ValueError as exc:
            errors["dataset"] = str(exc)
    errors.update(params_mod.validate(body.get("params", {})))
    checks = {
        "gpus": lambda v: _int_in(v, 0, MAX_GPUS),
        "timeout": lambda v: _int_in(v, 1, 30 * 24 * 3600),
        "max_retries": lambda v: _int_in(v, 0, 10),
        "workers": lambda v: _int_in(v, 1, MAX_WORKERS),
        "chief": lambda v: (
            f"must be true or false, got {v!r}"
            if not isinstance(v, bool)
            else "needs workers of 2 or more (the chief is task 0 of a multi-worker job)"
            if v and not (isinstance(body.get("workers"), int) and body["workers"] > 1)
            else None
        ),
        "priority": lambda v: None if v in PRIORITIES else f"must be one of {', '.join(PRIORITIES)}, got {v!r}",
        "name": lambda v: (
            None if isinstance(v, str) and 0 < len(v) <= 200 else f"must be a string of 1 to 200 characters, got {v!r}"
        ),
        "tags": lambda v: (
            None
            if isinstance(v, list) and len(v) <= 50 and all(isinstance(t, str) and 0 < len(t) <= 64 for t in v)
            else "must be a list of at most 50 strings of 1 to 64 characters"
        ),
    }
    for key, check in checks.items():
        if key in body and body[key] is not None:
            problem = check(body[key])
            if problem:
                errors[key] = problem
    if errors:
        raise ValidationError(errors)
    return {
        "model": model,
        "dataset": dataset,
        "params": dict(body.get("params") or {}),
        "gpus": body["gpus"] if body.get("gpus") is not None else default_gpus,
        "name": body.get("name") or model,
        "tags": list(body.get("tags") or []),
        "priority": body.get("priority") or "normal",
        "timeout": body.get("timeout"),
        "max_retries": body.get("max_retries") if body.get("max_retries") is not None else 1,
        "workers": body.get("workers") or 1,
        "chief": bool(body.get("chief")),
    }
