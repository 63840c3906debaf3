"""The API's bodies as pydantic models: what each route answers, and the small request bodies beside a job's spec
(whose kinds are models.jobspec's). The OpenAPI document's component schemas are made from these
(api/openapi/__init__.py: `components`), so what it says of an answer is what is declared here, once;
tests/api/test_openapi.py checks real answers against them. An answer may carry fields it does not declare (a
client keeps what it does not know); a request body may not."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, WithJsonSchema
from pydantic.json_schema import GenerateJsonSchema, JsonRef, JsonSchemaValue, models_json_schema

from jobs.compare import X_AXES
from jobs.plan import SOURCES
from jobs.searchspace import SEARCHES
from models.searchinput import Distribution, JobSpecInput, SearchSweepInput, Stopping  # noqa: F401 (declared there)
from models.states import PRIORITIES, Reason, Status, TaskStatus


class Answer(BaseModel):
    """A response body."""


class Input(BaseModel):
    """A request body: a field it does not declare is refused."""

    model_config = ConfigDict(extra="forbid")


OMITTED: Any = None
"""The default of a field an answer may leave out (it is not null when it is there)."""


# (said in place, not as components of their own: a generated client names each enum by its field, JobStatus)
StatusName = Annotated[str, WithJsonSchema({"type": "string", "enum": [s.value for s in Status]})]
ReasonName = Annotated[str, WithJsonSchema({"type": "string", "enum": [r.value for r in Reason]})]
TaskStatusName = Annotated[str, WithJsonSchema({"type": "string", "enum": [s.value for s in TaskStatus]})]
Priority = Annotated[str, WithJsonSchema({"type": "string", "enum": list(PRIORITIES)})]
XAxis = Annotated[str, WithJsonSchema({"type": "string", "enum": list(X_AXES)})]
Search = Annotated[str, WithJsonSchema({"type": "string", "enum": list(SEARCHES)})]
DurationSource = Annotated[str, WithJsonSchema({"type": "string", "enum": ["declared", *SOURCES, "timeout"]})]
Time = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
"""Every date-time in one form: RFC 3339 in UTC with milliseconds, 2026-11-24T15:17:02.123Z (jobs.store.iso)."""
UnixS = Annotated[float, Field(description="unix time, seconds (a sample's clock, for arithmetic, not a date)")]
# Schemas made from the job spec's declaration (models.jobspec; api/openapi/jobschemas.py, api/openapi/sweeps.py):
JobSpec = Annotated[dict[str, Any], WithJsonSchema({"$ref": "#/components/schemas/JobSpec"})]
GridSweepInput = Annotated[dict[str, Any], WithJsonSchema({"$ref": "#/components/schemas/GridSweepInput"})]


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


class Sweep(Answer):
    id: int
    grid: dict[str, Any] = OMITTED
    base: dict[str, Any] = OMITTED
    job_ids: list[int]
    jobs: list[Job]
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")
    max_concurrent: int | None = None


class RungTrial(Answer):
    job: int | None = None
    trial: int = OMITTED
    value: float | None = None
    passed: bool = OMITTED


class Rung(Answer):
    rung: int = OMITTED
    step: int = OMITTED
    trials: list[RungTrial] = OMITTED


class Budget(Answer):
    trials: int = OMITTED
    trials_left: int = OMITTED
    steps: int = OMITTED
    time_used_s: float = OMITTED
    time_left_s: float | None = None


class SweepJobs(Answer):
    job_id: int
    name: str | None = None
    rank: int | None
    status: str
    fraction: float | None = None
    metric: float | None = None
    test_accuracy: float | None = None
    test_loss: float | None = None
    last_loss: float | None = None


class SweepSummary(Answer):
    id: int
    search: Search
    state: Literal["running", "done", "stopped", "failed"]
    stopped: str | None = Field(None, description="why it launches no more trials")
    grid: dict[str, Any] = OMITTED
    space: dict[str, Any] | None = None
    stopping: dict[str, Any] | None = None
    metric: str = OMITTED
    mode: Literal["min", "max"] = OMITTED
    base: dict[str, Any] = OMITTED
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")
    max_concurrent: int | None = None
    max_trials: int | None = None
    time_budget: int | None = None
    seed: int | None = None
    created_at: Time | None = None
    trials: list[Trial]
    rungs: list[Rung] = Field(
        OMITTED, description="successive halving's rungs: each one's step, who reached it and who went on"
    )
    budget: Budget
    jobs: list[SweepJobs]
    ended: int
    total: int
    best: Trial | None


class Trial(Answer):
    number: int
    job: int | None
    name: str | None = None
    values: dict[str, Any] = Field(description="keyed like the space (or the grid): params.lr -> 0.03")
    metric: float | None = Field(description="its final value (running: the last reported)")
    status: str
    reason: str | None = None
    stopped_early: bool
    rung: int | None = None
    step: int | None = None
    fraction: float | None = None


class SweepRow(Answer):
    id: int = OMITTED
    search: str = OMITTED
    name: str | None = None
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")
    metric: str = OMITTED
    trials: int = OMITTED
    max_trials: int | None = None
    state: str | None = None
    created_at: Time | None = None


class SweepList(Answer):
    sweeps: list[SweepRow]


class Source(Answer):
    ref: str
    sha256: str
    files: int
    size_bytes: int
    created_at: Time
    git_commit: str = OMITTED
    git_dirty: bool = OMITTED
    path: str = OMITTED


class DeletedDataset(Answer):
    name: str
    version: str
    deleted: bool
    bytes_freed: int


class ZooModel(Answer):
    name: str
    family: str
    input_shape: list[int]
    parameters: int
    aliases: list[str] = OMITTED
    params: dict[str, Any]


class ModelList(Answer):
    models: list[ZooModel]
    recipes: dict[str, Any]
    next_cursor: None = OMITTED


class DatasetVersion(Answer):
    name: str
    version: str
    ref: str
    format: str
    files: int
    size_bytes: int
    created_at: Time
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")


class Dataset(Answer):
    name: str
    latest: str
    versions: list[DatasetVersion]


class DatasetList(Answer):
    datasets: list[Dataset]
    next_cursor: None


class Env(Answer):
    digest: str = OMITTED
    path: str = OMITTED
    size_bytes: int = OMITTED
    kind: Literal["requirements", "uv.lock"] = OMITTED
    packages: int = OMITTED
    isolated: bool = OMITTED
    python: str = OMITTED
    built_at: UnixS = OMITTED
    built_by: int = OMITTED
    last_used: float | None = Field(
        None, description="unix time, seconds (a sample's clock, for arithmetic, not a date)"
    )
    jobs: list[int] = Field(OMITTED, description="the newest 20 that used it")


class EnvList(Answer):
    envs: list[Env]


class Error(Input):
    error: str
    message: str
    details: dict[str, Any]


class Worker(Answer):
    name: str
    host: str
    pid: int | None = None
    gpus: list[str]
    queues: list[str]
    state: str = Field(description="RQ's state (idle, busy, …), or lost: it stopped beating")
    alive: bool = Field(description="it beat in the last 10 s")
    job_id: int | None
    draining: bool
    last_heartbeat: Time | None = None
    sandboxed: bool | None = Field(None, description="whether its jobs run in a bubblewrap sandbox")
    isolation: str | None = Field(None, description="how its jobs are isolated, as it said at start")


class WorkerList(Answer):
    workers: list[Worker]
    next_cursor: None = OMITTED


class GpuProcess(Answer):
    pid: int
    name: str = OMITTED
    used_memory_mib: float | None = None
    job_id: int | None
    user: str | None = Field(None, description="who runs it (a foreign process: no job_id)")
    left_by: int | None = Field(None, description="the job this process outlived (it still holds memory)")
    left_since: float | None = Field(None, description="when it was first seen so (Unix s)")


class Cordon(Answer):
    """out of service after a hardware error (the kernel log's XID), until an admin uncordons it"""

    xid: int
    at: float
    text: str = OMITTED


class Gpu(Answer):
    index: int
    uuid: str
    name: str
    utilization: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    processes: list[GpuProcess]
    held_by: GpuHolder | None = Field(None, description="the first of `holders` (null: nobody holds it)")
    cordoned: Cordon | None = Field(
        None, description="out of service after a hardware error (the kernel log's XID), until an admin uncordons it"
    )
    holders: list[GpuHolder] = Field(
        OMITTED,
        description=(
            "the active jobs on this GPU: one that holds it whole, or the jobs sharing it (each with its gpu_memory)"
        ),
    )


class HostCheck(Answer):
    host: str
    workers: int
    gpus: list[str]
    driver: str | None = Field(None, description="the NVIDIA driver (null: no nvidia-smi)")
    mps_installed: bool | None = None
    mps: bool | None = Field(None, description="GPUDECK_MPS on its workers")
    tensorflow: bool | None = Field(None, description="its workers train zoo models (gpudeck[tensorflow])")
    uv: bool | None = Field(None, description="its workers build project environments")
    jupyter: bool | None = Field(None, description="its workers serve notebooks")
    sandboxed: bool = OMITTED
    clock_offset_s: float | None = Field(description="the API's clock less the host's, as its workers last beat")


class Doctor(Answer):
    hosts: list[HostCheck]
    clock_skew_max_s: float


class GpuHolder(Answer):
    job_id: int
    owner: str | None
    kind: Literal["job", "session"] = OMITTED
    gpu_memory: int | None = Field(None, description="a share's bytes of the GPU (null: it holds it whole)")


class GpuHost(Answer):
    host: str
    sampled_at: UnixS
    gpus: list[Gpu]


class GpuHosts(Answer):
    hosts: list[GpuHost]
    next_cursor: None = OMITTED


class TensorBoardInput(Input):
    jobs: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, max_length=100)


class TensorBoard(Answer):
    url: str = Field(json_schema_extra={"format": "uri"})
    port: int
    host: str
    jobs: list[int]
    runs: list[str]
    ssh_tunnel: str
    started_at: Time = OMITTED
    last_used_at: Time = OMITTED
    reused: bool = OMITTED
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")


class TensorBoardList(Answer):
    tensorboards: list[TensorBoard]
    next_cursor: None = OMITTED


class LongPolls(Answer):
    """log follows and waits the answering API process holds, and its limits"""

    open: int
    limit: int
    per_client: int


class Disk(Answer):
    """space under GPUDECK_HOME; `low`: below GPUDECK_MIN_FREE, new jobs and uploads are refused (507) and workers take
    no new job"""

    path: str
    free_bytes: int
    total_bytes: int
    min_free_bytes: int
    low: bool


class GpuNotReleased(Answer):
    host: str
    gpu: str
    job_id: int
    pid: int
    used_memory_mib: float | None = None
    for_s: int


class Health(Answer):
    status: Literal["ok", "degraded", "unavailable"]
    redis: str
    workers: int
    workers_alive: int
    long_polls: LongPolls = Field(description="log follows and waits the answering API process holds, and its limits")
    command_jobs: bool = Field(
        description="whether this API accepts command jobs (tokens on, or GPUDECK_COMMAND_JOBS=1)"
    )
    disk: Disk = Field(
        OMITTED,
        description=(
            "space under GPUDECK_HOME; `low`: below GPUDECK_MIN_FREE, new jobs and uploads are refused (507) and "
            "workers take no new job"
        ),
    )
    redis_saving: Literal["appendonly", "snapshots", "none", "unknown"] = Field(
        OMITTED, description="how Redis keeps the queue across its restart (none: a restart loses every job)"
    )
    gpus_not_released: list[GpuNotReleased] = Field(
        OMITTED,
        description=(
            "GPU memory a process still holds a minute after its job ended: that GPU takes no job of whole GPUs until "
            "it is released"
        ),
    )


class Line(Answer):
    queued: int = Field(description="jobs in line")
    waiting_for_dependencies: int = Field(description="jobs waiting for their dependencies (in no line)")
    jobs: list[Job] = Field(description="the first, in the scheduler's order")


class OwnerShare(Answer):
    owner: str | None
    usage_gpu_hours: float = Field(description="decayed GPU-hours")
    share: float = Field(description="of everybody's decayed usage")
    gpus: float = Field(description="GPUs held now (a share counts its part)")
    running: int
    queued: int
    idle_gpu_hours: float = Field(
        OMITTED, description="GPU-hours their jobs held GPUs under 5 % utilization (not decayed)"
    )


class Share(Answer):
    fairshare: bool = Field(description="GPUDECK_FAIRSHARE: the line is ordered by usage")
    halflife_s: int = Field(description="GPUDECK_FAIRSHARE_HALFLIFE in seconds")
    preempt: bool = Field(OMITTED, description="GPUDECK_PREEMPT")
    preempt_after_s: int = Field(OMITTED, description="GPUDECK_PREEMPT_AFTER in seconds")
    owners: list[OwnerShare]


class WhoAmI(Answer):
    name: str | None
    role: Literal["admin", "user"]
    auth: Literal["named", "shared", "none"] = Field(
        description="a named token, a GPUDECK_TOKENS one, or none configured (anyone may do anything)"
    )
    max_gpus: int | None = None
    max_priority: Priority | None = None
    commands: bool | None = None


class AuditEntry(Answer):
    time: Time
    user: str
    address: str = OMITTED
    method: str
    path: str
    status: int
    detail: str = OMITTED


class AuditTrail(Answer):
    entries: list[AuditEntry]
    next_cursor: None = OMITTED


class SweepInput(RootModel[GridSweepInput | SearchSweepInput]):
    """a grid (one job per combination) or a search (trials sampled and stopped early)"""


class _Components(GenerateJsonSchema):
    """pydantic's JSON Schema, where a reference to a schema made elsewhere (made_elsewhere) is left as it is."""

    def handle_ref_overrides(self, json_schema: JsonSchemaValue) -> JsonSchemaValue:
        if "$ref" in json_schema and JsonRef(json_schema["$ref"]) not in self.json_to_defs_refs:
            return json_schema
        return super().handle_ref_overrides(json_schema)


def _plain(node: Any) -> Any:
    """A pydantic JSON Schema without what it makes up: the titles it takes from names (a generator names types by
    them), a default of null on a field that is only left out, and the line breaks of a docstring wrapped to be
    read here."""
    if isinstance(node, dict):
        return {
            k: " ".join(v.split()) if k == "description" and isinstance(v, str) else _plain(v)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str)) and not (k == "default" and v is None)
        }
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def models() -> list[type[BaseModel]]:
    """Every body declared here, and the search body models.searchinput declares (jobs.searchspace checks with it)."""
    return [
        v
        for k, v in globals().items()
        if isinstance(v, type)
        and issubclass(v, BaseModel)
        and v.__module__ in (__name__, "models.searchinput")
        and v not in (Answer, Input)
        and k.isidentifier()  # (not the parametrized generics pydantic names here: RootModel[...])
    ]


def components() -> dict[str, Any]:
    """The OpenAPI document's component schemas of these models (each under its class's name)."""
    _, top = models_json_schema(
        [(m, "validation") for m in models()],
        ref_template="#/components/schemas/{model}",
        schema_generator=_Components,
    )
    return _plain(top["$defs"])
