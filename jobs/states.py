"""Job states and failure reasons, as DESIGN.md names them."""

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
    """Why a job failed or was canceled."""

    EXIT_NONZERO = "exit_nonzero"
    OOM = "oom"
    TIMEOUT = "timeout"
    CANCELED = "canceled"
    WORKER_LOST = "worker_lost"
    BAD_INPUT = "bad_input"
