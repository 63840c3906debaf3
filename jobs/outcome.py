"""How a job ends: the one table from what happened (a stop somebody asked for, the trainer's exit, the
tasks of a multi-worker job) to status, reason, message, and whether the job is retried.

Pure functions, no Redis: jobs.lifecycle applies what they decide. Every path that ends a job (the
work-horse, a task, the reaper, a dead work-horse, cancel) asks here, so a new Reason is one line.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from models.protocol import EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_OK
from models.states import Reason, Status


@dataclass(frozen=True)
class End:
    """A decided end. `retry`: infrastructure, not the job: queued again while `max_retries` lasts."""

    status: Status
    reason: Reason | None = None
    message: str | None = None
    retry: bool = False
    requeue: bool = False
    """Preempted: back in line at once, not a retry (max_retries is not used)."""
    charged: bool = True
    """Whether the attempt's GPU time counts against its owner's fair share (not when another job's fault ended it)."""

    def fields(self) -> dict[str, Any]:
        """The record fields this end sets (None removes a field)."""
        return {
            "status": self.status.value,
            "reason": self.reason.value if self.reason else None,
            "message": self.message,
        }


SUCCEEDED = End(Status.SUCCEEDED)
CANCELED_QUEUED = End(Status.CANCELED, Reason.CANCELED, "canceled while queued")

STOPPED: dict[str, End] = {
    Reason.CANCELED.value: End(Status.CANCELED, Reason.CANCELED, "canceled on request"),
    Reason.TIMEOUT.value: End(Status.FAILED, Reason.TIMEOUT, "the job ran past its timeout"),
    Reason.WORKER_LOST.value: End(Status.FAILED, Reason.WORKER_LOST, "its worker shut down while it ran", retry=True),
    Reason.PREEMPTED.value: End(Status.QUEUED, Reason.PREEMPTED, "preempted", requeue=True),
    Reason.STOPPED_EARLY.value: End(Status.SUCCEEDED, Reason.STOPPED_EARLY, "stopped early by its search"),
    Reason.GPU_MEMORY_EXCEEDED.value: End(
        Status.FAILED,
        Reason.GPU_MEMORY_EXCEEDED,
        "it used more GPU memory than its gpu_memory for longer than GPUDECK_GPU_MEMORY_GRACE",
    ),
    Reason.GPU_ERROR.value: End(
        Status.FAILED,
        Reason.GPU_ERROR,
        "its GPU failed (a hardware XID): the GPU is cordoned, the job retried elsewhere from its checkpoint",
        retry=True,
        charged=False,
    ),
    "gpu_app_error": End(Status.FAILED, Reason.GPU_ERROR, "its GPU reported an error of the job's own code (an XID)"),
    Reason.IDLE.value: End(
        Status.CANCELED, Reason.IDLE, "released when idle: nobody attached and its GPUs under 5% for its idle time"
    ),
}
"""A stop somebody asked for (the job's stop key) -> how the job ends, whatever the trainer's exit status."""

TASK_FAILED = "task_failed"
"""Stop reason set when a task of a multi-worker job failed by itself: the others stop, the first failure counts."""

DISK_FULL_MARKERS = ("No space left on device", "[Errno 28]", "Disk quota exceeded", "[Errno 122]")
"""Log text by which a process that failed to write to a full disk (or over its quota) is recognised; looked for
before OOM_MARKERS (TensorFlow reports a failed file write as a ResourceExhaustedError)."""
OOM_MARKERS = ("MemoryError", "ResourceExhaustedError", "OOM when allocating", "out of memory")
"""Log text by which a training process that ran out of memory is recognised."""


MPS_FAULT_MARKERS = (
    "CUDA_ERROR_MPS_CLIENT_TERMINATED",
    "cudaErrorMpsClientTerminated",
    "MPS client has been terminated by the server",
    "CUDA_ERROR_MPS_SERVER_NOT_READY",
    "cudaErrorMpsServerNotReady",
)
"""What CUDA says to the MPS clients of a GPU whose server a fault of one of them brought down: the others did
nothing wrong."""
MPS_FAULT = End(
    Status.FAILED,
    Reason.WORKER_LOST,
    "its GPU's MPS server ended it after a fault of another job sharing the GPU (not its own)",
    retry=True,
    charged=False,
)


def mps_fault(returncode: int | None, log_tail: Iterable[str]) -> bool:
    """Whether a process that failed was ended by its GPU's MPS server for another client's fault."""
    return returncode not in (EXIT_OK, None) and any(m in line for line in log_tail for m in MPS_FAULT_MARKERS)


def lost(message: str) -> End:
    """The worker (or work-horse) running the job went away: `message` says how."""
    return End(Status.FAILED, Reason.WORKER_LOST, message, retry=True)


def out_of_memory(returncode: int | None, log_tail: Iterable[str], oom_killed: bool) -> bool:
    """Whether a process that ended with `returncode` ran out of memory (the kernel's OOM killer took it, or its
    last lines say so)."""
    if returncode == -signal.SIGKILL and oom_killed:
        return True
    return returncode not in (EXIT_OK, None) and any(m in line for line in log_tail for m in OOM_MARKERS)


def disk_full(returncode: int | None, log_tail: Iterable[str]) -> bool:
    """Whether a process that ended with `returncode` failed because the disk was full (its last lines say so)."""
    return returncode not in (EXIT_OK, None) and any(m in line for line in log_tail for m in DISK_FULL_MARKERS)


DISK_FULL = End(
    Status.FAILED,
    Reason.DISK_FULL,
    "the disk under the job dir is full: free space (gpudeck rm, GPUDECK_RETENTION) and retry it; a model job "
    "resumes from its last complete checkpoint",
)


def refused(message: str) -> End:
    """A command job could not start on its worker (an environment or a source not there)."""
    return End(Status.FAILED, Reason.BAD_INPUT, message)


def of_exit(
    returncode: int | None, oom: bool, who: str = "the trainer", diverged: dict | None = None, full: bool = False
) -> End:
    """Why a process nobody asked to stop ended without a result (the trainer's exit 2 is its refusal of the
    spec, 3 a loss that became NaN or infinite, described by its `diverged` event; a command's exit status means
    only what its script means by it)."""
    if returncode == EXIT_BAD_INPUT and who == "the trainer":
        return End(Status.FAILED, Reason.BAD_INPUT, f"{who} refused the spec or its data")
    if returncode == EXIT_DIVERGED and who == "the trainer":
        return End(Status.FAILED, Reason.DIVERGED, _diverged(diverged or {}))
    if full:  # (before oom: a failed write can read like one)
        return DISK_FULL
    if oom:
        return End(Status.FAILED, Reason.OOM, "the training process ran out of memory")
    if returncode is not None and returncode < 0:
        return End(Status.FAILED, Reason.EXIT_NONZERO, f"{who} was killed by {signal.Signals(-returncode).name}")
    if returncode == EXIT_OK:
        return End(Status.FAILED, Reason.EXIT_NONZERO, f"{who} exited without a result")
    return End(Status.FAILED, Reason.EXIT_NONZERO, f"{who} exited with status {returncode}")


@dataclass(frozen=True)
class Facts:
    """What the job-end table weighs of one attempt (or task) that ended: the stop asked for (its reason), the
    exit status (None: it never started), whether it left a result, and what the attempt saw — the kernel's OOM
    killer, the divergence event, a full disk, a refusal to start, its job dir unwritable, its environment's failed
    build, a session's kind."""

    stop: str | None
    returncode: int | None
    has_result: bool = False
    oom: bool = False
    command: bool = False
    diverged: dict | None = None
    full: bool = False
    refusal: str | None = None
    no_space: bool = False
    environment: str | None = None
    session: str | None = None
    mps_fault: bool = False


def of_job(f: Facts) -> End:
    """A single job whose trainer (or command) ended (returncode None: it never started): an attempt that could
    not start (`refusal`: the worker refused it; `no_space`: its job dir could not be written) fails so; else a
    trial its search stopped early ends so; else a result wins (a command's exit 0 is its success, result or not),
    then a requested stop, then the exit status."""
    if f.refusal is not None:
        return refused(f.refusal)
    if f.no_space:
        return DISK_FULL
    if f.stop == Reason.STOPPED_EARLY.value:  # (whatever the stopped script's exit: the search ended it) …
        if f.returncode == EXIT_OK and f.has_result and not f.command:  # … unless the trainer had finished first
            return SUCCEEDED
        return STOPPED[f.stop]
    if f.environment is not None and f.stop not in STOPPED:  # (its environment's build failed: the job never ran)
        return End(Status.FAILED, Reason.ENVIRONMENT, f.environment)
    if f.session and f.stop == Reason.TIMEOUT.value:
        return End(Status.FAILED, Reason.TIMEOUT, "the session reached its max time")
    if f.session and f.stop in STOPPED:  # (a notebook server exits 0 on SIGTERM: the stop says why it ended)
        return STOPPED[f.stop]
    if f.session == "shell" and f.stop is None and f.returncode is not None:  # (a notebook's server: as a command's)
        return End(Status.SUCCEEDED, None, f"the session ended: its shell exited with status {f.returncode}")
    if f.returncode == EXIT_OK and (f.has_result or f.command):
        return SUCCEEDED
    if f.stop in STOPPED:
        return STOPPED[f.stop]
    if f.mps_fault:  # (infrastructure: another client's fault took the GPU's MPS server down)
        return MPS_FAULT
    who = "the command" if f.command else "the trainer"
    return of_exit(f.returncode, f.oom, who=who, diverged=f.diverged, full=f.full)


def _diverged(event: dict) -> str:
    """The message of a diverged job, from the trainer's `diverged` event (a general one when it sent none)."""
    if "step" not in event:
        return "the training loss became NaN or infinite"
    kept = event.get("checkpoint_step")
    return f"the training loss became {event.get('loss', 'nan')} at step {event['step']}; " + (
        f"the checkpoint of step {kept} is kept" if kept is not None else "no checkpoint was saved before it"
    )


def of_task(f: Facts) -> tuple[str, End | None]:
    """One task of a multi-worker job ended: its own status (`succeeded`, `stopped`, `failed`) and, when it
    failed by itself, why (which then ends the whole job through of_tasks). `refusal`, `no_space`: as of_job."""
    if f.refusal is not None:
        return "failed", refused(f.refusal)
    if f.no_space:
        return "failed", DISK_FULL
    if f.environment is not None and not f.stop:
        return "failed", End(Status.FAILED, Reason.ENVIRONMENT, f.environment)
    if f.returncode == EXIT_OK:
        return "succeeded", None
    if f.stop or f.returncode is None:
        return "stopped", None
    who = "the command" if f.command else "the trainer"
    return "failed", of_exit(f.returncode, f.oom, who=who, diverged=f.diverged, full=f.full)


def of_tasks(
    stop: str | None, tasks: list[dict[str, Any]], n: int, has_result: bool
) -> tuple[End, dict[str, Any] | None]:
    """A multi-worker job once its `n` tasks ended (or a stop was asked and none is alive): the end, and the task
    it blames (whose log tail the job keeps). `tasks` are the ended ones, with `label`, `worker`, `status`,
    `reason`, `message`, `exited_at`; the first to fail is blamed, not a peer that failed because its partner died."""
    failed = sorted((t for t in tasks if t.get("status") == "failed"), key=lambda t: t.get("exited_at", 0))
    if stop == Reason.WORKER_LOST.value:
        gone = next((t for t in failed if t.get("reason") == Reason.WORKER_LOST.value), None)
        return lost(f"task {gone['label']} lost worker {gone['worker']}" if gone else "a task's worker stopped"), gone
    if stop in STOPPED:
        return STOPPED[stop], None
    if failed:
        first = failed[0]
        reason = Reason(first.get("reason") or Reason.EXIT_NONZERO.value)
        message = f"task {first['label']} on {first['worker']}: {first.get('message', 'failed')}"
        return End(Status.FAILED, reason, message), first
    if len(tasks) == n and all(t.get("status") == "succeeded" for t in tasks) and has_result:
        return SUCCEEDED, None
    return End(Status.FAILED, Reason.EXIT_NONZERO, "a task stopped without a result"), None
