"""A gpudeck job as an MLflow run, with the `mlflow` client library (mlflow-skinny: `pip install 'gpudeck[mlflow]'`),
the same for the server's exports at a job's end (jobs.export) and `gpudeck export --mlflow URI` on a user's
machine. One run a job, found again by its tags (`gpudeck.job`, `gpudeck.created`), so exporting twice updates
the same run: params logged once (MLflow's are immutable), tags set again, metric points logged only where the run
lacks them (every point, with its step and time, 1,000 a batch), the model and result uploaded again. A run starts
when its job started. A search's trials are nested under one parent run of the sweep (`gpudeck.sweep`), which
starts when the sweep was made and ends with the export that finds nothing of it running."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.runinfo import config_of, metric_names, number

EXPERIMENT = "gpudeck"
"""The MLflow experiment runs go to when none is named."""
BATCH = 1000
"""Metric points a log_batch call carries (MLflow's limit)."""
PARAMS_BATCH = 100
"""Params a log_batch call carries (MLflow's limit)."""
PARAM_MAX = 6000
"""Longest param value MLflow stores."""
STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "canceled": "KILLED"}
"""A job's end as an MLflow run's status (one still running: RUNNING)."""
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
"""The client's own retries held short (its default retries for minutes): gpudeck retries an export itself."""


class ExportError(Exception):
    """The export could not be made: the message says why (the server unreachable, the library missing, …)."""


@dataclass
class Exported:
    run_id: str
    experiment_id: str
    points: int
    """Metric points logged this time (0: the run had them all)."""


def _client(uri: str) -> Any:
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    try:
        from mlflow import MlflowClient
    except ImportError:
        raise ExportError(
            "the mlflow client library is not installed: pip install mlflow-skinny (or gpudeck[mlflow])"
        ) from None
    return MlflowClient(tracking_uri=uri)


def _experiment(client: Any, name: str) -> str:
    found = client.get_experiment_by_name(name)
    return found.experiment_id if found is not None else client.create_experiment(name)


def _find(client: Any, experiment_id: str, tags: dict[str, str]) -> Any:
    where = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    runs = client.search_runs([experiment_id], where, max_results=1)
    return runs[0] if runs else None


def _param(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:PARAM_MAX]


def series(points: Iterable[dict[str, Any]], started: float) -> list[tuple[str, float, int, int]]:
    """(key, value, timestamp in ms, step) of every number the points measure; a script that trained several
    times (`run`: several runs in its points) has its keys under each run's name (`fit-2/loss`); one that trained
    once keeps them plain (`loss`, not `tensorboard/loss`: issue 67 #3)."""
    points = list(points)
    several = len({p.get("run") for p in points if p.get("run") and p.get("run") != "."}) > 1
    out = []
    for n, p in enumerate(points):
        at = p["time"] if number(p.get("time")) else started
        step = int(p["step"]) if number(p.get("step")) else n
        for key in metric_names(p):
            name = f"{p['run']}/{key}" if several and p.get("run") else key
            out.append((name, float(p[key]), int(at * 1000), step))
    return out


def tags_of(job: dict[str, Any]) -> dict[str, str]:
    """The run's tags: who, which gpudeck job, its project, sweep and trial, the schedule that made it, git commit,
    status and reason."""
    tags = {
        "gpudeck.job": str(job["id"]),
        "gpudeck.owner": job.get("owner") or "",
        "gpudeck.status": job["status"],
        "gpudeck.reason": job.get("reason") or "",
        "gpudeck.kind": job.get("kind") or "",
        "mlflow.runName": job.get("name") or f"job {job['id']}",
        "mlflow.user": job.get("owner") or "gpudeck",
    }
    if job.get("sweep_id") is not None:
        tags["gpudeck.sweep"] = str(job["sweep_id"])
    for field, tag in (("project", "gpudeck.project"), ("schedule", "gpudeck.schedule")):
        if job.get(field):
            tags[tag] = job[field] if field == "project" else job[field]["name"]
    commit = (job.get("source") or {}).get("git_commit")
    if commit:
        tags["gpudeck.git_commit"] = tags["mlflow.source.git.commit"] = commit
    for name in job.get("spec", {}).get("tags") or []:
        tags[f"gpudeck.tag.{name}"] = "1"
    return tags


def export(
    uri: str,
    job: dict[str, Any],
    points: Sequence[dict[str, Any]],
    artifacts: Sequence[Path] = (),
    experiment: str = EXPERIMENT,
    sweep_name: str | None = None,
    sweep_began: float | None = None,
    sweep_ended: tuple[str, float] | None = None,
) -> Exported:
    """Export `job` (the API's view of it, with `created_at`) and its metric points to the MLflow at `uri`, with
    the files `artifacts` (those that exist); a trial of a sweep goes under the sweep's parent run (made the first
    time, named `sweep_name`). ExportError saying why it could not."""
    try:
        return _export(uri, job, points, artifacts, experiment, sweep_name, sweep_began, sweep_ended)
    except ExportError:
        raise
    except Exception as exc:  # noqa: BLE001 (the client's own errors, of a server or a store: one message)
        raise ExportError(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]) from exc


def _export(
    uri: str,
    job: dict[str, Any],
    points: Sequence[dict[str, Any]],
    artifacts: Sequence[Path],
    experiment: str,
    sweep_name: str | None,
    sweep_began: float | None = None,
    sweep_ended: tuple[str, float] | None = None,
) -> Exported:
    from mlflow.entities import Metric, Param, RunTag

    client = _client(uri)
    experiment_id = _experiment(client, experiment)
    key = {"gpudeck.job": str(job["id"]), "gpudeck.created": str(job.get("created_at") or "")}
    tags = {**tags_of(job), **key}
    started = _seconds(job.get("started_at")) or _seconds(job.get("created_at")) or 0.0
    if job.get("sweep_id") is not None:
        parent_key = {"gpudeck.sweep_parent": str(job["sweep_id"])}
        parent = _find(client, experiment_id, parent_key)
        if parent is None:
            name = sweep_name or f"sweep {job['sweep_id']}"
            began = min(sweep_began or started, started)  # (the sweep's making, else its first trial's start)
            parent = client.create_run(
                experiment_id, start_time=int(began * 1000), tags={**parent_key, "mlflow.runName": name}
            )
        tags["mlflow.parentRunId"] = parent.info.run_id
        if sweep_ended is not None:  # (the sweep runs no more: its parent run ends with it, not RUNNING for good)
            client.set_terminated(parent.info.run_id, sweep_ended[0], int(sweep_ended[1] * 1000))
    run = _find(client, experiment_id, key)
    if run is None:  # (it began when the job did, not at its export: a duration is never negative)
        run = client.create_run(experiment_id, start_time=int(started * 1000), tags=tags)
    run_id = run.info.run_id
    have = run.data.params
    params = [Param(k, _param(v)) for k, v in config_of(job).items() if v is not None and k not in have]
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    for i in range(0, len(params), PARAMS_BATCH):
        client.log_batch(run_id, params=params[i : i + PARAMS_BATCH])
    metrics = series(points, started)
    logged = {}
    for name in {m[0] for m in metrics} & set(run.data.metrics):  # (exported before: only what it lacks)
        logged[name] = {(m.step, m.timestamp) for m in client.get_metric_history(run_id, name)}
    new = [Metric(k, v, t, s) for k, v, t, s in metrics if (s, t) not in logged.get(k, ())]
    for i in range(0, len(new), BATCH):
        client.log_batch(run_id, metrics=new[i : i + BATCH])
    for path in artifacts:
        if path.is_file():
            client.log_artifact(run_id, str(path))
    status = STATUS.get(job["status"])
    if status is not None:
        ended = _seconds(job.get("ended_at"))
        client.set_terminated(run_id, status, int(ended * 1000) if ended else None)
    return Exported(run_id, experiment_id, len(new))


def _seconds(iso: Any) -> float | None:
    """An API time (2026-11-24T15:17:02.123Z) or unix seconds, as unix seconds."""
    if number(iso):
        return float(iso)
    if not isinstance(iso, str) or not iso:
        return None
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
