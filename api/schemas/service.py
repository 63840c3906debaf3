"""The bodies of the service: errors, workers, GPUs, the doctor, TensorBoards, health, the line, the fair share,
who a token is and the audit trail."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from api.schemas.base import (
    OMITTED,
    Answer,
    Input,
    Priority,
    Time,
    UnixS,
)
from api.schemas.jobs import Job


class Error(Input):
    error: str
    message: str
    details: dict[str, Any]


class WarmTrainer(Answer):
    pid: int = Field(description="its sandbox's first process (the worker's child)")
    rss_bytes: int = Field(description="resident memory of its processes, as its worker measured it last")
    since: UnixS = Field(description="when it was started")
    kind: Literal["trainer", "interpreter"] = Field(
        "trainer",
        description="a zoo trainer (TensorFlow and the zoo imported), or a Python interpreter of a command job's "
        "environment (what its last such job imported, imported)",
    )


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
    warm: WarmTrainer | None = Field(None, description="the trainer it keeps ready for the next zoo job, if any")


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
    project: str | None = Field(OMITTED, description="their default project: the group fair share orders first")
    usage_gpu_hours: float = Field(description="decayed GPU-hours")
    share: float = Field(description="of everybody's decayed usage")
    gpus: float = Field(description="GPUs held now (a share counts its part)")
    running: int
    queued: int
    idle_gpu_hours: float = Field(
        OMITTED, description="GPU-hours their jobs held GPUs under 5 % utilization (not decayed)"
    )


class ProjectShare(Answer):
    project: str
    weight: float = Field(description="its --share: GPU time goes between projects in these proportions")
    usage_gpu_hours: float = Field(description="its people's decayed GPU-hours")
    share: float = Field(description="of everybody's decayed usage")
    gpus: float
    running: int
    queued: int


class Share(Answer):
    fairshare: bool = Field(description="GPUDECK_FAIRSHARE: the line is ordered by usage")
    halflife_s: int = Field(description="GPUDECK_FAIRSHARE_HALFLIFE in seconds")
    preempt: bool = Field(OMITTED, description="GPUDECK_PREEMPT")
    preempt_after_s: int = Field(OMITTED, description="GPUDECK_PREEMPT_AFTER in seconds")
    projects: list[ProjectShare] = Field(OMITTED, description="least used for its weight first; empty: no projects")
    owners: list[OwnerShare] = Field(description="in the order the scheduler serves them")


class AccountsRow(Answer):
    period: str = Field(description="the period's first day (UTC: a week's Monday, a month's 1st), or all")
    owner: str | None = Field(OMITTED, description="by=user: whose jobs (null: no named token)")
    project: str | None = Field(OMITTED, description="by=project: their project (null: none)")
    jobs: int = Field(description="jobs that ended in it")
    by_state: dict[str, int] = Field(description="those jobs by their end state: succeeded, failed, canceled")
    gpu_hours: float = Field(description="GPU-hours they held (a share of a GPU counts its part)")
    idle_gpu_hours: float = Field(description="of those, GPU-hours under 5 % utilization")
    wait_p50_s: float | None = Field(description="their wait in line, submit to first start: the median")
    wait_p95_s: float | None = Field(description="and the 95th percentile (null: none of them started)")


class Accounts(Answer):
    since: str
    until: str
    by: Literal["user", "project", "none"]
    period: Literal["day", "week", "month", "all"]
    rows: list[AccountsRow] = Field(description="a row per period and owner, oldest first")
    total: AccountsRow = Field(description="every job of the range")


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
