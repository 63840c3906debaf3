"""Runs side by side (GET /api/v1/compare, `gpudeck compare`, the TUI's compare screen): the fields of their
configuration that differ, their results with the best of each column, and one metric's curves on one x axis.
Zoo jobs, command jobs (each of their runs a curve) and a search's trials alike; what it reads is the API's own
view of each job, so a user who is not a job's owner sees no more of it here than in GET /api/v1/jobs/ID."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from jobs.errors import BadRequest
from models import params
from models.common import size_text
from models.runinfo import config_of, metric_names, number

MAX_JOBS = 20
"""Most jobs one comparison takes."""
MAX_POINTS = 1000
"""Most points of one curve in an answer (a longer one is thinned evenly, its last point kept)."""
X_AXES = ("step", "epoch", "time")
"""What a curve's x may be: the step, the epoch, or seconds since the job's first point."""
RESULTS_FIRST = ("test_accuracy", "test_top5", "test_loss")
"""The zoo's result columns, first; a command's own numbers follow, then what every job has (RESULTS_LAST)."""
RESULTS_LAST = ("last_loss", "duration_s", "images_per_sec", "gpu_hours")
NOT_RESULTS = frozenset({"steps", "epochs", "gpus_seen"})
"""Numbers of a result that count rather than measure (not ranked)."""


def lower_is_better(column: str) -> bool:
    """Whether the best of a results column is its smallest: losses, errors, time and GPU-hours."""
    return any(w in column for w in ("loss", "error", "duration", "gpu_hours", "_time"))


def parse_ids(raw: str | None) -> list[int]:
    """`12,15,19` (the query argument `jobs`) -> [12, 15, 19]; BadRequest naming what was wrong."""
    words = [w.strip() for w in (raw or "").split(",") if w.strip()]
    if len(words) < 2:
        raise BadRequest("query argument jobs: name at least two job ids, e.g. jobs=12,15", {"field": "jobs"})
    ids: list[int] = []
    for w in words:
        if not w.isdigit() or int(w) <= 0:
            raise BadRequest(f"query argument jobs: {w!r} is not a job id", {"field": "jobs"})
        if int(w) not in ids:
            ids.append(int(w))
    if len(ids) > MAX_JOBS:
        raise BadRequest(f"query argument jobs: at most {MAX_JOBS} jobs at once, got {len(ids)}", {"field": "jobs"})
    return ids


SIZES = ("gpu_memory",)
"""Fields that are bytes, shown as people write them (8G, not 8589934592)."""


def shown_config(view: dict[str, Any]) -> dict[str, Any]:
    """A job's configuration as a comparison shows it (issue 67 #7): a zoo job's params it left at their default
    given that default (a `-` read as "not set" where it was the model's own value), sizes as sizes."""
    config = config_of(view)
    model = view["spec"].get("model")
    if model:
        for name, value in params.defaults(model).items():
            if value is not None:
                config.setdefault(f"params.{name}", value)
    for name in SIZES:
        if isinstance(config.get(name), int):
            config[name] = size_text(config[name])
    return config


def differing(configs: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The fields whose values are not all the same (a field one job lacks differs), each with its values in the
    jobs' order; and how many fields are the same."""
    names: list[str] = []
    for c in configs:
        names.extend(k for k in c if k not in names)
    rows, same = [], 0
    for name in names:
        values = [c.get(name) for c in configs]
        if all(json.dumps(v, sort_keys=True) == json.dumps(values[0], sort_keys=True) for v in values):
            same += 1
        else:
            rows.append({"field": name, "values": values})
    return rows, same


def results_of(view: dict[str, Any], points: list[dict[str, Any]]) -> dict[str, Any]:
    """What a job achieved: its result's numbers, its last training loss, how long it ran, its speed, GPU-hours."""
    result = view.get("result") or {}
    out: dict[str, Any] = {k: v for k, v in result.items() if number(v) and k not in NOT_RESULTS}
    losses = [p["loss"] for p in points if number(p.get("loss"))]
    out["last_loss"] = losses[-1] if losses else None
    out["duration_s"] = result.get("duration_s") if number(result.get("duration_s")) else view.get("ran_s")
    out.setdefault("images_per_sec", None)
    gpu_seconds = view.get("gpu_seconds")
    out["gpu_hours"] = round(gpu_seconds / 3600, 4) if number(gpu_seconds) else None
    return out


def result_columns(results: Sequence[dict[str, Any]]) -> list[str]:
    """The columns of the results table: the zoo's, then each command's own numbers, then RESULTS_LAST."""
    columns = [c for c in RESULTS_FIRST if any(c in r for r in results)]
    for r in results:
        columns.extend(c for c in r if c not in columns and c not in RESULTS_LAST)
    return columns + list(RESULTS_LAST)


def best_of(results: Sequence[dict[str, Any]], columns: Sequence[str], ids: Sequence[int]) -> dict[str, int]:
    """Each column's best job (by its id), where at least two jobs have a number in it and they are not all equal."""
    best = {}
    for column in columns:
        had = [(r[column], job_id) for r, job_id in zip(results, ids) if number(r.get(column))]
        if len(had) < 2 or len({v for v, _ in had}) == 1:
            continue
        pick = min if lower_is_better(column) else max
        best[column] = pick(had, key=lambda vj: vj[0])[1]
    return best


def metrics_of(points: Sequence[dict[str, Any]]) -> list[str]:
    """The names of the numbers a job's points carry."""
    names: list[str] = []
    for p in points:
        names.extend(k for k in metric_names(p) if k not in names)
    return names


def thinned(xy: list[list[float]], most: int) -> list[list[float]]:
    """At most `most` points, evenly spaced over the curve, the first and the last kept."""
    if len(xy) <= most:
        return xy
    step = (len(xy) - 1) / (most - 1)
    return [xy[round(i * step)] for i in range(most)]


def curves_of(
    job_id: int, points: Sequence[dict[str, Any]], metric: str, x: str, most: int = MAX_POINTS
) -> list[dict[str, Any]]:
    """One job's curves of `metric` over `x`: one a run (a script that trained several times has several)."""
    runs: dict[str | None, list[list[float]]] = {}
    t0 = next((p["time"] for p in points if number(p.get("time"))), None)
    for p in points:
        y, at = p.get(metric), p.get(x)
        if not number(y) or not number(at):
            continue
        runs.setdefault(p.get("run"), []).append([round(at - t0, 3) if x == "time" and t0 else at, y])
    return [{"job_id": job_id, "run": run, "points": thinned(xy, most)} for run, xy in runs.items()]


def compare(
    views: Sequence[dict[str, Any]],
    points_of: Callable[[int], list[dict[str, Any]]],
    metric: str | None = None,
    x: str = "step",
    most: int = MAX_POINTS,
) -> dict[str, Any]:
    """The comparison of these jobs (the API's views of them, in the order asked): what differs, their results
    with each column's best, the metrics they report, and `metric`'s curves over `x` (default: loss, else the
    first metric any of them reports)."""
    if x not in X_AXES:
        raise BadRequest(f"query argument x must be one of {', '.join(X_AXES)}, got {x!r}", {"field": "x"})
    ids = [v["id"] for v in views]
    points = {job_id: points_of(job_id) for job_id in ids}
    names: list[str] = []
    for job_id in ids:
        names.extend(m for m in metrics_of(points[job_id]) if m not in names)
    if metric is None:
        metric = "loss" if "loss" in names or not names else names[0]
    elif metric not in names:
        raise BadRequest(
            f"query argument metric: none of these jobs reports {metric!r}; they report: {', '.join(names) or 'none'}",
            {"field": "metric"},
        )
    rows, same = differing([shown_config(v) for v in views])
    results = [results_of(v, points[v["id"]]) for v in views]
    columns = result_columns(results)
    return {
        "jobs": [
            {k: v.get(k) for k in ("id", "name", "owner", "project", "status", "reason", "kind", "sweep_id", "trial")}
            for v in views
        ],
        "differs": rows,
        "same": same,
        "result_columns": columns,
        "results": [{"job_id": job_id, **{c: r.get(c) for c in columns}} for job_id, r in zip(ids, results)],
        "best": best_of(results, columns, ids),
        "metrics": names,
        "metric": metric,
        "x": x,
        "curves": [c for job_id in ids for c in curves_of(job_id, points[job_id], metric, x, most)],
    }


def csv_text(doc: dict[str, Any]) -> str:
    """The comparison as CSV: a row a job; its id, name and status, the fields that differ, then its results."""
    head = ["id", "name", "status", *(r["field"] for r in doc["differs"]), *doc["result_columns"]]
    lines = [",".join(csv_cell(h) for h in head)]
    for n, (job, result) in enumerate(zip(doc["jobs"], doc["results"])):
        cells = [job["id"], job["name"], job["status"], *(r["values"][n] for r in doc["differs"])]
        cells += [result.get(c) for c in doc["result_columns"]]
        lines.append(",".join(csv_cell(c) for c in cells))
    return "\n".join(lines) + "\n"


def csv_cell(value: Any) -> str:
    """One CSV cell: text as it is, other values as JSON, quoted where it holds a comma, a quote or a newline."""
    text = "" if value is None else value if isinstance(value, str) else json.dumps(value)
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(c in text for c in ',"\n') else text
