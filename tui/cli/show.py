"""`gpudeck show ID`: one job as rows a person reads (status, what it runs, where, its place in line and expected
start, progress, metrics, result, tasks, notifications, the failed log's tail)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import click

from models.common import EXIT_OK
from models.sourcetree import human
from tui.cli.base import client, connection_options, echo_json, fmt, job_id_argument, json_option
from tui.cli.export import export_state
from tui.logtext import fold
from tui.widgets.fmt import (
    duration,
    expected_text,
    gpu_life_text,
    gpus_text,
    over_attempts,
    progress_of,
    slurm_text,
    starts_in,
    usage_text,
    value_of,
)

FIRST = ("step", "epoch", "loss", "accuracy", "val_loss", "val_accuracy", "test_accuracy", "test_loss")
"""Fields shown first, in this order, in `show`'s metrics and result (the rest follow by name)."""


def _ordered(obj: dict[str, Any]) -> list[str]:
    names = [k for k in obj if k not in ("time", "nonfinite")] + [k for k in obj.get("nonfinite") or {} if k not in obj]
    return sorted(names, key=lambda k: (FIRST.index(k) if k in FIRST else len(FIRST), k))


def _preempted(job: dict[str, Any]) -> str | None:
    """`2 times; last: preempted by job 9 (high) at step 3,400; …`."""
    if not job.get("preemptions"):
        return None
    last = (job.get("preempted_by") or {}).get("message")
    n = job["preemptions"]
    return ("once" if n == 1 else f"{n} times") + (f"; last: {last}" if last else "")


def expected_start(job: dict[str, Any]) -> str | None:
    """A queued job's expected start, `14:05 (in 3m10s)`, or why there is none."""
    if job["status"] != "queued":
        return None
    left = starts_in(job)
    if left is None:
        return f"unknown: {job['expected_start_reason']}" if job.get("expected_start_reason") else None
    at = datetime.fromtimestamp(time.time() + left).strftime("%H:%M")
    return f"{at} (in {duration(left)})" if left > 0 else "now"


def _runs(runs: list[str]) -> str | None:
    """A script's trainings, where it trained more than once (each its run folder), the newest last."""
    return f"{len(runs)}, the newest last: {', '.join(runs)}" if len(runs) > 1 else None


def _pairs(point: dict[str, Any] | None) -> str | None:
    """The newest metric point as `step 120  epoch 3.2  loss 0.5310  accuracy 0.8750 …` (nan where not finite)."""
    if not point:
        return None
    return "  ".join(f"{k} {value_of(point, k) or '-'}" for k in _ordered(point))


def _what_rows(job: dict[str, Any]) -> list[tuple[str, Any]]:
    spec = job["spec"]
    if spec.get("command") is None and spec.get("kind") != "session":
        return [("model", spec["model"]), ("dataset", spec["dataset"]), ("params", spec.get("params"))]
    src = job.get("source") or {}
    where = " ".join(
        x
        for x in (
            src.get("ref"),
            f"{src.get('files')} files, {human(src['size_bytes'])}" if src else None,
            f"git {src['git_commit'][:12]}" if src.get("git_commit") else None,
            "(dirty)" if src.get("git_dirty") else None,
            f"from {src['path']}" if src.get("path") else None,
        )
        if x
    )
    attach = job.get("attach") or {}
    first = (
        [
            ("session", "notebook (Jupyter)" if spec.get("jupyter") else "shell"),
            ("attach", attach.get("command") and f"{attach['command']}   (elsewhere: {attach['ssh']})"),
            ("url", job.get("url")),
            ("tunnel", job.get("tunnel")),
            ("idle", f"released after {duration(spec.get('idle') or 0)} unused; ends at {duration(spec['max'])}"),
        ]
        if spec.get("kind") == "session"
        else [("command", spec["command"])]
    )
    return [
        *first,
        ("source", where or None),
        ("dataset", spec.get("dataset")),
        ("env", " ".join(f"{k}={v}" for k, v in (spec.get("env") or {}).items()) or None),
        ("env_name", spec.get("env_name")),
        ("injected", " ".join(f"{k}={v}" for k, v in (job.get("environment") or {}).items()) or None),
    ]


def made_by(schedule: dict[str, Any] | None) -> str | None:
    """The schedule that made a job, and its firing."""
    return None if schedule is None else f"{schedule['name']}, its firing at {schedule['firing']}"


@click.command()
@connection_options
@job_id_argument
@json_option
def show(job_id, as_json) -> int:
    """One job: status, progress, metrics, result, notifications."""
    api = client()
    job = api.job(job_id)
    if as_json:
        echo_json(job)
        return EXIT_OK
    spec, p = job["spec"], job.get("progress") or {}
    rows = [
        ("job", f"{job['id']}  {job['name']}"),
        ("owner", job.get("owner")),
        ("project", job.get("project")),
        ("schedule", made_by(job.get("schedule"))),
        ("status", job["status"] + (f" ({job['reason']})" if job.get("reason") else "")),
        ("message", job.get("message")),
        ("warning", job.get("warning")),
        *_what_rows(job),
        ("gpus", gpus_text(job) + (f" on {job['worker']}" if job.get("worker") else "")),
        ("in line", f"#{job['queue_position']} in {job['queue']}" if job.get("queue_position") else None),
        ("slurm", slurm_text(job["slurm"]).removeprefix("slurm ") if job.get("slurm") else None),
        ("starts", expected_start(job)),
        ("expected", expected_text(job).removeprefix("expected ") or None),
        ("preempted", _preempted(job)),
        ("uses", usage_text(job.get("usage")) or None),
        ("gpus used", gpu_life_text(job) or None),
        ("progress", f"step {progress_of(p)}" if p.get("total_steps") else None),
        ("elapsed", duration(job["elapsed_s"]) + over_attempts(job) if job.get("elapsed_s") is not None else None),
        ("eta", duration(job["eta_s"]) if job.get("eta_s") is not None and job["status"] == "running" else None),
        ("metrics", _pairs({k: v for k, v in (job.get("metrics") or {}).items() if k != "run"}) or None),
        ("runs", _runs(job.get("runs") or [])),
        ("tags", ", ".join(spec.get("tags") or []) or None),
        ("disk", human(job["disk_bytes"]) if job.get("disk_bytes") is not None else None),
        ("resumes", f"job {job['resumes']}'s last checkpoint" if job.get("resumes") else None),
        ("export", export_state(job)),
    ]
    for key, value in rows:
        click.echo(f"{key:>9}  {fmt(value)}")
    result = {k: v for k, v in (job.get("result") or {}).items() if k != "warning"}  # (its own row, above)
    names = _ordered(result)
    for i, name in enumerate(names):  # one line a value, aligned: a table, not a JSON object
        click.echo(f"{'result' if i == 0 else '':>9}  {name:<{max(map(len, names))}}  {value_of(result, name) or '-'}")
    for t in job.get("tasks") or []:
        where = f"{t['worker'] or '-'} {t['address'] or ''}".rstrip()
        task = f"{t['type']}:{t['task_index']}  {t['status']}  {where}  {t.get('message') or ''}".rstrip()
        click.echo(f"{'task':>9}  {task}")
    if job["spec"].get("notify"):
        for line in _notified(api.notifications(job_id)):
            click.echo(f"{'notified':>9}  {line}")
    for line in fold(job.get("log_tail") or []):  # (TensorFlow's start-up lines as one)
        click.echo(f"{'log':>9}  {line}")
    return EXIT_OK


def _notified(answer: dict[str, Any]) -> list[str]:
    """Each delivery's last attempt: `lab succeeded: delivered (200), attempt 1` / `… failing (…), attempt 3`."""
    last: dict[str, dict[str, Any]] = {}
    for attempt in answer["attempts"]:
        last[attempt["delivery"]] = attempt
    if not last:
        return [f"{', '.join(answer['notify'])}: nothing sent yet"]
    out = []
    for a in last.values():
        state = "delivered" if a["delivered"] else "given up" if a.get("gave_up") else "retrying"
        out.append(f"{a['endpoint']} {a['event']}: {state} ({a['answer']}), attempt {a['attempt']}")
    return out
