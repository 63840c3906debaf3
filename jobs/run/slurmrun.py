"""One attempt of a gpudeck job inside its Slurm allocation (GPUDECK_BACKEND=slurm; `python -m jobs.run.slurmrun ID`,
the batch script jobs.onslurm submits): the same attempt as on a worker (jobs.run.runner: the sandbox, the source
copy, the project environment, the log and metric pump, checkpoints), with Slurm's hooks: the job is claimed by its
Slurm job's id (SLURM_JOB_ID, which the record's `slurm.id` names), its GPUs are the ones Slurm gave it, and Slurm's
SIGTERM (`--signal=B:TERM@grace`: a time limit or a preemption coming) stops it as gpudeck's own stops do, with the
grace to checkpoint: at its timeout it is `timeout`, before it `preempted` (queued again; Slurm requeues its job,
and the next attempt resumes from the checkpoint)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any

from jobs.errors import NotFound
from jobs.run.hooks import Hooks, Run
from jobs.run.launch import WorkerContext
from jobs.run.runner import JobRun
from jobs.settings import Settings
from models.states import Reason, Status

log = logging.getLogger(__name__)

TIMEOUT_SLACK_S = 10.0
"""A SIGTERM from Slurm this close to (or past) the job's timeout, counted from the allocation's start, is the time
limit's; earlier, a preemption's."""


def gpus_of(env: Mapping[str, str]) -> list[str]:
    """The GPUs Slurm gave this job: CUDA_VISIBLE_DEVICES where Slurm set it (GRES over real devices), else the
    indices of SLURM_JOB_GPUS (GRES counted without devices: nothing to pin)."""
    for name in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS"):
        raw = env.get(name, "").strip()
        if raw:
            return [g.strip() for g in raw.split(",") if g.strip()]
    return []


class SlurmHooks(Hooks):
    """A single job's attempt in its Slurm allocation."""

    def __init__(self, slurm_id: str, began: float):
        self.slurm_id = slurm_id
        self.began = began
        """When the allocation's batch script began (time.time()): what a SIGTERM's time is measured from."""
        self.termed: float | None = None
        """When Slurm's SIGTERM came (time.time()), None before."""

    def claim(self, run: Run) -> bool:
        """Take the job when its record still names this Slurm job and waits for it (queued): starting, here."""
        job = run.store.job(run.job_id)
        if (job.raw.get("slurm") or {}).get("id") != self.slurm_id:
            return False
        run.store.beat(run.job_id, run.ctx.name)
        now = time.time()
        slurm = {**job.raw["slurm"], "state": "RUNNING", "reason": None, "expected_start": None, "claimed": now}
        fields: dict[str, Any] = {
            "status": Status.STARTING.value,
            "placed_at": now,
            "started_at": now,
            "claimed_at": now,
            "worker": run.ctx.name,
            "gpu_ids": run.ctx.gpu_ids,
            "first_started_at": job.raw.get("first_started_at") or now,
            "slurm": slurm,
            "reason": None,
            "message": None,
            "pid": None,
        }
        return run.store.transition(run.job_id, (Status.QUEUED.value,), **fields)

    def stop_reason(self, run: Run) -> str | None:
        told = super().stop_reason(run)
        if told or self.termed is None:
            return told
        timeout = run.spec.timeout
        if timeout and self.termed - self.began >= timeout - TIMEOUT_SLACK_S:
            return Reason.TIMEOUT.value
        return Reason.PREEMPTED.value

    def finish(self, run: Run, returncode: int | None, oom_before: int | None) -> str:
        if self.stop_reason(run) == Reason.PREEMPTED.value and not run.store.stop_reason(run.job_id):
            step = (run.store.get(run.job_id).get("progress") or {}).get("step")
            run.store.update(run.job_id, preempted_by={"who": "Slurm", "step": step})
        return super().finish(run, returncode, oom_before)

    def rq_id(self, run: Run) -> str:
        return f"slurm-{self.slurm_id}-{run.job_id}-{run.attempt}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gpudeck-slurm %(levelname)s %(message)s")
    if len(args) != 1 or not args[0].isdigit() or "SLURM_JOB_ID" not in os.environ:
        print("usage: python -m jobs.run.slurmrun JOB_ID, as the batch script of a Slurm job", file=sys.stderr)
        return 2
    job_id, slurm_id = int(args[0]), os.environ["SLURM_JOB_ID"]
    hooks = SlurmHooks(slurm_id, time.time())

    def termed(signum: int, frame: Any) -> None:
        hooks.termed = hooks.termed or time.time()
        log.info("job %s: SIGTERM from Slurm (job %s)", job_id, slurm_id)

    signal.signal(signal.SIGTERM, termed)
    settings = Settings.from_env()
    gpus = gpus_of(os.environ)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)  # (before anything could import TensorFlow)
    name = f"slurm-{slurm_id}@{socket.gethostname()}"
    ctx = WorkerContext(settings=settings, name=name, gpu_ids=gpus, stop_grace_s=max(1, settings.slurm_grace_s - 5))
    redis = settings.redis()
    try:
        status = JobRun(job_id, redis, ctx, None, hooks).run()
    except NotFound:
        log.info("job %s: gone (deleted) before its Slurm job %s ran", job_id, slurm_id)
        return 0
    log.info("job %s: %s (Slurm job %s)", job_id, status, slurm_id)
    # (Slurm's accounting, and its afterok, read the batch script's status: 0 for a job that succeeded or went back
    # in line, else 1)
    return 0 if status in (Status.SUCCEEDED.value, Status.QUEUED.value) else 1


if __name__ == "__main__":
    sys.exit(main())
