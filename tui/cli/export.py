"""`gpudeck export ID…`: jobs to MLflow. With `--mlflow URI` from this machine (the job, its points and its model
read through the API, written with the mlflow client: models.mlflowrun); without, the server exports them to the
operator's MLflow (GPUDECK_MLFLOW_URI) and `gpudeck show` says how it went."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import click

from models.common import EXIT_JOB_FAILED, EXIT_OK
from models.mlflowrun import EXPERIMENT, ExportError, export
from tui.cli.base import client, connection_options
from tui.client import ApiError

ARTIFACTS = ("model.keras", "result.json")
"""The files of a job an export uploads (those it has)."""


def points_of(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """A job's points from GET /api/v1/jobs/ID/metrics (a point on both curves, once)."""
    seen, out = set(), []
    for p in metrics["train"] + metrics["validation"]:
        key = json.dumps(p, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def export_state(job: dict[str, Any]) -> str | None:
    """`exported: run 3f2a…` / `retrying (attempt 2): ConnectionError …`: the server's export of a job."""
    state = (job.get("export") or {}).get("mlflow")
    if not state:
        return None
    if state["status"] == "exported":
        return f"mlflow exported: run {state['run_id']} ({state.get('points', 0)} new points)"
    if state.get("error"):
        return f"mlflow {state['status']} (attempt {state.get('attempts')}): {state['error']}"
    return f"mlflow {state['status']}"


@click.command(name="export")
@connection_options
@click.argument("ids", nargs=-1, type=int, required=True, metavar="ID...")
@click.option(
    "--mlflow", "uri", metavar="URI", help="export from here to this MLflow (http://host:5000, file:./mlruns…)"
)
@click.option("--experiment", default=EXPERIMENT, show_default=True, help="the MLflow experiment (with --mlflow)")
def export_cmd(ids, uri, experiment) -> int:
    """Jobs to MLflow: a run a job (a search's trials nested), params, every metric point, tags, model."""
    api = client()
    failed = 0
    for job_id in ids:
        try:
            if uri is None:
                job = api.export(job_id)
                click.echo(
                    f"job {job_id}: export to the operator's MLflow queued (gpudeck show {job_id} says how it went)"
                )
                continue
            job = api.job(job_id)
            with tempfile.TemporaryDirectory(prefix="gpudeck-export-") as tmp:
                files = []
                for name in ARTIFACTS:
                    try:
                        api.download(job_id, name, str(Path(tmp) / name))
                        files.append(Path(tmp) / name)
                    except ApiError as exc:
                        if exc.status != 404:
                            raise
                done = export(uri, job, points_of(api.metrics(job_id)), files, experiment)
            click.echo(
                f"job {job_id}: MLflow run {done.run_id} in experiment {done.experiment_id} ({done.points} new points)"
            )
        except (ApiError, ExportError) as exc:
            failed += 1
            click.echo(f"job {job_id}: not exported: {getattr(exc, 'message', exc)}", err=True)
    return EXIT_JOB_FAILED if failed else EXIT_OK


COMMANDS = (export_cmd,)
