"""One attempt of a gpudeck job inside its Slurm allocation (GPUDECK_BACKEND=slurm; `python -m jobs.run.slurmrun ID`,
the batch script jobs.onslurm submits): the same attempt as on a worker (jobs.run.runner: the sandbox, the source
copy, the project environment, the log and metric pump, checkpoints), with Slurm's hooks: the job is claimed by its
Slurm job's id (SLURM_JOB_ID, which the record's `slurm.id` names), its GPUs are the ones Slurm gave it, and Slurm's
SIGTERM (`--signal=B:TERM@grace`: a time limit or a preemption coming) stops it as gpudeck's own stops do, with the
grace to checkpoint: at its timeout it is `timeout`, before it `preempted` (queued again; Slurm requeues its job,
and the next attempt resumes from the checkpoint)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from jobs import gang, slurm, taskrecord
from jobs.errors import NotFound
from jobs.record import Kept
from jobs.run import launch
from jobs.run.hooks import Hooks, Run
from jobs.run.launch import WorkerContext
from jobs.run.runner import JobRun
from jobs.run.taskrun import TaskHooks
from jobs.settings import Settings
from models import tfconfig
from models.states import Reason, Status

log = logging.getLogger(__name__)

TIMEOUT_SLACK_S = 10.0
"""A SIGTERM from Slurm this close to (or past) the job's timeout, counted from the allocation's start, is the time
limit's; earlier, a preemption's."""


def gpus_of(env: Mapping[str, str]) -> list[str]:
    """The GPUs Slurm gave this job: CUDA_VISIBLE_DEVICES where Slurm set it (GRES over real devices), else the
    indices of SLURM_JOB_GPUS (GRES counted without devices: nothing to pin), else as many as SLURM_GPUS_ON_NODE
    counts (issue 67 #8: a node whose GRES are counted only, which says how many and not which)."""
    for name in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS"):
        raw = env.get(name, "").strip()
        if raw:
            return [g.strip() for g in raw.split(",") if g.strip()]
    count = env.get("SLURM_GPUS_ON_NODE", "").strip()
    return [str(i) for i in range(int(count))] if count.isdigit() else []


class Termed:
    """Slurm's SIGTERM to this attempt (`--signal=B:TERM@grace`; srun passes it on to a job's tasks), as a stop:
    at the job's timeout (counted from the allocation's start) `timeout`, earlier `preempted`. Recorded as a stop
    in Redis once seen, so that the job's end (and a multi-worker job's, by gang.finish) reads it as gpudeck's own."""

    def __init__(self, began: float):
        self.began = began
        """When the allocation's batch script began (time.time()): what a SIGTERM's time is measured from."""
        self.termed: float | None = None
        """When Slurm's SIGTERM came (time.time()), None before."""

    def slurm_stop(self, run: Run) -> str | None:
        if self.termed is None:
            return None
        timeout = run.spec.timeout
        why = Reason.TIMEOUT.value if timeout and self.termed - self.began >= timeout - TIMEOUT_SLACK_S else None
        why = why or Reason.PREEMPTED.value
        run.store.request_stop(run.job_id, why, only_first=True)
        return why

    def by_slurm(self, run: Run) -> None:
        """A job Slurm preempted says so (`preempted by Slurm at step S`). Slurm's TERM reaches the trainer too
        (PreemptMode=REQUEUE signals every process of the job): a trainer that checkpointed and left before the pump
        next asked for a stop left Slurm's unrecorded, so it is recorded here first."""
        self.slurm_stop(run)
        if self.termed is not None and run.store.stop_reason(run.job_id) == Reason.PREEMPTED.value:
            step = (run.store.get(run.job_id).get("progress") or {}).get("step")
            run.store.update(run.job_id, preempted_by={"who": "Slurm", "step": step})


def claimed_fields(job: dict[str, Any], name: str, gpus: list[str], **more: Any) -> dict[str, Any]:
    """What a claim in a Slurm allocation writes of a queued job: starting, here, now."""
    now = time.time()
    slurm = {**job["slurm"], "state": "RUNNING", "reason": None, "expected_start": None, "claimed": now}
    return {
        "status": Status.STARTING.value,
        "placed_at": now,
        "started_at": now,
        "claimed_at": now,
        "worker": name,
        "gpu_ids": gpus,
        "first_started_at": job.get("first_started_at") or now,
        "slurm": slurm,
        "reason": None,
        "message": None,
        "pid": None,
        **more,
    }


class SlurmHooks(Termed, Hooks):
    """A single job's attempt in its Slurm allocation."""

    def __init__(self, slurm_id: str, began: float):
        super().__init__(began)
        self.slurm_id = slurm_id

    def claim(self, run: Run) -> bool:
        """Take the job when its record still names this Slurm job and waits for it (queued): starting, here."""
        job = run.store.get(run.job_id)
        if (job.raw.get("slurm") or {}).get("id") != self.slurm_id:
            return False
        run.store.beat(run.job_id, run.ctx.name)
        fields = claimed_fields(job.raw, run.ctx.name, run.ctx.gpu_ids)
        return run.store.transition(run.job_id, (Status.QUEUED.value,), **fields)

    def stop_reason(self, run: Run) -> str | None:
        return super().stop_reason(run) or self.slurm_stop(run)

    def finish(self, run: Run, returncode: int | None, oom_before: int | None) -> str:
        self.by_slurm(run)
        return super().finish(run, returncode, oom_before)

    def rq_id(self, run: Run) -> str:
        return f"slurm-{self.slurm_id}-{run.job_id}-{run.attempt}"


CLAIM_WAIT_S = 60.0
"""How long a task of a multi-worker job waits for task 0 to claim the job for this Slurm job."""


class SlurmTaskHooks(Termed, TaskHooks):
    """Task SLURM_PROCID of a multi-worker job, one of the tasks `srun` starts in the job's allocation: task 0 claims
    the job (a new placement, every task's record), the others join it; the tasks meet where Slurm's node list and
    tasks per node put them (jobs.slurm.rendezvous: MASTER_ADDR is the first node, the ranks Slurm's); each task's
    end goes to gang.finish as on gpudeck's workers."""

    def __init__(self, index: int, slurm_id: str, began: float, hosts: list[str]):
        Termed.__init__(self, began)
        TaskHooks.__init__(self, index, gen=0)
        self.slurm_id = slurm_id
        self.hosts = hosts

    def claim(self, run: Run) -> bool:
        meet = slurm.rendezvous(os.environ, self.hosts)
        if self.index == 0:
            job = run.store.get(run.job_id)
            if (job.get("slurm") or {}).get("id") != self.slurm_id:
                return False
            self.gen = int(job.get("gen", 0)) + 1
            name = run.ctx.name
            pipe = run.redis.pipeline()
            for k, address in enumerate(meet.addresses):
                host = address.rpartition(":")[0]
                gpus = run.ctx.gpu_ids if k == 0 else []  # (each task's own, from its Slurm environment)
                taskrecord.place(pipe, run.job_id, k, self.gen, f"{name}.{k}", host, gpus)
            pipe.execute()
            fields = claimed_fields(job, name, run.ctx.gpu_ids, gen=self.gen, slots=None)
            if not run.store.transition(run.job_id, (Status.QUEUED.value,), **fields):
                return False
        else:
            deadline = time.monotonic() + CLAIM_WAIT_S
            while True:
                job = run.store.get(run.job_id)
                slurm_of = job.get("slurm") or {}
                if slurm_of.get("id") != self.slurm_id or job["status"] not in ("queued", "starting", "running"):
                    return False
                if slurm_of.get("claimed") and job["status"] != "queued":
                    self.gen = int(job["gen"])
                    break
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.2)
        return super().claim(run)

    def prepare(self, run: Run, spec: Kept) -> dict[str, str] | None:
        meet = slurm.rendezvous(os.environ, self.hosts)
        addresses = meet.addresses
        taskrecord.update(
            run.redis, run.job_id, self.index, address=addresses[self.index], master_port=meet.master_port
        )
        chief = addresses[0] if spec.chief else None
        cluster = tfconfig.cluster(list(addresses[1:] if chief else addresses), chief=chief)
        kind, i = gang.task_name(spec, self.index)
        config = tfconfig.tf_config(cluster, kind, i)
        run.preamble = [
            f"gpudeck: task {kind}:{i} of {spec.workers} in Slurm job {self.slurm_id} at {addresses[self.index]} "
            f"(SLURM_PROCID {self.index}); cluster {cluster}"
        ]
        torch = launch.torch_env(meet.master_addr, meet.master_port, spec.workers, self.index)
        return {"TF_CONFIG": json.dumps(config), "GPUDECK_TASK_TYPE": kind, "GPUDECK_TASK_INDEX": str(i), **torch}

    def stop_reason(self, run: Run) -> str | None:
        return super().stop_reason(run) or self.slurm_stop(run)

    def finish(self, run: Run, returncode: int | None, oom_before: int | None) -> str:
        if self.index == 0:
            self.by_slurm(run)
        return super().finish(run, returncode, oom_before)


def hostnames(nodelist: str) -> list[str]:
    """Slurm's node list expanded (`n[1-3]` → n1 n2 n3) by Slurm's own reader, `scontrol show hostnames`."""
    done = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.split()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gpudeck-slurm %(levelname)s %(message)s")
    if len(args) != 1 or not args[0].isdigit() or "SLURM_JOB_ID" not in os.environ:
        print("usage: python -m jobs.run.slurmrun JOB_ID, as the batch script of a Slurm job", file=sys.stderr)
        return 2
    job_id, slurm_id = int(args[0]), os.environ["SLURM_JOB_ID"]
    began = time.time()
    hooks: SlurmHooks | SlurmTaskHooks
    if int(os.environ.get("SLURM_NTASKS") or 1) > 1:  # (one of a multi-worker job's tasks, started by srun)
        hosts = hostnames(os.environ["SLURM_JOB_NODELIST"])
        hooks = SlurmTaskHooks(int(os.environ["SLURM_PROCID"]), slurm_id, began, hosts)
    else:
        hooks = SlurmHooks(slurm_id, began)

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
