"""The bodies of jobs: a job, its tasks, files, metrics and notifications, a list, a dry run, a comparison, and
the small request bodies of steering one (priority, move, retry)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, RootModel

from api.schemas.base import (
    OMITTED,
    Answer,
    DurationSource,
    Input,
    JobSpec,
    Priority,
    ReasonName,
    StatusName,
    TaskStatusName,
    Time,
    UnixS,
    XAxis,
)
from api.schemas.data import Source


class Progress(Answer):
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    epochs: float | None = None
    fraction: float | None = None


class Nonfinite(RootModel[dict[str, Literal["nan", "inf", "-inf"]]]):
    """fields of this object whose value was not a finite number (a diverged loss): JSON has no NaN or Infinity, so such
    a value is answered as null and named here"""


class Result(Answer):
    test_accuracy: float | None = None
    test_top5: float | None = None
    test_loss: float | None = None
    steps: float | None = None
    epochs: float | None = None
    images_per_sec: float | None = None
    duration_s: float | None = None
    nonfinite: Nonfinite = OMITTED
    warning: str = Field(OMITTED, description="the run diverged without a NaN (see the Job's `warning`)")
    gpus_seen: int = Field(OMITTED, description="GPUs TensorFlow found inside the job's sandbox (a zoo job)")


class LastMetrics(Answer):
    nonfinite: Nonfinite = OMITTED


class Preemption(Answer):
    """the last preemption: by which job, at which step, from which checkpoint"""

    id: int = OMITTED
    priority: str = OMITTED
    step: int | None = None
    checkpoint_step: int | None = None
    at: UnixS = OMITTED
    message: str = OMITTED


class GpuLife(Answer):
    mean_percent: float
    idle_percent: float
    gpu_seconds: float


class MadeBy(Answer):
    """the schedule and the firing that made this job"""

    name: str
    firing: str = Field(description="the firing's time (ISO 8601, UTC)")


class TrialOf(Answer):
    """the trial of a search this job is: its number and sampled values"""

    number: int = OMITTED
    values: dict[str, Any] = OMITTED


class Attach(Answer):
    """a live shell session: where it runs and how to attach (its port and secret for its owner only)"""

    host: str = OMITTED
    command: str = OMITTED
    ssh: str = OMITTED
    port: int = OMITTED
    secret: str = OMITTED


class EarlyStop(Answer):
    """where and why its search stopped it: the step, the rung, the metric's value"""

    step: int | None = None
    rung: int | None = None
    metric: str = OMITTED
    value: float | None = None


class SlurmJob(Answer):
    """its Slurm job (GPUDECK_BACKEND=slurm): Slurm's id, and its state and pending reason as gpudeck last saw them in
    squeue"""

    id: str = OMITTED
    state: str | None = None
    reason: str | None = None


class Artifacts(Answer):
    """its files in the object store (GPUDECK_ARTIFACTS) as its last attempt left them: the store, how many files it
    uploaded, and the error where the store did not take one (the job dir keeps every file)"""

    store: str = OMITTED
    files: int = OMITTED
    error: str | None = None


class MlflowExport(Answer):
    status: Literal["pending", "exported", "retrying", "failed"]
    run_id: str = OMITTED
    experiment_id: str = OMITTED
    points: int = OMITTED
    attempts: int = OMITTED
    error: str = OMITTED
    at: UnixS = OMITTED
    next_at: float | None = Field(None, description="unix time, seconds (a sample's clock, for arithmetic, not a date)")
    queued_at: UnixS = OMITTED


class Export(Answer):
    """its export to the operator's MLflow (GPUDECK_MLFLOW_URI): pending, exported (the run's id), retrying or failed
    (the error); a failed export never fails the job"""

    mlflow: MlflowExport = OMITTED


class Job(Answer):
    id: int
    name: str
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")
    status: StatusName
    reason: ReasonName | None = None
    message: str | None = None
    spec: JobSpec
    queue: str = OMITTED
    worker: str | None = None
    gpu_ids: list[str] | None = None
    gpu_fraction: float | None = Field(
        None, description="a share (gpu_memory): its part of the GPU it runs on, as quotas and fair share count it"
    )
    warm_start: bool | None = Field(
        None,
        description=(
            "whether its current attempt started in a warm trainer (a zoo trainer its worker made ahead of time: "
            "README, Fast small jobs); null before it starts"
        ),
    )
    attempt: int
    created_at: Time
    started_at: Time | None = None
    first_started_at: Time | None = Field(
        None, description="when its first attempt started (started_at: the current attempt's)"
    )
    ended_at: Time | None = None
    elapsed_s: float | None = None
    ran_s: float | None = Field(
        None, description="seconds it has run in all, over every attempt (elapsed_s: this one's)"
    )
    eta_s: float | None = None
    progress: Progress
    metrics: LastMetrics | None = None
    result: Result | None = None
    runs: list[str] = Field(
        OMITTED, description="a command job's run folders with event files, in the order they began"
    )
    warning: str | None = Field(
        None,
        description=(
            "a job that ended normally but diverged: its loss grew by orders of magnitude and its test accuracy is at "
            "chance (a model job's trainer says so)"
        ),
    )
    log_tail: list[str] | None = None
    tasks: list[Task] | None = None
    source: Source | None = None
    environment: dict[str, str] | None = None
    queue_position: int | None = Field(
        None, description="a queued job's place in the scheduler's line: 1 is the next it considers"
    )
    expected_start: Time | None = Field(
        None,
        description=(
            "when a queued job is expected to start, from the running jobs' progress and the expected durations of the"
            " jobs ahead (null: expected_start_reason says why)"
        ),
    )
    expected_start_reason: str | None = None
    expected_duration_s: float | None = Field(
        None,
        description=(
            "how long a queued or running job is expected to run, as the scheduler plans with it (null: unknown)"
        ),
    )
    expected_duration_source: DurationSource | None = Field(
        None,
        description=(
            "where expected_duration_s comes from: the job's expected_duration, its owner's past runs of the same job,"
            " its steps (total_steps, params.steps) at the pace its kind's runs went, its owner's runs"
            " of the same kind (a zoo job's model and dataset, a command's script or module), anybody's runs of that "
            "kind, or its timeout"
        ),
    )
    expected_duration_runs: int | None = Field(
        None, description="how many past runs a learned expected_duration_s comes from"
    )
    expected_duration_spread_s: Annotated[list[float], Field(min_length=2, max_length=2)] | None = Field(
        None, description="the shortest and longest of those runs (seconds): how sure the estimate is"
    )
    preemptions: int | None = Field(
        None, description="how often the job was stopped to make room for a higher-priority one"
    )
    preempted_by: Preemption | None = Field(
        None, description="the last preemption: by which job, at which step, from which checkpoint"
    )
    usage: Usage | None = None
    gpu_life: GpuLife | None = Field(
        None,
        description=(
            "its GPUs over its life so far, as nvidia-smi read them every 2 s: mean utilization, the share of its "
            "GPU-time under 5 %, GPU-seconds read; null before the first"
        ),
    )
    disk_bytes: int | None = Field(
        None, description="bytes of the job dir: measured every 30 s while it runs, and at its end"
    )
    resumes: int | None = Field(
        None, description="a retry of a model job: the job whose last checkpoint it starts from"
    )
    sweep_id: int | None = Field(None, description="the sweep that made this job (it also has a sweep:N tag)")
    trial: TrialOf | None = Field(None, description="the trial of a search this job is: its number and sampled values")
    project: str | None = Field(None, description="the project it belongs to (its spec's, or its owner's default)")
    schedule: MadeBy | None = Field(
        None, description="the schedule and the firing that made this job (it also has a schedule:NAME tag)"
    )
    stopped_early: bool = Field(
        OMITTED, description="a trial its search stopped early (status succeeded, reason stopped_early)"
    )
    kind: Literal["model", "command", "session"] = OMITTED
    attach: Attach | None = Field(
        None,
        description="a live shell session: where it runs and how to attach (its port and secret for its owner only)",
    )
    url: str | None = Field(None, description="a live notebook session's address (its token: owner only)")
    tunnel: str | None = Field(None, description="the ssh line that brings a notebook's port to your machine")
    early_stop: EarlyStop | None = Field(
        None, description="where and why its search stopped it: the step, the rung, the metric's value"
    )
    slurm: SlurmJob | None = Field(
        None,
        description=(
            "its Slurm job (GPUDECK_BACKEND=slurm): Slurm's id, and its state and pending reason as gpudeck last saw "
            "them in squeue"
        ),
    )
    artifacts: Artifacts | None = Field(
        None,
        description=(
            "its files in the object store (GPUDECK_ARTIFACTS) as its last attempt left them: the store, how many "
            "files it uploaded, and the error where the store did not take one (the job dir keeps every file)"
        ),
    )
    export: Export | None = Field(
        None,
        description=(
            "its export to the operator's MLflow (GPUDECK_MLFLOW_URI): pending, exported (the run's id), retrying or "
            "failed (the error); a failed export never fails the job"
        ),
    )


class Delivery(Answer):
    delivery: str = OMITTED
    endpoint: str = OMITTED
    event: str = OMITTED
    attempt: int = OMITTED
    at: UnixS = OMITTED
    delivered: bool = OMITTED
    answer: str = Field(OMITTED, description="the HTTP status, or the error")
    gave_up: bool = OMITTED


class Notifications(Answer):
    job_id: int
    notify: list[str]
    attempts: list[Delivery]


class GpuUsage(Answer):
    index: int | None = None
    utilization: float | None = None
    memory_used_mib: float | None = None
    host: str = OMITTED


class Usage(Answer):
    """what a starting or running job's processes use, sampled every 2 s on each host it runs on: CPU % of one core
    (summed; null on the first sample), resident memory, and per GPU its utilization and the memory the job's
    processes hold (from nvidia-smi)"""

    cpu_percent: float | None
    rss_bytes: int
    processes: int
    gpus: list[GpuUsage]
    hosts: list[str]
    sampled_at: UnixS


class Deleted(Answer):
    id: int
    deleted: bool
    bytes_freed: int
    objects_deleted: int = Field(OMITTED, description="its objects deleted from the store (GPUDECK_ARTIFACTS)")
    store_error: str = Field(OMITTED, description="why its objects in the store could not be deleted")


class File(Answer):
    path: str
    size: int
    modified: Time


class FileList(Answer):
    job_id: int
    store: str = Field(
        OMITTED,
        description=(
            "where the files were listed from when this API's host has no job dir: the object store "
            "(GPUDECK_ARTIFACTS), which has the checkpoints, model and result"
        ),
    )
    files: list[File]
    total_bytes: int
    truncated: bool = Field(description="more files than one listing answers (100,000)")


class Task(Answer):
    index: int
    type: Literal["chief", "worker"]
    task_index: int
    worker: str | None
    host: str | None = None
    gpu_ids: list[str] = OMITTED
    address: str | None = None
    pid: int | None = None
    status: TaskStatusName
    reason: str | None = None
    message: str | None = None


class JobList(Answer):
    jobs: list[Job]
    next_cursor: int | None
    total: int = Field(description="how many jobs the store holds (of every status)", ge=0)


class DryRun(Answer):
    dry_run: Literal[True]
    spec: JobSpec
    queue: str
    expected_duration_s: float | None
    expected_duration_from: DurationSource | None = None
    expected_start: Time | None
    expected_start_note: str | None = None
    gpu_hours: float | None = Field(description="GPUs x tasks x expected hours (a share: its part)")


class MetricPoint(Answer):
    step: float | None = None
    epoch: float | None = None
    loss: float | None = None
    accuracy: float | None = None
    lr: float | None = None
    images_per_sec: float | None = None
    val_loss: float | None = None
    val_accuracy: float | None = None
    nonfinite: Nonfinite = OMITTED
    run: str = Field(OMITTED, description="the run folder of a script's event files it came from (`logs/fit/…`)")


class Metrics(Answer):
    job_id: int
    train: list[MetricPoint]
    validation: list[MetricPoint]


class ComparedTrial(Answer):
    number: int = OMITTED
    values: dict[str, Any] = OMITTED


class ComparedJob(Answer):
    id: int
    name: str | None = None
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")
    project: str | None = Field(None, description="the project it belongs to")
    status: StatusName
    reason: str | None = None
    kind: Literal["model", "command", "session"]
    sweep_id: int | None = None
    trial: ComparedTrial | None = None


class DifferingField(Answer):
    field: str
    values: list[Any] = Field(description="any JSON value")


class ResultRow(Answer):
    job_id: int


class Curve(Answer):
    job_id: int
    run: str | None
    points: list[list[float]]


class Comparison(Answer):
    jobs: list[ComparedJob] = Field(description="the jobs, in the order asked")
    differs: list[DifferingField] = Field(
        description=(
            "the configuration fields (dotted: params.lr, source.git_commit, env names, environment digest) whose "
            "values are not all the same; `values` in the jobs' order"
        )
    )
    same: int = Field(description="how many configuration fields are the same in every job")
    result_columns: list[str]
    results: list[ResultRow] = Field(
        description=(
            "a row a job: its result's numbers, last_loss, duration_s, images_per_sec, gpu_hours (null where it has "
            "none)"
        )
    )
    best: dict[str, int] = Field(
        description=(
            "a results column -> the id of its best job (the smallest for losses, errors, time and GPU-hours; the "
            "largest otherwise), where two jobs or more have differing numbers"
        )
    )
    metrics: list[str] = Field(description="what the jobs' points report")
    metric: str
    x: XAxis
    curves: list[Curve] = Field(description="the metric over x: one curve a job's run, at most `points` points each")


class PriorityInput(Input):
    priority: Priority


class MoveInput(Input):
    """one of: before or after another queued job of the same line (priority and owner), or top: first of that line"""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})
    before: int = Field(OMITTED, ge=1)
    after: int = Field(OMITTED, ge=1)
    top: Literal[True] = OMITTED


class RetryInput(Input):
    resume: bool = Field(
        OMITTED,
        description=(
            "a model job starts from the last checkpoint the job left (default true); false trains from the start"
        ),
    )
