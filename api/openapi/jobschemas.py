"""The OpenAPI document's component schemas of jobs: a spec, a job, its tasks, logs, files, metrics, a comparison."""

from __future__ import annotations

from typing import Any

from api.finite import NONFINITE
from api.openapi.base import (
    BOOL,
    INT,
    NUM,
    OWNER,
    STR,
    TIME,
    UNIX_S,
    _nullable,
    _obj,
    _ref,
    field_schemas,
    spec_schemas,
)
from jobs.compare import X_AXES
from models.states import PRIORITIES, Reason, Status

KEPT = ("gpus", "name", "tags", "priority", "max_retries", "workers", "after", "preemptible")
"""The fields every kept spec has a value of (the others may be null there)."""


def schemas() -> dict[str, Any]:
    """The components/schemas of jobs: a spec, a job, its tasks, logs, files and metrics."""
    point = _obj(
        {
            **{
                k: _nullable(NUM)
                for k in ("step", "epoch", "loss", "accuracy", "lr", "images_per_sec", "val_loss", "val_accuracy")
            },
            NONFINITE: _ref("Nonfinite"),
            "run": {**STR, "description": "the run folder of a script's event files it came from (`logs/fit/…`)"},
        }
    )
    return {
        "JobSpecInput": {
            "description": "a model job (model, dataset, params), a command job (command, source, env, ...) or a "
            "session (kind: session); chief: true needs workers >= 2",
            "oneOf": [_ref("ModelJobSpec"), _ref("CommandJobSpec"), _ref("SessionSpec")],
            "if": {"required": ["chief"], "properties": {"chief": {"const": True}}},
            "then": {"required": ["workers"], "properties": {"workers": {"type": "integer", "minimum": 2}}},
        },
        **spec_schemas(),  # (each kind with all of its fields, as jobs.spec declares them; null: the default)
        "JobSpec": _obj(
            {k: v if k in KEPT else _nullable(v) for k, v in field_schemas().items()},
            list(KEPT) + ["timeout"],
        )
        | {"description": "a job's spec as it is kept: every default filled in"},
        "Progress": _obj(
            {
                "step": _nullable(INT),
                "total_steps": _nullable(INT),
                "epoch": _nullable(NUM),
                "epochs": _nullable(NUM),
                "fraction": _nullable(NUM),
            }
        ),
        "Nonfinite": {
            "type": "object",
            "description": "fields of this object whose value was not a finite number (a diverged loss): JSON has "
            "no NaN or Infinity, so such a value is answered as null and named here",
            "additionalProperties": {**STR, "enum": ["nan", "inf", "-inf"]},
        },
        "Result": _obj(
            {
                **{
                    k: _nullable(NUM)
                    for k in (
                        "test_accuracy",
                        "test_top5",
                        "test_loss",
                        "steps",
                        "epochs",
                        "images_per_sec",
                        "duration_s",
                    )
                },
                NONFINITE: _ref("Nonfinite"),
                "warning": {**STR, "description": "the run diverged without a NaN (see the Job's `warning`)"},
                "gpus_seen": {**INT, "description": "GPUs TensorFlow found inside the job's sandbox (a zoo job)"},
            }
        ),
        "Job": _obj(
            {
                "id": INT,
                "name": STR,
                "owner": OWNER,
                "status": {**STR, "enum": [s.value for s in Status]},
                "reason": _nullable({**STR, "enum": [r.value for r in Reason]}),
                "message": _nullable(STR),
                "spec": _ref("JobSpec"),
                "queue": STR,
                "worker": _nullable(STR),
                "gpu_ids": _nullable({"type": "array", "items": STR}),
                "gpu_fraction": _nullable(
                    {
                        **NUM,
                        "description": "a share (gpu_memory): its part of the GPU it runs on, as quotas and "
                        "fair share count it",
                    }
                ),
                "warm_start": _nullable(
                    {
                        **BOOL,
                        "description": "whether its current attempt started in a warm trainer (a zoo trainer its "
                        "worker made ahead of time: README, Fast small jobs); null before it starts",
                    }
                ),
                "attempt": INT,
                "created_at": TIME,
                "started_at": _nullable(TIME),
                "first_started_at": _nullable(
                    {**TIME, "description": "when its first attempt started (started_at: the current attempt's)"}
                ),
                "ended_at": _nullable(TIME),
                "elapsed_s": _nullable(NUM),
                "ran_s": _nullable(
                    {**NUM, "description": "seconds it has run in all, over every attempt (elapsed_s: this one's)"}
                ),
                "eta_s": _nullable(NUM),
                "progress": _ref("Progress"),
                "metrics": _nullable(_obj({NONFINITE: _ref("Nonfinite")})),
                "result": _nullable(_ref("Result")),
                "runs": {
                    "type": "array",
                    "items": STR,
                    "description": "a command job's run folders with event files, in the order they began",
                },
                "warning": {
                    **_nullable(STR),
                    "description": "a job that ended normally but diverged: its loss grew by orders of magnitude "
                    "and its test accuracy is at chance (a model job's trainer says so)",
                },
                "log_tail": _nullable({"type": "array", "items": STR}),
                "tasks": _nullable({"type": "array", "items": _ref("Task")}),
                "source": _nullable(_ref("Source")),
                "environment": _nullable({"type": "object", "additionalProperties": STR}),
                "queue_position": _nullable(
                    {**INT, "description": "a queued job's place in the scheduler's line: 1 is the next it considers"}
                ),
                "expected_start": _nullable(
                    {
                        **TIME,
                        "description": "when a queued job is expected to start, from the running jobs' progress and "
                        "the expected durations of the jobs ahead (null: expected_start_reason says why)",
                    }
                ),
                "expected_start_reason": _nullable(STR),
                "expected_duration_s": _nullable(
                    {
                        **NUM,
                        "description": "how long a queued or running job is expected to run, as the scheduler plans "
                        "with it (null: unknown)",
                    }
                ),
                "expected_duration_source": _nullable(
                    {
                        **STR,
                        "enum": ["declared", "history", "kind", "others", "timeout"],
                        "description": "where expected_duration_s comes from: the job's expected_duration, its "
                        "owner's past runs of the same job, of the same kind (a zoo job's model and dataset, a "
                        "command's script or module), anybody's runs of that kind, or its timeout",
                    }
                ),
                "expected_duration_runs": _nullable(
                    {**INT, "description": "how many past runs a learned expected_duration_s comes from"}
                ),
                "expected_duration_spread_s": _nullable(
                    {
                        "type": "array",
                        "items": NUM,
                        "minItems": 2,
                        "maxItems": 2,
                        "description": "the shortest and longest of those runs (seconds): how sure the estimate is",
                    }
                ),
                "preemptions": _nullable(
                    {**INT, "description": "how often the job was stopped to make room for a higher-priority one"}
                ),
                "preempted_by": _nullable(
                    _obj(
                        {
                            "id": INT,
                            "priority": STR,
                            "step": _nullable(INT),
                            "checkpoint_step": _nullable(INT),
                            "at": UNIX_S,
                            "message": STR,
                        }
                    )
                    | {"description": "the last preemption: by which job, at which step, from which checkpoint"}
                ),
                "usage": _nullable(_ref("Usage")),
                "gpu_life": {
                    **_nullable(
                        _obj(
                            {"mean_percent": NUM, "idle_percent": NUM, "gpu_seconds": NUM},
                            ["mean_percent", "idle_percent", "gpu_seconds"],
                        )
                    ),
                    "description": "its GPUs over its life so far, as nvidia-smi read them every 2 s: mean "
                    "utilization, the share of its GPU-time under 5 %, GPU-seconds read; null before the first",
                },
                "disk_bytes": _nullable(
                    {**INT, "description": "bytes of the job dir: measured every 30 s while it runs, and at its end"}
                ),
                "resumes": _nullable(
                    {**INT, "description": "a retry of a model job: the job whose last checkpoint it starts from"}
                ),
                "sweep_id": _nullable(
                    {**INT, "description": "the sweep that made this job (it also has a sweep:N tag)"}
                ),
                "trial": _nullable(
                    _obj({"number": INT, "values": {"type": "object"}})
                    | {"description": "the trial of a search this job is: its number and sampled values"}
                ),
                "stopped_early": {
                    **BOOL,
                    "description": "a trial its search stopped early (status succeeded, reason stopped_early)",
                },
                "kind": {**STR, "enum": ["model", "command", "session"]},
                "attach": _nullable(
                    _obj({"host": STR, "command": STR, "ssh": STR, "port": INT, "secret": STR})
                    | {
                        "description": "a live shell session: where it runs and how to attach (its port and secret "
                        "for its owner only)"
                    }
                ),
                "url": _nullable({**STR, "description": "a live notebook session's address (its token: owner only)"}),
                "tunnel": _nullable(
                    {**STR, "description": "the ssh line that brings a notebook's port to your machine"}
                ),
                "early_stop": _nullable(
                    _obj({"step": _nullable(INT), "rung": _nullable(INT), "metric": STR, "value": _nullable(NUM)})
                    | {"description": "where and why its search stopped it: the step, the rung, the metric's value"}
                ),
                "slurm": _nullable(
                    _obj({"id": STR, "state": _nullable(STR), "reason": _nullable(STR)})
                    | {
                        "description": "its Slurm job (GPUDECK_BACKEND=slurm): Slurm's id, and its state and pending "
                        "reason as gpudeck last saw them in squeue"
                    }
                ),
                "artifacts": _nullable(
                    _obj({"store": STR, "files": INT, "error": _nullable(STR)})
                    | {
                        "description": "its files in the object store (GPUDECK_ARTIFACTS) as its last attempt left "
                        "them: the store, how many files it uploaded, and the error where the store did not take one "
                        "(the job dir keeps every file)"
                    }
                ),
                "export": _nullable(
                    _obj(
                        {
                            "mlflow": _obj(
                                {
                                    "status": {**STR, "enum": ["pending", "exported", "retrying", "failed"]},
                                    "run_id": STR,
                                    "experiment_id": STR,
                                    "points": INT,
                                    "attempts": INT,
                                    "error": STR,
                                    "at": UNIX_S,
                                    "next_at": _nullable(UNIX_S),
                                    "queued_at": UNIX_S,
                                },
                                ["status"],
                            )
                        }
                    )
                    | {
                        "description": "its export to the operator's MLflow (GPUDECK_MLFLOW_URI): pending, exported "
                        "(the run's id), retrying or failed (the error); a failed export never fails the job"
                    }
                ),
            },
            ["id", "name", "status", "spec", "attempt", "created_at", "progress"],
        ),
        "Notifications": _obj(
            {
                "job_id": INT,
                "notify": {"type": "array", "items": STR},
                "attempts": {
                    "type": "array",
                    "items": _obj(
                        {
                            "delivery": STR,
                            "endpoint": STR,
                            "event": STR,
                            "attempt": INT,
                            "at": UNIX_S,
                            "delivered": BOOL,
                            "answer": {**STR, "description": "the HTTP status, or the error"},
                            "gave_up": BOOL,
                        }
                    ),
                },
            },
            ["job_id", "notify", "attempts"],
        ),
        "Usage": {
            **_obj(
                {
                    "cpu_percent": _nullable(NUM),
                    "rss_bytes": INT,
                    "processes": INT,
                    "gpus": {
                        "type": "array",
                        "items": _obj(
                            {
                                "index": _nullable(INT),
                                "utilization": _nullable(NUM),
                                "memory_used_mib": _nullable(NUM),
                                "host": STR,
                            }
                        ),
                    },
                    "hosts": {"type": "array", "items": STR},
                    "sampled_at": UNIX_S,
                },
                ["cpu_percent", "rss_bytes", "processes", "gpus", "hosts", "sampled_at"],
            ),
            "description": "what a starting or running job's processes use, sampled every 2 s on each host it runs "
            "on: CPU % of one core (summed; null on the first sample), resident memory, and per GPU its "
            "utilization and the memory the job's processes hold (from nvidia-smi)",
        },
        "Deleted": _obj(
            {
                "id": INT,
                "deleted": {"type": "boolean"},
                "bytes_freed": INT,
                "objects_deleted": {**INT, "description": "its objects deleted from the store (GPUDECK_ARTIFACTS)"},
                "store_error": {**STR, "description": "why its objects in the store could not be deleted"},
            },
            ["id", "deleted", "bytes_freed"],
        ),
        "FileList": _obj(
            {
                "job_id": INT,
                "store": {
                    **STR,
                    "description": "where the files were listed from when this API's host has no job dir: the "
                    "object store (GPUDECK_ARTIFACTS), which has the checkpoints, model and result",
                },
                "files": {
                    "type": "array",
                    "items": _obj({"path": STR, "size": INT, "modified": TIME}, ["path", "size", "modified"]),
                },
                "total_bytes": INT,
                "truncated": {"type": "boolean", "description": "more files than one listing answers (100,000)"},
            },
            ["job_id", "files", "total_bytes", "truncated"],
        ),
        "Task": _obj(
            {
                "index": INT,
                "type": {**STR, "enum": ["chief", "worker"]},
                "task_index": INT,
                "worker": _nullable(STR),
                "host": _nullable(STR),
                "gpu_ids": {"type": "array", "items": STR},
                "address": _nullable(STR),
                "pid": _nullable(INT),
                "status": {**STR, "enum": ["placed", "running", "succeeded", "failed", "stopped"]},
                "reason": _nullable(STR),
                "message": _nullable(STR),
            },
            ["index", "type", "task_index", "worker", "status"],
        ),
        "JobList": _obj(
            {
                "jobs": {"type": "array", "items": _ref("Job")},
                "next_cursor": _nullable(INT),
                "total": {**INT, "minimum": 0, "description": "how many jobs the store holds (of every status)"},
            },
            ["jobs", "next_cursor", "total"],
        ),
        "DryRun": _obj(
            {
                "dry_run": {**BOOL, "enum": [True]},
                "spec": _ref("JobSpec"),
                "queue": STR,
                "expected_duration_s": _nullable(NUM),
                "expected_duration_from": _nullable({**STR, "enum": ["declared", "history", "timeout"]}),
                "expected_start": _nullable(TIME),
                "expected_start_note": _nullable(STR),
                "gpu_hours": _nullable({**NUM, "description": "GPUs x tasks x expected hours (a share: its part)"}),
            },
            ["dry_run", "spec", "queue", "expected_duration_s", "expected_start", "gpu_hours"],
        ),
        "MetricPoint": point,
        "Metrics": _obj(
            {
                "job_id": INT,
                "train": {"type": "array", "items": _ref("MetricPoint")},
                "validation": {"type": "array", "items": _ref("MetricPoint")},
            },
            ["job_id", "train", "validation"],
        ),
        "Comparison": _obj(
            {
                "jobs": {
                    "type": "array",
                    "description": "the jobs, in the order asked",
                    "items": _obj(
                        {
                            "id": INT,
                            "name": _nullable(STR),
                            "owner": OWNER,
                            "status": {**STR, "enum": [s.value for s in Status]},
                            "reason": _nullable(STR),
                            "kind": {**STR, "enum": ["model", "command", "session"]},
                            "sweep_id": _nullable(INT),
                            "trial": _nullable(_obj({"number": INT, "values": {"type": "object"}})),
                        },
                        ["id", "status", "kind"],
                    ),
                },
                "differs": {
                    "type": "array",
                    "description": "the configuration fields (dotted: params.lr, source.git_commit, env names, "
                    "environment digest) whose values are not all the same; `values` in the jobs' order",
                    "items": _obj(
                        {"field": STR, "values": {"type": "array", "items": {}, "description": "any JSON value"}},
                        ["field", "values"],
                    ),
                },
                "same": {**INT, "description": "how many configuration fields are the same in every job"},
                "result_columns": {"type": "array", "items": STR},
                "results": {
                    "type": "array",
                    "description": "a row a job: its result's numbers, last_loss, duration_s, images_per_sec, "
                    "gpu_hours (null where it has none)",
                    "items": _obj({"job_id": INT}, ["job_id"]),
                },
                "best": {
                    "type": "object",
                    "description": "a results column -> the id of its best job (the smallest for losses, errors, "
                    "time and GPU-hours; the largest otherwise), where two jobs or more have differing numbers",
                    "additionalProperties": INT,
                },
                "metrics": {"type": "array", "items": STR, "description": "what the jobs' points report"},
                "metric": STR,
                "x": {**STR, "enum": list(X_AXES)},
                "curves": {
                    "type": "array",
                    "description": "the metric over x: one curve a job's run, at most `points` points each",
                    "items": _obj(
                        {
                            "job_id": INT,
                            "run": _nullable(STR),
                            "points": {"type": "array", "items": {"type": "array", "items": NUM}},
                        },
                        ["job_id", "run", "points"],
                    ),
                },
            },
            ["jobs", "differs", "same", "result_columns", "results", "best", "metrics", "metric", "x", "curves"],
        ),
        "PriorityInput": _obj({"priority": {**STR, "enum": list(PRIORITIES)}}, ["priority"], extra=False),
        "MoveInput": {
            "type": "object",
            "description": "one of: before or after another queued job of the same line (priority and owner), or "
            "top: first of that line",
            "minProperties": 1,
            "maxProperties": 1,
            "properties": {
                "before": {**INT, "minimum": 1},
                "after": {**INT, "minimum": 1},
                "top": {"type": "boolean", "const": True},
            },
            "additionalProperties": False,
        },
        "RetryInput": _obj(
            {
                "resume": {
                    "type": "boolean",
                    "description": "a model job starts from the last checkpoint the job left (default true); "
                    "false trains from the start",
                }
            },
            extra=False,
        ),
    }
