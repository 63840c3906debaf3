"""A job's kept spec and its record as the engine reads them, typed: views over the stored dicts (`Kept`, `Job`),
each field declared once here with its type and its default; nothing copied, nothing validated again (the service
validated the spec once: jobs.spec)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Generic, TypeVar, cast, overload

from models.jobspec import SESSION, Common

T = TypeVar("T")


class Read(Generic[T]):
    """A typed field of a stored dict (a kept spec, a job record), read where it is used: the stored value, or
    `default` where it is missing or null. Views hold the dict itself (`raw`): nothing is copied or validated again,
    and a field this view does not declare is kept all the same."""

    def __init__(self, default: T, stored: str = "text"):
        self.default = default
        self.stored = stored
        """How the store keeps it in the record's hash (a job record's: jobs.store's codec): text, int, float, json."""
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, view: None, owner: type) -> Read[T]: ...
    @overload
    def __get__(self, view: object, owner: type) -> T: ...
    def __get__(self, view: object, owner: type) -> Read[T] | T:
        if view is None:
            return self
        value = view.raw.get(self.name)  # type: ignore[attr-defined]
        return self.default if value is None else cast(T, value)


NOTHING: Mapping[str, Any] = MappingProxyType({})
INT, FLOAT, JSON = "int", "float", "json"
"""How a job record's field is kept in its Redis hash, other than text (Read.stored)."""


def declared(name: str) -> Any:
    """A spec field's default as its declaration states it (models/jobspec.py: `Field(1)`), not written again."""
    return Common.model_fields[name].default


FILLED = ("gpus", "name")
"""What the service fills in where a spec does not say (the GPUs from the live workers, the name from the model or
command): every kept spec has them."""


def defaults() -> dict[str, Any]:
    """Every field of every kind with a default of its own, as the declaration states it: every kept spec has these
    too (a record made before a field was declared is shown with its default)."""
    return {
        name: field.get_default(call_default_factory=True)
        for name, field in Common.model_fields.items()
        if not field.is_required() and (field.default is not None or field.default_factory is not None)
    }


class Kept:
    """A job's spec as the job keeps it (`normalized`: every default filled in), typed for the engine: `spec.gpus`,
    not `spec.get("gpus") or 0`. `job.spec` (jobs.record.Job); `raw` is the dict as stored (what files and clients are
    given)."""

    __slots__ = ("raw",)

    kind: Read[str | None] = Read(None)
    model: Read[str | None] = Read(None)
    command: Read[str | list[str] | None] = Read(None)
    name: Read[str] = Read("")
    gpus: Read[int] = Read(0)
    gpu_memory: Read[int | None] = Read(None)
    """Bytes of one GPU (a share), or None: whole GPUs."""
    workers: Read[int] = Read(declared("workers"))
    chief: Read[bool] = Read(declared("chief"))
    priority: Read[str] = Read(declared("priority"))
    tags: Read[Sequence[str]] = Read(())
    project: Read[str | None] = Read(None)
    timeout: Read[int | None] = Read(None)
    expected_duration: Read[int | None] = Read(None)
    max_retries: Read[int] = Read(declared("max_retries"))
    preemptible: Read[bool] = Read(declared("preemptible"))
    idle_exempt: Read[bool] = Read(False)
    after: Read[Sequence[int]] = Read(())
    notify: Read[Sequence[str]] = Read(())
    export: Read[Sequence[str]] = Read(())
    dataset: Read[str | None] = Read(None)
    params: Read[Mapping[str, Any]] = Read(NOTHING)
    source: Read[str | None] = Read(None)
    env: Read[Mapping[str, str]] = Read(NOTHING)
    secret_env: Read[Mapping[str, str]] = Read(NOTHING)
    env_name: Read[str | None] = Read(None)
    caches: Read[Sequence[str]] = Read(())
    requirements: Read[str | None] = Read(None)
    isolated_env: Read[bool] = Read(False)
    total_steps: Read[int | None] = Read(None)
    warm_imports: Read[Sequence[str]] = Read(())
    classes: Read[int | None] = Read(None)
    jupyter: Read[bool] = Read(False)
    idle: Read[int] = Read(0)
    """A session's idle time (s)."""

    def __init__(self, raw: dict[str, Any] | None = None):
        self.raw: dict[str, Any] = raw if raw is not None else {}

    @property
    def runs_code(self) -> bool:
        """The user's own code (a command, a session's shell or notebook), not a model of the zoo (is_command)."""
        return self.command is not None or self.kind == SESSION

    @property
    def is_session(self) -> bool:
        return self.kind == SESSION

    @property
    def multi_worker(self) -> bool:
        """It runs as several tasks (gang-scheduled, jobs.gang)."""
        return self.workers > 1

    def with_(self, **fields: Any) -> Kept:
        """This spec with `fields` replaced."""
        return Kept({**self.raw, **fields})


class Job(dict[str, Any]):
    """A job record, typed for the engine: the record as read (what views and the API are given; `rec["status"]`
    reads as from the dict it is) and its fields typed, `job.attempt`, `job.spec.gpus` (Kept), the stored value or
    the default where it is missing. Every record the store reads is one (jobs.store)."""

    __slots__ = ()

    id: Read[int] = Read(0, INT)
    status: Read[str] = Read("")
    owner: Read[str | None] = Read(None)
    worker: Read[str | None] = Read(None)
    attempt: Read[int] = Read(1, INT)
    resumes: Read[int | None] = Read(None, INT)
    """The job a retry of it resumes from (its checkpoints)."""
    trial: Read[dict[str, Any] | None] = Read(None, JSON)
    """A search's trial: its number and values."""
    schedule: Read[dict[str, Any] | None] = Read(None, JSON)
    """The schedule and the firing that made the job: {"name", "firing"} (jobs.cronjobs)."""
    gen: Read[int] = Read(0, INT)
    seq: Read[float | None] = Read(None, FLOAT)
    gpu_ids: Read[Sequence[int | str]] = Read((), JSON)
    gpu_fraction: Read[float | None] = Read(None, FLOAT)
    """A share's part of its GPU, once placed (jobs.schedule)."""
    result: Read[dict[str, Any] | None] = Read(None, JSON)
    created_at: Read[float] = Read(0.0, FLOAT)
    placed_at: Read[float] = Read(0.0, FLOAT)
    claimed_at: Read[float | None] = Read(None, FLOAT)
    spawned_at: Read[float | None] = Read(None, FLOAT)
    started_at: Read[float | None] = Read(None, FLOAT)
    first_started_at: Read[float | None] = Read(None, FLOAT)
    running_at: Read[float | None] = Read(None, FLOAT)
    ended_at: Read[float | None] = Read(None, FLOAT)
    ran_s: Read[float] = Read(0.0, FLOAT)
    """Seconds its earlier attempts ran (kept at each requeue)."""
    gpu_seconds: Read[float] = Read(0.0, FLOAT)
    """Its GPUs over its life (jobs.usage.account adds to these three)."""
    gpu_busy_seconds: Read[float] = Read(0.0, FLOAT)
    gpu_idle_seconds: Read[float] = Read(0.0, FLOAT)
    pid: Read[int | None] = Read(None, INT)
    disk_bytes: Read[int | None] = Read(None, INT)
    preemptions: Read[int] = Read(0, INT)
    progress: Read[dict[str, Any] | None] = Read(None, JSON)
    metrics: Read[dict[str, Any] | None] = Read(None, JSON)
    log_tail: Read[Sequence[str]] = Read((), JSON)
    source: Read[dict[str, Any] | None] = Read(None, JSON)
    environment: Read[dict[str, Any] | None] = Read(None, JSON)
    slots: Read[Sequence[str]] = Read((), JSON)
    preempted_by: Read[dict[str, Any] | None] = Read(None, JSON)
    runs: Read[Sequence[str]] = Read((), JSON)
    early_stop: Read[dict[str, Any] | None] = Read(None, JSON)
    gpu_memory_exceeded: Read[dict[str, Any] | None] = Read(None, JSON)
    gpu_error: Read[dict[str, Any] | None] = Read(None, JSON)
    idle_warning: Read[dict[str, Any] | None] = Read(None, JSON)
    idle_stop: Read[dict[str, Any] | None] = Read(None, JSON)
    session: Read[dict[str, Any] | None] = Read(None, JSON)
    warm_start: Read[Any] = Read(None, JSON)
    export: Read[dict[str, Any] | None] = Read(None, JSON)
    artifacts: Read[dict[str, Any] | None] = Read(None, JSON)
    slurm: Read[dict[str, Any] | None] = Read(None, JSON)

    @property
    def raw(self) -> dict[str, Any]:
        """The record as a dict (itself)."""
        return self

    @property
    def spec(self) -> Kept:  # type: ignore[override]
        return Kept(self["spec"])

    @classmethod
    def stored_as(cls, kind: str) -> tuple[str, ...]:
        """The record's fields the store keeps as `kind` (jobs.store's codec; the spec is kept as JSON)."""
        fields = tuple(v.name for v in vars(cls).values() if isinstance(v, Read) and v.stored == kind)
        return ("spec", *fields) if kind == JSON else fields

    @classmethod
    def of(cls, rec: dict[str, Any]) -> Job:
        """`rec` typed: itself where it is a Job already (nothing copied), else a Job of its fields."""
        return rec if isinstance(rec, Job) else cls(rec)
