"""A job record as clients see it: times, elapsed, ETA and progress derived from the record."""

from __future__ import annotations

import time
from typing import Any

from jobs.record import defaults
from jobs.spec import is_command, is_session, shown
from jobs.store import iso
from jobs.usage import life as gpu_life
from models.states import ACTIVE, Reason, Status

LIVE = (Status.QUEUED.value, *ACTIVE)
"""Statuses whose expected duration the scheduler plans with."""


def _ran(rec: dict[str, Any], status: Status, elapsed: float | None) -> float | None:
    """Seconds it has run in all: its earlier attempts' (`ran_s`, kept at each requeue) and, unless it waits in line
    again, this one's."""
    before = rec.get("ran_s") or 0.0
    now = elapsed if status != Status.QUEUED and elapsed is not None else 0.0
    return round(before + now, 2) if before or now else None


def _warning(rec: dict[str, Any]) -> str | None:
    """What a job still warns of: its trainer's result (a loss that diverged without a NaN and a test accuracy at
    chance), or the idle-GPU policy (GPUDECK_IDLE_GPU=warn: its GPUs sat idle for the window)."""
    warning = (rec.get("result") or {}).get("warning") or (rec.get("idle_warning") or {}).get("message")
    return warning if isinstance(warning, str) else None


def _confidence(learned: Any) -> dict[str, Any]:
    """How sure a learned estimate is (plan.Learned): how many runs it comes from, and their spread."""
    if learned is None:
        return {"expected_duration_runs": None, "expected_duration_spread_s": None}
    low, high = learned.spread
    return {"expected_duration_runs": learned.runs, "expected_duration_spread_s": [round(low, 1), round(high, 1)]}


def job_view(
    rec: dict[str, Any],
    now: float | None = None,
    tasks: list[dict[str, Any]] | None = None,
    queue_position: int | None = None,
    usage: dict[str, Any] | None = None,
    names_only: bool = False,
    expected_start: tuple[float | None, str | None] = (None, None),
    expected: tuple[float | None, str | None] = (None, None),
    learned: Any = None,
) -> dict[str, Any]:
    """The JSON object GET /api/v1/jobs/ID answers (`tasks`: a multi-worker job's, from gang.view; a queued job's
    place in line, from queues.positions, and its expected start with why there is none, from
    jobs.forecast.estimate; a running job's usage, from jobs.usage). `names_only`: for a user who is
    not the job's owner (nor an admin), its env values are all hidden; `secret_env` values are for nobody."""
    now = time.time() if now is None else now
    status = Status(rec["status"])
    started, running, ended = rec.get("started_at"), rec.get("running_at"), rec.get("ended_at")
    elapsed = ((ended or now) - started) if started else None
    progress = _progress(rec.get("progress") or {}, running, ended or now, status, fraction(rec))
    spec = {**defaults(), **shown(rec["spec"], names_only)}  # (records made before a field was declared)
    return {
        "id": rec["id"],
        "name": spec.get("name"),
        "owner": rec.get("owner"),
        "status": status.value,
        "reason": rec.get("reason"),
        "message": rec.get("message"),
        "spec": spec,
        "queue": rec.get("queue"),
        "worker": rec.get("worker"),
        "gpu_ids": rec.get("gpu_ids"),
        "gpu_fraction": rec.get("gpu_fraction"),
        "warm_start": rec.get("warm_start"),
        "attempt": rec.get("attempt", 1),
        "created_at": iso(rec.get("created_at")),
        "started_at": iso(started),
        "first_started_at": iso(rec.get("first_started_at")),
        "ended_at": iso(ended),
        "elapsed_s": round(elapsed, 2) if elapsed is not None else None,
        "ran_s": _ran(rec, status, elapsed),
        "eta_s": progress.pop("eta_s"),
        "progress": progress,
        "metrics": rec.get("metrics"),
        "result": rec.get("result"),
        "warning": _warning(rec),
        "kind": "session" if is_session(spec) else "command" if is_command(spec) else "model",
        **_session(rec, status, names_only),
        "runs": rec.get("runs") or [],
        "log_tail": rec.get("log_tail") if status == Status.FAILED else None,
        "tasks": tasks,
        "source": rec.get("source"),
        "environment": _environment(rec.get("environment"), names_only),
        "queue_position": queue_position if status == Status.QUEUED else None,
        "expected_start": iso(expected_start[0]) if status == Status.QUEUED else None,
        "expected_start_reason": expected_start[1] if status == Status.QUEUED else None,
        "expected_duration_s": expected[0] if status.value in LIVE else None,
        "expected_duration_source": expected[1] if status.value in LIVE else None,
        **_confidence(
            learned if status.value in LIVE and expected[1] in ("history", "steps", "kind", "others") else None
        ),
        "preemptions": rec.get("preemptions", 0),
        "preempted_by": rec.get("preempted_by") if rec.get("preemptions") else None,
        "usage": usage if status in (Status.STARTING, Status.RUNNING) else None,
        "gpu_life": gpu_life(rec),
        "disk_bytes": rec.get("disk_bytes"),
        "resumes": rec.get("resumes"),
        "sweep_id": sweep_id(rec),
        "trial": rec.get("trial"),
        "schedule": rec.get("schedule"),
        "project": spec.get("project"),
        "stopped_early": rec.get("reason") == Reason.STOPPED_EARLY.value,
        "early_stop": rec.get("early_stop"),
        "export": rec.get("export"),
        "artifacts": rec.get("artifacts"),
        "slurm": _slurm(rec.get("slurm")),
    }


def _slurm(info: dict[str, Any] | None) -> dict[str, Any] | None:
    """A job's Slurm job (GPUDECK_BACKEND=slurm): its id, Slurm's state and pending reason as last seen."""
    if not info:
        return None
    return {"id": info.get("id"), "state": info.get("state"), "reason": info.get("reason")}


def _session(rec: dict[str, Any], status: Status, names_only: bool) -> dict[str, Any]:
    """How a live session is reached (jobs.run.sessionrun): `attach` (host, the command; its port and secret for its
    owner only) for a shell, `url` (with its token for its owner only) and `tunnel` for a notebook; its warning."""
    info = rec.get("session") if status in (Status.STARTING, Status.RUNNING) else None
    out: dict[str, Any] = {"attach": None, "url": None, "tunnel": None}
    if not info:
        return out
    host, port = info.get("host"), info.get("port")
    tunnel = f"ssh -N -L {port}:127.0.0.1:{port} {host}"
    if info.get("kind") == "notebook":
        url = str(info.get("url") or "")
        out.update(url=url.split("?", 1)[0] + "?token=***" if names_only else url, tunnel=tunnel)
    else:
        command = f"gpudeck session attach {rec['id']}"
        out["attach"] = {"host": host, "command": command, "ssh": f"ssh -t {host} {command}", "port": port}
        if not names_only:
            out["attach"]["secret"] = info.get("secret")
    if info.get("warning"):
        out["warning"] = info["warning"]
    return out


def _environment(env: dict[str, str] | None, names_only: bool) -> dict[str, str] | None:
    """What a command job got: gpudeck's variables as they are, the job's own masked (all of them: names_only)."""
    if env is None or not names_only:
        return env
    from jobs.spec import INJECTED

    return {k: v if k in INJECTED else "***" for k, v in env.items()}


def sweep_id(rec: dict[str, Any]) -> int | None:
    """The sweep a job belongs to: its record's `sweep_id` (jobs of sweeps made before it was kept: the `sweep:N`
    tag every sweep also gives its jobs, for filtering)."""
    if rec.get("sweep_id") is not None:
        return int(rec["sweep_id"])
    for tag in rec["spec"].get("tags") or []:
        if tag.startswith("sweep:") and tag[6:].isdigit():
            return int(tag[6:])
    return None


def fraction(rec: dict[str, Any]) -> float | None:
    """How much of its steps a job did: never above 1, and whole once it ran to its end (succeeded, not stopped
    early) whatever its last step read (Keras logs epochs 0-4 of five: a finished run read 80 %)."""
    p = rec.get("progress") or {}
    step, total = p.get("step"), p.get("total_steps")
    if not total:
        return None
    if rec.get("status") == Status.SUCCEEDED.value and rec.get("reason") != Reason.STOPPED_EARLY.value:
        return 1.0
    return round(min(step / total, 1.0), 4) if step is not None else None


def _progress(
    p: dict[str, Any], running_at: float | None, now: float, status: Status, done: float | None
) -> dict[str, Any]:
    """A job's progress as the API answers it (`done`: its fraction)."""
    step, total = p.get("step"), p.get("total_steps")
    out: dict[str, Any] = {"step": step, "total_steps": total, "epoch": None, "epochs": p.get("epochs")}
    out["fraction"] = done
    if step is not None and p.get("steps_per_epoch"):
        out["epoch"] = round(step / p["steps_per_epoch"], 3)
    eta = None
    running_at = p.get("since") or running_at  # (a script's second training: from its first point, not the job's)
    if status == Status.RUNNING and running_at and step is not None and total:
        done = step - p.get("first_step", 0)
        at = p.get("at")  # (when its newest step was: its rate from the steps' own times, counting down between
        if done > 0 and step <= total:  # points rather than climbing — issue 67 #2; past its total: no ETA)
            if isinstance(at, (int, float)) and running_at < at <= now + 1:
                eta = round(max(0.0, (total - step) * (at - running_at) / done - (now - at)), 1)
            else:
                eta = round((total - step) * (now - running_at) / done, 1)
    elif status.ended:
        eta = 0.0 if status == Status.SUCCEEDED else None
    if status == Status.SUCCEEDED and done == 1.0 and step is not None and total and step < total:
        out["step"] = total  # (a run that ran to its end is whole: Keras logs epochs 0-4 of five, `4/5` read wrong)
    out["eta_s"] = eta
    return out
