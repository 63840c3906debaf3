"""Every name gpudeck gives things in Redis: keys, queue names, RQ job ids and task functions.

This module imports nothing from gpudeck but the vocabulary of `models.states`, so every layer can use it (arq's
`constants.py` is the model).
A new key is added here and nowhere else; docs/architecture.md lists the layout.
"""

from __future__ import annotations

from models.states import PRIORITIES  # noqa: F401 (the name jobs/ imports it by)

PREFIX = "gpudeck"

# -- jobs ------------------------------------------------------------------------------------------
COUNTER_KEY = f"{PREFIX}:next_id"
"""INCR gives the next sequential job id."""
INDEX_KEY = f"{PREFIX}:jobs"
"""Sorted set of every job id (score = id): the newest-first listing."""
ACTIVE_KEY = f"{PREFIX}:jobs:active"
"""Ids of jobs a worker has taken (starting or running): what the reaper watches."""
ENDED_KEY = f"{PREFIX}:jobs:ended"
"""Sorted set: each job that ended -> when (Unix time), kept when the job is deleted: the accounts' index."""
ACCOUNTS_KEY = f"{PREFIX}:accounts"
"""Hash: a deleted job's id -> what the accounts need of it (JSON: owner, end state, GPU-seconds, times)."""
ACCOUNTS_INDEXED_KEY = f"{PREFIX}:accounts:indexed"
"""Set once the jobs that ended before ENDED_KEY existed were put in it."""


def job_keys(job_id: int, workers: int = 1, gens: int = 0) -> list[str]:
    """Every key of one job: its record, streams, heartbeat, stop and usage; its `workers` tasks' records and
    heartbeats; the rendezvous of its placements 1..`gens`. What deleting a job removes."""
    keys = [job_key(job_id), log_key(job_id), live_key(job_id), metrics_key(job_id), heartbeat_key(job_id)]
    keys += [stop_key(job_id), dependants_key(job_id)]
    keys += [usage_key(job_id), notifications_key(job_id), *(task_key(job_id, k) for k in range(workers))]
    keys += [task_beat_key(job_id, k) for k in range(workers)]
    return keys + [k for g in range(1, gens + 1) for k in (arrived_key(job_id, g), go_key(job_id, g))]


def job_key(job_id: int) -> str:
    """The hash of one job record."""
    return f"{PREFIX}:job:{job_id}"


def dependants_key(job_id: int) -> str:
    """Set of the queued jobs that wait for this one (their `after` names it): looked at when it ends."""
    return f"{PREFIX}:job:{job_id}:dependants"


def log_key(job_id: int) -> str:
    """The stream of one job's log lines; entry ids are 0-<line number>."""
    return f"{job_key(job_id)}:log"


def live_key(job_id: int) -> str:
    """The line a job is drawing now (a progress bar before its newline), as a terminal shows it; a TTL."""
    return f"{job_key(job_id)}:log:live"


def metrics_key(job_id: int) -> str:
    """The stream of one job's metric points; entry ids are 0-<point number>."""
    return f"{job_key(job_id)}:metrics"


def heartbeat_key(job_id: int) -> str:
    """Present while the work-horse running the job is alive."""
    return f"{job_key(job_id)}:heartbeat"


ADMIN_NOTIFICATIONS_KEY = f"{PREFIX}:notifications:admin"
"""List of JSON: each delivery attempt of the box's own notifications (GPUDECK_ADMIN_NOTIFY: a GPU cordoned)."""


def notifications_key(job_id: int) -> str:
    """List of JSON: each delivery attempt of the job's notifications (endpoint, event, when, the answer)."""
    return f"{job_key(job_id)}:notifications"


def usage_key(job_id: int) -> str:
    """Hash host -> JSON of what a running job's processes on that host use (CPU, RSS, GPU), with a TTL."""
    return f"{job_key(job_id)}:usage"


def stop_key(job_id: int) -> str:
    """Why a running job is being stopped (canceled, timeout, worker_lost, task_failed), once someone asked."""
    return f"{job_key(job_id)}:stop"


def stop_channel(job_id: int) -> str:
    """The Pub/Sub channel a stop request is published on when Redis cannot record it (its disk is full: writes are
    refused, PUBLISH is not); the job's work-horses listen while it runs."""
    return f"{stop_key(job_id)}:now"


def task_key(job_id: int, index: int) -> str:
    """Hash of one task of a multi-worker job's current placement: worker, host, gpus, gen, address, pid, …"""
    return f"{job_key(job_id)}:task:{index}"


def task_beat_key(job_id: int, index: int) -> str:
    """Present while the work-horse running the task is alive."""
    return f"{task_key(job_id, index)}:heartbeat"


def arrived_key(job_id: int, gen: int) -> str:
    """Counter of the tasks of placement `gen` that reached the rendezvous."""
    return f"{job_key(job_id)}:g{gen}:arrived"


def go_key(job_id: int, gen: int) -> str:
    """List the last task to arrive fills with one token per task; every task BLPOPs one."""
    return f"{job_key(job_id)}:g{gen}:go"


def idempotency_key(digest: str) -> str:
    """The job an Idempotency-Key (by its sha256) created, and the body it came with."""
    return f"{PREFIX}:idempotency:{digest}"


# -- the line, placement, workers and locks ------------------------------------------------------
LINES_KEY = f"{PREFIX}:lines"
"""Set of the non-empty lines, each `PRIORITY:OWNER` (`-` for jobs without an owner)."""
BEGINS_KEY = f"{PREFIX}:begins"
"""Sorted set of queued jobs waiting for their `begin`: job id -> when (Unix time); a round moves each due one into
its line (jobs.queues.release_begun)."""
AFTER_KEY = f"{PREFIX}:after"
"""Set of queued jobs waiting for their dependencies (`after`) before they join their line."""
IDLE_GPU_KEY = f"{PREFIX}:idle-gpu-seconds"
"""Hash: owner (`-`: none) -> GPU-seconds their jobs held GPUs under 5 % utilization (jobs.usage.account)."""
AFTER_CHECK_KEY = f"{PREFIX}:after:check"
"""Set of the jobs of AFTER_KEY to look at in the next round: new ones, and the dependants of a job that ended."""
AFTER_SWEPT_KEY = f"{PREFIX}:after:swept"
"""Held (with a TTL) while a sweep of every waiting job is not due again: the net under the index."""
QUEUED_AT_KEY = f"{PREFIX}:queued-at"
REBAND_KEY = f"{PREFIX}:las:reband"
"""Jobs put back in line after running (preempted, retried): the next round places each in its band of attained
service (jobs.las.settle; under GPUDECK_POLICY=fifo, where it was)."""
"""Hash: job id -> when it entered its line (the age that fair share's age factor reads)."""
SCHEDULE_LOCK_KEY = f"{PREFIX}:schedule:lock"
"""Held by the one process that runs a scheduling round."""
PLACE_DUE_KEY = f"{PREFIX}:schedule:due"
"""Held for most of a second by the worker whose placer does this second's periodic round: one round a second for
the box, not one a worker (a box of 8 GPUs at 4 slots each ran 32 rounds a second at rest, issue 64)."""
SHARE_KEY = f"{PREFIX}:share"
"""Hash owner -> JSON {usage, at}: the owner's decayed GPU-seconds as of `at` (fair share)."""
NO_OWNER = "-"
"""The owner part of a line's name for jobs without an owner (no named tokens)."""


def line_key(priority: str, owner: str | None) -> str:
    """Sorted set of one owner's queued jobs of one priority: score = the job's place (its id, or where it was
    moved)."""
    return f"{PREFIX}:line:{priority}:{owner or NO_OWNER}"


def line_name(priority: str, owner: str | None) -> str:
    """A line's member of LINES_KEY."""
    return f"{priority}:{owner or NO_OWNER}"


def parse_line_name(name: str) -> tuple[str, str | None]:
    """(priority, owner or None) of a LINES_KEY member."""
    priority, _, owner = name.partition(":")
    return priority, (None if owner == NO_OWNER else owner)


REAPER_LOCK_KEY = f"{PREFIX}:reaper:lock"
RETENTION_LOCK_KEY = f"{PREFIX}:retention:lock"


def worker_info_key(name: str) -> str:
    """gpudeck's own facts about a worker (host, GPUs), beside RQ's registration."""
    return f"{PREFIX}:worker:{name}"


def drain_key(name: str) -> str:
    """Set while a worker is draining: it finishes its job, takes no new one, and exits."""
    return f"{PREFIX}:worker:{name}:drain"


def waiting_key(name: str) -> str:
    """Why a free worker takes no job now (a foreign process on its GPU), with a short TTL."""
    return f"{PREFIX}:worker:{name}:waiting"


def paused_key(name: str) -> str:
    """Set (with a short TTL, refreshed) while a worker takes no new job: its disk or Redis's is full."""
    return f"{PREFIX}:worker:{name}:paused"


def alive_key(name: str) -> str:
    """Refreshed every second by a worker's placer: the worker may be handed a task."""
    return f"{PREFIX}:worker:{name}:alive"


def gpus_key(host: str) -> str:
    """The newest nvidia-smi sample of one host (with a TTL)."""
    return f"{PREFIX}:gpus:{host}"


def warm_wanted_key(host: str, gpus: tuple[str, ...] | list[str]) -> str:
    """When a zoo job last ran on these GPUs of `host` (any of their job slots): the first of their workers keeps a
    warm trainer ready while it is younger than GPUDECK_WARM_MAX_AGE (one a GPU, not one a slot: issue 64)."""
    return f"{PREFIX}:warm:{host}:{','.join(gpus) or 'cpu'}"


WARM_READY_KEY = f"{PREFIX}:warm-trainers"
"""A hash, worker name -> JSON {pid, rss_bytes, since, at}: the warm trainer each worker keeps, as it said last
(jobs.run.warm.Report, every 5 s; a report older than 30 s is a gone worker's)."""


def slots_wanted_key(host: str) -> str:
    """A JSON {GPU index: job slots more} the last scheduling round wanted on `host`: shares that fit a GPU's memory
    but found every worker of it busy; `gpudeck up` there starts as many extra workers, up to
    GPUDECK_MAX_JOBS_PER_GPU (a short TTL: wanted while the round says so)."""
    return f"{PREFIX}:slots:wanted:{host}"


def gpus_booked_key(host: str) -> str:
    """When one host's GPU time was last booked on its jobs (epoch s), by whichever of its samplers booked it: each
    second of a GPU is booked once (jobs.usage.booked_seconds)."""
    return f"{PREFIX}:gpubook:{host}"


def gpus_lock_key(host: str) -> str:
    """Held for a moment by the one process of a host that samples nvidia-smi this round."""
    return f"{gpus_key(host)}:lock"


CORDONS_KEY = f"{PREFIX}:cordons"
"""Hash: `host:gpu` -> JSON (xid, at, text): the GPUs taken out of service by a hardware error, until an admin
uncordons them. One key, read in one command by every scheduling round (a key a GPU, found by SCAN, cost a round
a pass over the whole keyspace: 0.17 s with 10,000 jobs queued, issue 64)."""
LEGACY_CORDON_PATTERN = f"{PREFIX}:cordon:*"
"""Where gpudeck before issue 64 kept each cordon (a string a GPU): adopted into CORDONS_KEY at start-up."""


def ecc_seen_key(host: str) -> str:
    """The uncorrectable ECC error counts of a host's GPUs as last read (hash: GPU index -> count)."""
    return f"{PREFIX}:ecc-seen:{host}"


def xid_seen_key(host: str) -> str:
    """How far a host's kernel log was read for XIDs (its timestamp, seconds since boot)."""
    return f"{PREFIX}:xid-seen:{host}"


GPU_ERRORS_KEY = f"{PREFIX}:gpu-errors"
"""Hash: host|gpu|xid -> how many times the kernel log reported it."""

GPU_HOSTS_KEY = f"{PREFIX}:gpu-hosts"
"""Set: the hosts whose GPUs were ever sampled (each sample, `gpus_key(host)`, lives a few seconds: a host whose
sample is gone is not read). Read in place of a SCAN of the keyspace, which cost O(jobs) (issue 64)."""

# -- datasets -------------------------------------------------------------------------------------
DATASETS_KEY = f"{PREFIX}:datasets"
"""Sorted set of dataset names (score: first upload time)."""


def dataset_key(name: str) -> str:
    """Hash version -> metadata JSON of one dataset."""
    return f"{PREFIX}:dataset:{name}"


def dataset_order_key(name: str) -> str:
    """Sorted set of a dataset's versions by upload time (the newest is what a bare name means)."""
    return f"{PREFIX}:dataset:{name}:order"


def dataset_upload_key(name: str, version: str) -> str:
    """Claimed while one upload of name:version is being extracted."""
    return f"{PREFIX}:dataset-upload:{name}:{version}"


# -- sources of command jobs ---------------------------------------------------------------------
def source_key(sha256: str) -> str:
    """JSON metadata of one stored source snapshot (files, size, git commit, when stored)."""
    return f"{PREFIX}:source:{sha256}"


# -- sweeps, TensorBoard------------------------------------------------------------------------------------
SWEEP_COUNTER_KEY = f"{PREFIX}:next_sweep_id"


def sweep_key(sweep_id: int) -> str:
    """JSON record of one sweep: its base, grid (or search space and rules) and job ids."""
    return f"{PREFIX}:sweep:{sweep_id}"


def sweep_trials_key(sweep_id: int) -> str:
    """Hash trial number -> JSON of a search's trial: its job, values, the metric reported, how it ended."""
    return f"{sweep_key(sweep_id)}:trials"


def sweep_stop_key(sweep_id: int) -> str:
    """Present once a sweep launches no more trials: why (stopped on request, its time budget ran out)."""
    return f"{sweep_key(sweep_id)}:stop"


def optuna_prefix(sweep_id: int) -> str:
    """The prefix of the keys of a search's Optuna journal (its study: trials, reports, rungs)."""
    return f"{sweep_key(sweep_id)}:optuna:"


NOTIFY_DUE_KEY = f"{PREFIX}:notify:due"
"""Sorted set delivery id -> when it is due (its next attempt): what the notifier sends."""
NOTIFY_DELIVERIES_KEY = f"{PREFIX}:notify:deliveries"
"""Hash delivery id -> JSON of a notification not yet delivered (endpoint, job, event, body, attempts)."""
NOTIFIER_LOCK_KEY = f"{PREFIX}:notifier:lock"
"""Held by the one process sending notifications this round."""
SEARCHING_KEY = f"{PREFIX}:sweeps:searching"
"""Set of the ids of searches still running: what the searcher drives."""
SEARCHER_LOCK_KEY = f"{PREFIX}:searcher:lock"
"""Held by the one process driving the searches this round."""
SCHEDULES_KEY = f"{PREFIX}:schedules"
"""Hash: a schedule's name -> its record (JSON: cron, zone, rules, its job or sweep, its last firings)."""
SCHEDULES_DUE_KEY = f"{PREFIX}:schedules:due"
"""Sorted set: each schedule not paused -> its next firing (Unix time)."""
TIMETABLE_LOCK_KEY = f"{PREFIX}:schedules:lock"
"""Held by the one process firing the due schedules."""


def schedule_fired_key(name: str, created_at: float, firing: float) -> str:
    """A sweep a schedule's firing made (its id, for a day): made once, whichever process fires it."""
    return f"{PREFIX}:schedules:fired:{name}:{created_at!r}:{firing!r}"


def tensorboard_key(host: str) -> str:
    """Hash of one host's TensorBoards: sorted job ids -> {port, pid, jobs, started_at, last_used}."""
    return f"{PREFIX}:tensorboard:{host}"


def tensorboard_lock_key(host: str) -> str:
    """The lock under which one host starts or reuses a TensorBoard."""
    return f"{tensorboard_key(host)}:lock"


# -- queues and RQ ------------------------------------------------------------------------------------
# (a worker serves its queues in PRIORITIES order, highest first)

RUN_JOB = "jobs.task.run_job"
"""The RQ function of a single job (already-queued RQ jobs name it: keep it importable)."""
RUN_TASK = "jobs.task.run_task"
"""The RQ function of one task of a multi-worker job."""
RUN_HOLD = "jobs.task.hold"
"""The RQ function that keeps a worker (its GPUs) for a job another worker runs: a place of several workers."""


def base_queue(gpus: int) -> str:
    """`cpu` for CPU jobs, `gpus-N` for jobs that need N GPUs on one worker."""
    return "cpu" if gpus == 0 else f"gpus-{gpus}"


def queue_name(gpus: int, priority: str) -> str:
    """The queue a job of this GPU count and priority waits in (`gpus-1`, `gpus-1-high`, ...)."""
    base = base_queue(gpus)
    return base if priority == "normal" else f"{base}-{priority}"


def worker_name(host: str, gpus: list[str], pid: int) -> str:
    """A worker's name where none is given: host.gpuN.pid (host.gpu0+1.pid for several GPUs, host.cpu.pid)."""
    return f"{host}.{'gpu' + '+'.join(gpus) if gpus else 'cpu'}.{pid}"


def private_queue(worker: str) -> str:
    """The queue only worker `worker` serves, first of all its queues: tasks placed on it."""
    return f"tasks@{worker}"


def rq_hold_id(job_id: int, gen: int, index: int) -> str:
    """RQ's id for the `index`-th worker kept for placement `gen` of a job other workers of its places run."""
    return f"{PREFIX}-{job_id}-g{gen}-h{index}"


def rq_job_id(job_id: int, attempt: int) -> str:
    """RQ's id for one attempt of a single job."""
    return f"{PREFIX}-{job_id}" if attempt == 1 else f"{PREFIX}-{job_id}-{attempt}"


def rq_task_id(job_id: int, gen: int, index: int) -> str:
    """RQ's id for task `index` of placement `gen` of a multi-worker job."""
    return f"{PREFIX}-{job_id}-g{gen}-t{index}"


def job_id_of(rq_id: str | None) -> int | None:
    """The gpudeck job id inside an RQ id (`gpudeck-42`, `gpudeck-42-2`, `gpudeck-42-g1-t0`); None for others."""
    if not rq_id or not rq_id.startswith(f"{PREFIX}-"):
        return None
    part = rq_id.split("-")[1]
    return int(part) if part.isdigit() else None


def attempt_of(rq_id: str | None) -> int | None:
    """The attempt of a single job an RQ id runs (`gpudeck-42`: 1, `gpudeck-42-2`: 2); None for a task's, a held
    worker's or another id."""
    parts = (rq_id or "").split("-")
    if len(parts) == 2 and job_id_of(rq_id) is not None:
        return 1
    if len(parts) == 3 and job_id_of(rq_id) is not None and parts[2].isdigit():
        return int(parts[2])
    return None


# -- users ------------------------------------------------------------------------------------------
PROJECTS_KEY = f"{PREFIX}:projects"
"""Hash: a project's name -> its record (JSON: its caps, share, members)."""
PROJECT_DEFAULTS_KEY = f"{PREFIX}:projects:defaults"
"""Hash: a named token -> its default project (a job that names none belongs to it)."""


def project_used_key(project: str, period: str, start: str) -> str:
    """A project's GPU-hours of one period (its first day), as last counted: kept USED_FOR_S (jobs.accounts)."""
    return f"{PREFIX}:projects:used:{project}:{period}:{start}"


def project_live_key(project: str) -> str:
    """Set of the ids of a project's jobs not known to have ended (what its --max-queued counts)."""
    return f"{PREFIX}:projects:live:{project}"


TOKENS_KEY = f"{PREFIX}:tokens"
"""Hash: token name -> JSON (sha256 of the token, role, limits, created, expires, last used); never the token."""
AUDIT_KEY = f"{PREFIX}:audit"
"""Stream of state-changing requests (time, user, address, method, path, status), capped."""


def token_hash_key(sha256: str) -> str:
    """A named token's name, by the sha256 of the token (one GET per request finds who it is)."""
    return f"{PREFIX}:token:{sha256}"


def auth_failures_key(scope: str) -> str:
    """Bad tokens of one scope in the last minute (`address:A`, `prefix:P`, `total`; past a few: 429)."""
    return f"{PREFIX}:authfail:{scope}"


def durations_key(owner: str | None, shape: str) -> str:
    """A list: how long an owner's last succeeded runs of one job shape took (s), newest first (jobs.plan)."""
    return f"{PREFIX}:durations:{owner or NO_OWNER}:{shape}"


EXPORT_DUE_KEY = f"{PREFIX}:export:due"
"""Sorted set: job ids whose export (GPUDECK_MLFLOW_URI) is due, score = when (jobs.export)."""
EXPORTER_LOCK_KEY = f"{PREFIX}:exporter:lock"


# -- on Slurm (jobs.onslurm) ------------------------------------------------------------------
SLURM_JOBS_KEY = f"{PREFIX}:slurm:jobs"
"""The gpudeck jobs that have a Slurm job Slurm may still run (a record's `slurm.id`): what the watcher looks at."""
SLURM_OURS_KEY = f"{PREFIX}:slurm:ours"
"""The Slurm job ids this stack submitted that Slurm still lists: the only ones it ever cancels (another gpudeck
under the same Slurm user names its jobs the same way)."""
SLURM_LOCK_KEY = f"{PREFIX}:slurm:lock"
"""Held by the process submitting to and watching Slurm this round."""
SLURM_WAKE_KEY = f"{PREFIX}:slurm:wake"
"""A submission's nudge to the Slurm agent (a list it waits on between rounds): the job goes to sbatch at once."""
SLURM_AWAY_KEY = f"{PREFIX}:slurm:away"
"""Why Slurm's controller does not answer (set while it does not): an outage, never a failure of every job."""
