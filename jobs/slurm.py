"""Slurm's dialect (issue 45, its first part): a gpudeck job as the options of `sbatch`, and what `squeue` says of a
Slurm job as gpudeck's status, reason and message. Pure functions: the backend that runs Slurm's tools and the
attempt inside an allocation are built on them.

On Slurm, Slurm places, prioritises, shares fairly and preempts; gpudeck asks for what a job needs and reports what
Slurm decided, in its own words. What gpudeck does on one box and Slurm does not (a share of a GPU by its memory)
is refused with the field and the reason, never passed on half-done."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jobs.record import Kept
from models import tfconfig
from models.states import Reason, Status


class NotOnSlurm(ValueError):
    """A job spec asks for what Slurm does not give (the field, and what to do instead)."""

    def __init__(self, field_name: str, why: str) -> None:
        super().__init__(f"{field_name}: {why}")
        self.field = field_name


@dataclass(frozen=True)
class SlurmOptions:
    """What the operator sets for Slurm: the partition and default account jobs go to, gpudeck's priorities as QOS
    names (`{"high": "gpu-high"}`; an unmapped `low` asks for `--nice=low_nice`, an unmapped `high` for nothing: only
    Slurm's operators may raise a job), and how long before a time limit or a preemption a job is told (SIGTERM to
    its batch shell, which is the attempt: it checkpoints)."""

    partition: str | None = None
    account: str | None = None
    qos: Mapping[str, str] = field(default_factory=dict)
    low_nice: int = 1000
    grace_s: int = 60


JOB_NAME_PREFIX = "gpudeck-"
"""A gpudeck job's Slurm job is named `gpudeck-<id>`: what the watcher finds it by (Slurm's own ids can be reused
after a controller restart)."""


def job_name(job_id: int) -> str:
    return f"{JOB_NAME_PREFIX}{job_id}"


def job_id_of(name: str) -> int | None:
    """The gpudeck job a Slurm job name is (None: not one of gpudeck's)."""
    rest = name.removeprefix(JOB_NAME_PREFIX)
    return int(rest) if rest != name and rest.isdigit() else None


def slurm_time(seconds: int) -> str:
    """A duration as `--time` reads it (D-HH:MM:SS), rounded up to the minute, Slurm's granularity of limits."""
    minutes = max(1, math.ceil(seconds / 60))
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def sbatch_options(
    job_id: int,
    spec: Kept,
    opts: SlurmOptions,
    *,
    output: str,
    account: str | None = None,
    after: Sequence[str] = (),
) -> list[str]:
    """`sbatch`'s options for a job: its GPUs (one task: `--gres=gpu:N`; several workers: a task each, with
    `--gpus-per-task`, so Slurm places each task's GPUs on one node), its timeout plus the grace as `--time` (so
    Slurm's SIGTERM comes at the timeout and its kill a grace later), its priority as the
    operator's QOS (or `--nice` for `low`), the owner's Slurm account (`account`, else the default), `after` as
    `--dependency=afterok:` on the Slurm jobs it waits for, and `--requeue` with `--signal=B:TERM@grace`, so that a
    preemption or a time limit reaches the attempt as SIGTERM and a requeued job resumes from its checkpoint. The
    batch output (Slurm's own lines, not the job's log) goes to `output`, appended across requeues."""
    if spec.gpu_memory:
        raise NotOnSlurm(
            "gpu_memory", "a share of a GPU is not asked of Slurm (its shard GRES is the operator's): ask for gpus"
        )
    if spec.is_session:
        raise NotOnSlurm("kind", "sessions do not run on Slurm yet: use `salloc` and `srun --pty` on the cluster")
    out = [
        f"--job-name={job_name(job_id)}",
        "--parsable",
        "--requeue",
        f"--signal=B:TERM@{opts.grace_s}",
        f"--output={output}",
        "--open-mode=append",
    ]
    if opts.partition:
        out.append(f"--partition={opts.partition}")
    if account or opts.account:
        out.append(f"--account={account or opts.account}")
    if spec.workers > 1:
        out.append(f"--ntasks={spec.workers}")
        if spec.gpus:
            out.append(f"--gpus-per-task={spec.gpus}")
    else:
        out.append("--ntasks=1")
        if spec.gpus:
            out.append(f"--gres=gpu:{spec.gpus}")
    if spec.timeout:  # (Slurm's SIGTERM comes `grace` before its limit: at the job's timeout, rounded up)
        out.append(f"--time={slurm_time(spec.timeout + opts.grace_s)}")
    if spec.priority in opts.qos:
        out.append(f"--qos={opts.qos[spec.priority]}")
    elif spec.priority == "low":
        out.append(f"--nice={opts.low_nice}")
    if after:
        out.append("--dependency=afterok:" + ":".join(after))
    return out


@dataclass(frozen=True)
class SlurmJob:
    """One line of `squeue` (SQUEUE_FORMAT): Slurm's id, its name, its state, its reason, its start (expected, for
    a pending job Slurm's backfill has planned; None where Slurm says N/A) and how often Slurm requeued it."""

    slurm_id: str
    name: str
    state: str
    reason: str
    start: str | None
    restarts: int = 0


SQUEUE_FIELDS = ("JobID", "Name", "State", "Reason", "StartTime", "RestartCnt")
SQUEUE_FORMAT = ",".join(f"{name}:\t" for name in SQUEUE_FIELDS)
"""`squeue -h -O` with this: each field unpadded and ended by a tab (a reason can hold spaces and commas)."""


def parse_squeue(text: str) -> list[SlurmJob]:
    """`squeue -h -O SQUEUE_FORMAT`'s lines (blank ones skipped)."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        slurm_id, name, state, reason, start, restarts = [f.strip() for f in (line.split("\t") + [""] * 6)[:6]]
        when = None if start in ("", "N/A", "Unknown") else start
        count = int(restarts) if restarts.isdigit() else 0
        jobs.append(SlurmJob(slurm_id, name, state, reason, when, count))
    return jobs


WAITING = {
    "Priority": "behind jobs Slurm ranks higher",
    "Resources": "waiting for Slurm to free what it asks for",
    "Dependency": "waiting for its dependencies to succeed",
    "BeginTime": "waiting for its begin time",
    "QOSMaxGRESPerUser": "its owner holds as many GPUs as the QOS allows",
    "QOSMaxJobsPerUserLimit": "its owner runs as many jobs as the QOS allows",
    "AssocGrpGRES": "its account holds as many GPUs as it may",
    "AssocMaxJobsLimit": "its account runs as many jobs as it may",
    "ReqNodeNotAvail": "the nodes it needs are not available",
    "PartitionTimeLimit": "its timeout is over the partition's time limit",
    "PartitionNodeLimit": "it asks for more nodes than the partition has",
    "JobHeldUser": "held by its owner (`scontrol release`)",
    "JobHeldAdmin": "held by Slurm's operator",
    "None": "just submitted",
}
"""Slurm's pending reasons, as the job's message says them (`squeue`'s reason is kept beside, in brackets)."""


REQUEUED = "requeued by Slurm (preempted, or its node lost): it resumes from its checkpoint"


@dataclass(frozen=True)
class Seen:
    """A Slurm job as gpudeck says it: a status, a reason where it ended (or was preempted), and a message."""

    status: str
    reason: str | None
    message: str


def seen(job: SlurmJob) -> Seen:
    """What a Slurm state (and, while pending, its reason) is in gpudeck's words."""
    state = job.state.split()[0].rstrip("+") if job.state else ""
    if state == "PENDING":
        if job.reason == "DependencyNeverSatisfied":
            return Seen(Status.FAILED.value, Reason.DEPENDENCY_FAILED.value, "a job it waits for did not succeed")
        if job.restarts:  # (Slurm holds a requeued job back a while: BeginTime)
            return Seen(Status.QUEUED.value, Reason.PREEMPTED.value, REQUEUED)
        why = WAITING.get(job.reason.split(",")[0], "waiting")
        return Seen(Status.QUEUED.value, None, f"in Slurm's queue: {why} ({job.reason})")
    if state in ("CONFIGURING", "RESV_DEL_HOLD"):
        return Seen(Status.STARTING.value, None, "Slurm is starting its allocation")
    if state in ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"):
        return Seen(Status.RUNNING.value, None, "running under Slurm")
    if state == "SUSPENDED":
        return Seen(Status.RUNNING.value, None, "suspended by Slurm")
    if state in ("PREEMPTED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"):
        return Seen(Status.QUEUED.value, Reason.PREEMPTED.value, REQUEUED)
    if state == "COMPLETED":
        return Seen(Status.SUCCEEDED.value, None, "completed under Slurm")
    ended = {
        "CANCELLED": (Status.CANCELED, Reason.CANCELED, "canceled in Slurm"),
        "REVOKED": (Status.CANCELED, Reason.CANCELED, "revoked by Slurm"),
        "TIMEOUT": (Status.FAILED, Reason.TIMEOUT, "the job ran past its Slurm time limit"),
        "DEADLINE": (Status.FAILED, Reason.TIMEOUT, "the job reached its Slurm deadline"),
        "OUT_OF_MEMORY": (Status.FAILED, Reason.OOM, "Slurm stopped the job: out of memory"),
        "NODE_FAIL": (Status.FAILED, Reason.WORKER_LOST, "its Slurm node failed"),
        "BOOT_FAIL": (Status.FAILED, Reason.WORKER_LOST, "its Slurm node failed to boot"),
        "FAILED": (Status.FAILED, Reason.EXIT_NONZERO, "the job's batch script failed under Slurm"),
        "SPECIAL_EXIT": (Status.FAILED, Reason.EXIT_NONZERO, "the job exited with Slurm's special exit code"),
    }
    if state in ended:
        status, reason, message = ended[state]
        return Seen(status.value, reason.value, message)
    return Seen(Status.QUEUED.value, None, f"Slurm says {job.state or 'nothing'}")


def tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE (`2(x3),1`: two tasks on each of three nodes, then one) as a count per node, in the
    order of the node list."""
    counts = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise ValueError(f"SLURM_TASKS_PER_NODE: cannot read {part!r} of {text!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def base_port(slurm_job_id: str) -> int:
    """The port a Slurm job's tasks meet on (MASTER_PORT; task ports follow it): every task works it out from the
    job's id alone, and jobs that share a node differ (20000 + 10 × the id modulo 4000: ports 20000 to 60009)."""
    return 20000 + int(slurm_job_id) % 4000 * 10


@dataclass(frozen=True)
class Rendezvous:
    """Where a multi-worker job's tasks meet in their Slurm allocation: each task's `host:port`, this task's rank,
    and the address PyTorch's env:// rendezvous reads (MASTER_ADDR, MASTER_PORT: the first task's node)."""

    addresses: list[str]
    rank: int
    master_addr: str
    master_port: int

    def tf_config(self) -> str:
        """TF_CONFIG for this task: every task a worker, in rank order (MultiWorkerMirroredStrategy's chief is
        worker 0)."""
        return json.dumps(tfconfig.tf_config(tfconfig.cluster(self.addresses), "worker", self.rank))


def rendezvous(env: Mapping[str, str], hosts: Sequence[str]) -> Rendezvous:
    """This task's Rendezvous from Slurm's environment (a step's variables where `srun` set them, else the job's):
    `hosts` is the node list expanded (`scontrol show hostnames`, Slurm's own reader of `n[1-4]`), the tasks per
    node lay the tasks out on it in Slurm's block order, SLURM_PROCID is this task's rank."""
    per_node = tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE") or env["SLURM_TASKS_PER_NODE"])
    if len(per_node) != len(hosts):
        raise ValueError(f"{len(hosts)} nodes but tasks per node for {len(per_node)}: {per_node}")
    base = base_port(env["SLURM_JOB_ID"])
    on_node: Counter[str] = Counter()
    addresses = []
    for host, count in zip(hosts, per_node):
        for _ in range(count):
            on_node[host] += 1
            addresses.append(f"{host}:{base + on_node[host]}")
    rank = int(env["SLURM_PROCID"])
    if not 0 <= rank < len(addresses):
        raise ValueError(f"SLURM_PROCID {rank} is not one of the {len(addresses)} tasks")
    return Rendezvous(addresses, rank, hosts[0], base)
