"""The contract between a work-horse (jobs.run.runner) and the trainer it starts (python -m models.train).

Both sides import this module; it imports nothing (no TensorFlow), so the worker can too. It lives in
`models` because `models` never imports `jobs`; docs/architecture.md describes the protocol.

- The work-horse starts `python -m models.train --spec spec.json --job-dir .` in the job dir, in a new
  process group, with the environment below.
- The trainer writes one JSON object a line to the inherited descriptor EVENTS_FD_ENV names:
  `{"event": "running", step, total_steps, steps_per_epoch, epochs, pid}`, `{"event": "metric", step, …}`,
  `{"event": "result", test_accuracy, …}`, `{"event": "diverged", …}`. Everything it prints is the job's log.
- SIGTERM asks the trainer to checkpoint and stop; it then exits with EXIT_STOPPED. It has
  STOP_GRACE_ENV seconds for that before it ends itself; the work-horse SIGKILLs the group after its own
  grace, which is longer by GRACE_MARGIN_S so the trainer's own deadline always comes first.
"""

from __future__ import annotations

EVENTS_FD_ENV = "GPUDECK_EVENTS_FD"
"""The inherited file descriptor the trainer writes its events to (absent: run standalone, no events)."""
JOB_ID_ENV = "GPUDECK_JOB_ID"
"""The gpudeck job id, for the trainer's log and for finding a job's processes."""
STOP_GRACE_ENV = "GPUDECK_STOP_GRACE"
"""Seconds the trainer has after SIGTERM to checkpoint before it ends itself."""

GPU_MEMORY_ENV = "GPUDECK_GPU_MEMORY"
"""A share's GPU memory in bytes (a job with `gpu_memory`): the zoo trainer caps TensorFlow's GPU at it."""


def share_env(gpu_memory: int | None, fraction: float | None) -> dict[str, str]:
    """What a job with a share of a GPU is told: GPU_MEMORY_ENV, and the frameworks' own knobs where one exists:
    TensorFlow grows its memory as it needs it instead of taking the whole GPU at start (its hard cap is the
    trainer's logical device, or the script's own call), JAX preallocates its part of the GPU and no more
    (XLA_PYTHON_CLIENT_MEM_FRACTION). PyTorch's cap is the script's call (README: "Several jobs on one GPU")."""
    if not gpu_memory:
        return {}
    out = {GPU_MEMORY_ENV: str(int(gpu_memory)), "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    if fraction:
        out["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{fraction:.4f}"
    return out


KEEP_CHECKPOINTS_ENV = "GPUDECK_KEEP_CHECKPOINTS"
"""How many of its newest checkpoints a trainer keeps (`all`: every one); the exported model is the newest."""
DEFAULT_KEEP_CHECKPOINTS = 2


def keep_checkpoints(raw: str | None) -> int | None:
    """KEEP_CHECKPOINTS_ENV's value as tf.train.CheckpointManager's max_to_keep (None keeps all); ValueError
    naming the variable when it is not a whole number of at least 1 or `all`."""
    raw = (raw or "").strip().lower()
    if not raw:
        return DEFAULT_KEEP_CHECKPOINTS
    if raw == "all":
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{KEEP_CHECKPOINTS_ENV} must be a whole number of at least 1 or 'all', got {raw!r}")
    return int(raw)


EXIT_OK = 0
EXIT_BAD_INPUT = 2
"""The trainer refused its spec or its data: the job fails as bad_input and is not retried."""
EXIT_DIVERGED = 3
"""The training loss became NaN or infinite: the trainer stopped without saving the broken weights (its last
checkpoint is from before), after a `diverged` event; the job fails as diverged and is not retried."""
EXIT_STOPPED = 143
"""The trainer stopped on SIGTERM after saving a checkpoint (128 + SIGTERM, as a shell reports it)."""

EVENT_RUNNING, EVENT_METRIC, EVENT_RESULT = "running", "metric", "result"
EVENT_DIVERGED = "diverged"
"""`{"event": "diverged", step, loss, checkpoint_step}`: the first step whose loss was not finite, its loss as
text ("nan", "inf"), and the step of the last checkpoint (None: there is none)."""

EVENT_STOPPED = "stopped"
"""`{"event": "stopped", step, checkpoint_step}`: the trainer stopped on SIGTERM at `step` (a timeout, a cancel, a
preemption), between two metric points: the job's progress says where it stopped, as its log does."""

DEFAULT_GRACE_S = 30.0
"""The work-horse's default time between SIGTERM and SIGKILL (`gpudeck worker --stop-grace`)."""
GRACE_MARGIN_S = 5.0
"""How much sooner than the work-horse's SIGKILL the trainer gives up on its checkpoint by itself (at most)."""


def trainer_grace(horse_grace_s: float) -> int:
    """STOP_GRACE_ENV for a work-horse whose grace is `horse_grace_s`, so its SIGKILL never comes first:
    25 s for the default 30, 4 s for a 5 s grace."""
    return max(1, int(horse_grace_s - min(GRACE_MARGIN_S, horse_grace_s / 5)))
