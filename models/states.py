"""The words of a job's life: its states, failure reasons and priorities. Imports nothing from gpudeck.

The engine, the API and the clients (CLI, TUI) all speak these words, so they live here, in the bottom package
that every side may import (a client command loads nothing of the server)."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """queued -> starting -> running -> succeeded | failed | canceled."""

    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def ended(self) -> bool:
        """True for the three final states."""
        return self in (Status.SUCCEEDED, Status.FAILED, Status.CANCELED)


class Reason(str, Enum):
    """Why a job failed or was canceled (or, stopped_early, why a succeeded trial of a search ended early)."""

    EXIT_NONZERO = "exit_nonzero"
    OOM = "oom"
    TIMEOUT = "timeout"
    CANCELED = "canceled"
    WORKER_LOST = "worker_lost"
    BAD_INPUT = "bad_input"
    DIVERGED = "diverged"
    DISK_FULL = "disk_full"
    PREEMPTED = "preempted"
    DEPENDENCY_FAILED = "dependency_failed"
    ENVIRONMENT = "environment"
    """The project's Python environment could not be built (uv's error lines in log_tail)."""
    STOPPED_EARLY = "stopped_early"
    """A trial its search stopped (succeeded: not a failure; its checkpoint is kept)."""
    IDLE = "idle"
    """A session released for want of use: nobody attached and its GPUs idle for its `idle` time (canceled)."""
    GPU_ERROR = "gpu_error"
    """Its GPU reported an error (an XID): the hardware's (the GPU is cordoned, the job retried elsewhere) or the
    job's own code's."""
    GPU_MEMORY_EXCEEDED = "gpu_memory_exceeded"
    """A job with a share of a GPU used more of its memory than its `gpu_memory` for longer than the grace."""


ACTIVE = (Status.STARTING.value, Status.RUNNING.value)
"""A worker holds the job: what the reaper watches and what a job end moves from."""
ENDED = (Status.SUCCEEDED.value, Status.FAILED.value, Status.CANCELED.value)
"""The final states, as stored strings."""
UNENDED = (Status.QUEUED.value, *ACTIVE)
"""Not ended yet: waiting or held by a worker (what cancel may stop)."""


class TaskStatus(str, Enum):
    """One task of a multi-worker job: placed -> running -> succeeded | failed | stopped (a task that stood down
    or was stopped with its job)."""

    PLACED = "placed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def ended(self) -> bool:
        return self in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.STOPPED)


TASK_ENDED = tuple(s.value for s in TaskStatus if s.ended)
"""Final states of one task, as stored strings."""

PRIORITIES = ("high", "normal", "low")
"""A job's priorities, first served first."""
