"""gpudeck on a lab's Slurm (issue 45; GPUDECK_BACKEND=slurm): Slurm places, prioritises, shares fairly and
preempts; gpudeck submits, watches, records and steers.

The API queues a job as on one box. The Slurm agent (`jobs.slurmagent`, started by `gpudeck up --backend slurm`
in place of workers) runs `Round` each second: the queued jobs of the lines go to `sbatch` (a batch script that
runs the same attempt, `python -m jobs.run.slurmrun ID`, inside the allocation: logs, curves, checkpoints and
searches as on a worker), and every few seconds `squeue` says what Slurm did with them: a pending job's reason and
planned start, an end the attempt could not record (a time limit, a node lost, a cancel from outside), a Slurm job
gpudeck no longer wants (canceled: `scancel`). Slurm's tools are run as they are installed (`SLURM_CONF` and PATH
as the agent has them). A controller that does not answer is an outage (`gpudeck:slurm:away`, polls backing off),
never a failure of the jobs."""

from __future__ import annotations

import getpass
import logging
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from jobs import gang, lifecycle, queues, quota, sweeps, tokens
from jobs.depends import release_dependencies
from jobs.errors import Conflict, NotFound
from jobs.keys import SLURM_AWAY_KEY, SLURM_JOBS_KEY, SLURM_LOCK_KEY, SLURM_OURS_KEY, SLURM_WAKE_KEY
from jobs.outcome import End
from jobs.periodic import Periodic
from jobs.record import Job
from jobs.settings import Settings
from jobs.slurm import (
    SQUEUE_FORMAT,
    NotOnSlurm,
    SlurmJob,
    SlurmOptions,
    job_id_of,
    parse_squeue,
    sbatch_options,
    seen,
)
from jobs.store import JobStore, redis_uptime_s
from jobs.views import sweep_id
from models.states import ACTIVE, ENDED, PRIORITIES, Reason, Status

log = logging.getLogger(__name__)

TOOL_TIMEOUT_S = 30.0
"""How long one of Slurm's commands may take before the controller counts as away."""
AWAY_BACKOFF_S = (1, 2, 5, 10, 30)
"""Waits between polls while the controller does not answer, growing with each failure in a row."""
ALIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
                "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "PREEMPTED")  # fmt: skip
"""Slurm states in which Slurm may still run the job (PREEMPTED: on its way back to PENDING, with --requeue)."""
AWAY_WORDS = ("Unable to contact", "Socket timed out", "Zero Bytes", "backup controller", "Connection refused",
              "Communication connection failure", "not responding")  # fmt: skip
"""What Slurm's tools say when the controller does not answer (rather than refusing what was asked)."""


class SlurmAway(Exception):
    """Slurm's controller does not answer (or its tools are not on this host): an outage."""


class SlurmRefused(Exception):
    """Slurm refused what was asked (an account it does not know, a partition's limit): Slurm's own words."""


def options(settings: Settings) -> SlurmOptions:
    """The operator's Slurm settings as jobs.slurm reads them."""
    return SlurmOptions(
        partition=settings.slurm_partition,
        account=settings.slurm_account,
        qos=dict(settings.slurm_qos),
        grace_s=settings.slurm_grace_s,
    )


def alive(job: SlurmJob) -> bool:
    return (job.state.split()[0].rstrip("+") if job.state else "") in ALIVE_STATES


def when(text: str | None) -> float | None:
    """A time as squeue prints it (the controller's local time, ISO without a zone) as a Unix time."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


@dataclass
class Tools:
    """Slurm's commands, run with a bounded time (the environment the agent has: SLURM_CONF, PATH)."""

    user: str = ""

    def run(self, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(
                argv, input=stdin, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, start_new_session=True
            )
        except FileNotFoundError:
            raise SlurmAway(f"{argv[0]} is not installed here (GPUDECK_BACKEND=slurm needs Slurm's tools)") from None
        except subprocess.TimeoutExpired:
            raise SlurmAway(f"{argv[0]} did not answer in {TOOL_TIMEOUT_S:.0f} s") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().replace("\n", " ")[-400:]
            if any(w.lower() in said.lower() for w in AWAY_WORDS):
                raise SlurmAway(f"{argv[0]}: {said}")
            raise SlurmRefused(said or f"{argv[0]} exited with status {done.returncode}")
        return done

    def sbatch(self, opts: Sequence[str], script: str) -> str:
        """Submit `script` (read from stdin) with `opts`; Slurm's job id."""
        return self.run("sbatch", *opts, stdin=script).stdout.strip().split(";")[0]

    def squeue(self) -> list[SlurmJob]:
        """This user's Slurm jobs, those Slurm still keeps after their end (MinJobAge) included."""
        user = self.user or getpass.getuser()
        return parse_squeue(self.run("squeue", "-h", "--states=all", "-u", user, "-O", SQUEUE_FORMAT).stdout)

    def scancel(self, slurm_ids: Sequence[str]) -> None:
        if slurm_ids:
            self.run("scancel", *slurm_ids)


def script(job_id: int, tasks: int = 1) -> str:
    """The batch script of a gpudeck job: the attempt, in this Python (the compute nodes share the install, as they
    share GPUDECK_HOME); a multi-worker job's tasks each run theirs, started by `srun` on their nodes."""
    run = f"{shlex.quote(sys.executable)} -m jobs.run.slurmrun {job_id}"
    if tasks > 1:
        run = f"srun --kill-on-bad-exit=0 {run}"
    return f"#!/bin/sh\n# gpudeck job {job_id}: its attempt\nexec {run}\n"


def expected_start(rec: Job) -> tuple[float | None, str | None]:
    """A queued job's expected start on Slurm (the API's `expected_start`, and why there is none): the start Slurm's
    backfill planned for it, as the last squeue said."""
    slurm = rec.get("slurm") or {}
    if not slurm.get("id"):
        return None, "not submitted to Slurm yet"
    if slurm.get("expected_start"):
        return float(slurm["expected_start"]), None
    return None, f"Slurm has planned no start for its job {slurm['id']} yet"


def output_path(settings: Settings, job_id: int) -> Path:
    """Where Slurm writes a job's batch output (Slurm's lines and the attempt's own, not the job's log)."""
    return settings.home / "slurm" / f"{job_id}.out"


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def submit(redis: Redis, settings: Settings, tools: Tools, job_id: int) -> str | None:
    """sbatch one queued job; its Slurm id, or None when it was no longer queued (or Slurm refused it: it failed,
    saying why). SlurmAway goes up: the job stays in its line."""
    store = JobStore(redis)
    rec = store.get(job_id)
    if rec["status"] != Status.QUEUED.value:
        queues.withdraw(redis, rec)
        return None
    spec = rec.spec
    out = output_path(settings, job_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        account = tokens.slurm_account(redis, rec.get("owner"))  # (else GPUDECK_SLURM_ACCOUNT, else Slurm's)
        opts = sbatch_options(job_id, spec, options(settings), output=str(out), account=account)
        slurm_id = tools.sbatch(opts, script(job_id, spec.workers))
    except (NotOnSlurm, SlurmRefused) as exc:
        queues.withdraw(redis, rec)
        end = End(Status.FAILED, Reason.BAD_INPUT, f"Slurm refused it: {exc}")
        lifecycle.end(redis, job_id, end, rec, allowed=(Status.QUEUED.value,))
        return None
    if not took(redis, rec, slurm_id):
        tools.scancel([slurm_id])  # (canceled meanwhile)
        return None
    log.info("job %s: submitted to Slurm as job %s", job_id, slurm_id)
    return slurm_id


def took(redis: Redis, rec: Job, slurm_id: str) -> bool:
    """Slurm took a queued job as its job `slurm_id`: out of its line, the record says so, the watcher looks at it;
    False when it was no longer queued (canceled meanwhile)."""
    slurm = {"id": slurm_id, "submitted_at": time.time(), "state": "PENDING", "reason": None, "expected_start": None}
    with redis.pipeline() as pipe:
        queues.withdraw(redis, rec, pipe)
        pipe.sadd(SLURM_JOBS_KEY, rec["id"])
        pipe.sadd(SLURM_OURS_KEY, slurm_id)
        pipe.execute()
    said = f"submitted to Slurm as job {slurm_id}"
    return JobStore(redis).transition(rec["id"], (Status.QUEUED.value,), slurm=slurm, message=said)


def holding(redis: Redis, store: JobStore) -> tuple[Counter[int], Counter[str]]:
    """What Slurm holds of gpudeck's now (submitted, pending or running): jobs per sweep, GPUs per owner."""
    per_sweep: Counter[int] = Counter()
    per_owner: Counter[str] = Counter()
    for raw in redis.smembers(SLURM_JOBS_KEY):
        try:
            rec = store.get(int(raw))
        except NotFound:
            continue
        if rec["status"] in ENDED:
            continue
        if (sweep := sweep_id(rec)) is not None:
            per_sweep[sweep] += 1
        if rec.get("owner"):
            per_owner[rec["owner"]] += rec.spec.gpus
    return per_sweep, per_owner


def submit_queued(redis: Redis, settings: Settings, tools: Tools) -> list[int]:
    """Every job of the lines to sbatch, high priority first, in each line's order; the jobs submitted. Held back
    by gpudeck, saying so: a sweep's job while `max_concurrent` of its jobs are Slurm's (as a job array's `%N`
    would), a job that would take its owner past their token's `--max-gpus`. A job already Slurm's (requeued by
    its attempt while Slurm requeues it too: its `slurm.id` still pending) leaves its line without a second
    submission."""
    done = []
    ranked = sorted(queues.lines(redis).items(), key=lambda kv: PRIORITIES.index(kv[0][0]))
    store = JobStore(redis)
    release_dependencies(redis, store)  # (a job whose `after` all succeeded joins its line; one that failed: canceled)
    per_sweep, per_owner = holding(redis, store) if ranked else (Counter(), Counter())
    quotas = tokens.quotas(redis) if ranked else {}
    for _, members in ranked:
        for job_id, _ in members:
            try:
                rec = store.get(job_id)
            except NotFound:
                continue
            if (rec.get("slurm") or {}).get("id"):
                queues.withdraw(redis, rec)  # (the watcher puts it back should Slurm no longer have it)
                continue
            sweep, owner, gpus = sweep_id(rec), rec.get("owner"), rec.spec.gpus
            cap = sweeps.max_concurrent(redis, sweep) if sweep is not None else None
            limit = quotas.get(owner) if owner and gpus else None
            if cap is not None and sweep is not None and per_sweep[sweep] >= cap:
                _say(store, rec, f"waiting: sweep {sweep} runs {per_sweep[sweep]} of {cap} at once")
            elif limit is not None and owner and per_owner[owner] + gpus > limit:
                _say(store, rec, quota.waiting(owner, per_owner[owner], limit))
            elif submit(redis, settings, tools, job_id) is not None:
                done.append(job_id)
                per_sweep[sweep if sweep is not None else -1] += 1
                per_owner[owner or "-"] += gpus
    return done


def _say(store: JobStore, rec: Job, message: str) -> None:
    if rec.get("message") != message:
        store.transition(rec["id"], (Status.QUEUED.value,), message=message)


def _fields(rec: Job, **changes: Any) -> dict[str, Any]:
    return {**(rec.get("slurm") or {}), **changes}


def watch(redis: Redis, settings: Settings, listed: list[SlurmJob], now: float | None = None) -> list[str]:
    """What Slurm says of gpudeck's jobs (`squeue`'s lines), into their records (see the module's docstring); the
    Slurm jobs gpudeck no longer wants (to `scancel`): a job canceled or deleted, a stale one of a job since
    submitted again, a running one whose attempt no longer beats."""
    now = time.time() if now is None else now
    store = JobStore(redis)
    ours = {m.decode() for m in redis.smembers(SLURM_OURS_KEY)}
    named: dict[int, list[SlurmJob]] = {}
    for sj in listed:
        job_id = job_id_of(sj.name)
        if job_id is not None and sj.slurm_id in ours:  # (never another stack's `gpudeck-N`)
            named.setdefault(job_id, []).append(sj)
    gone = ours - {sj.slurm_id for sj in listed}
    if gone:  # (Slurm no longer lists them: nothing of theirs to cancel, ever)
        redis.srem(SLURM_OURS_KEY, *gone)
    wanted = {int(m) for m in redis.smembers(SLURM_JOBS_KEY)}
    strays: list[str] = []
    for job_id in sorted(wanted | set(named)):
        try:
            rec = store.get(job_id)
        except NotFound:  # (deleted: what Slurm still runs of it goes)
            strays += [sj.slurm_id for sj in named.get(job_id, []) if alive(sj)]
            redis.srem(SLURM_JOBS_KEY, job_id)
            continue
        sid = (rec.get("slurm") or {}).get("id")
        strays += [sj.slurm_id for sj in named.get(job_id, []) if sj.slurm_id != sid and alive(sj)]
        mine = next((j for j in named.get(job_id, []) if j.slurm_id == sid), None)
        if job_id in wanted:
            strays += _one(redis, settings, store, rec, mine, now)
    return sorted(set(strays))


def _one(redis: Redis, settings: Settings, store: JobStore, rec: Job, sj: SlurmJob | None, now: float) -> list[str]:
    """One job of SLURM_JOBS_KEY against its Slurm job (None: Slurm has forgotten it); the Slurm ids to cancel."""
    job_id, status = rec["id"], rec["status"]
    slurm = rec.get("slurm") or {}
    if status in ENDED:
        if sj is not None and alive(sj):
            ended = float(rec.get("ended_at") or 0)
            if sj.state.startswith("PENDING") or now - ended > settings.slurm_grace_s + 15:
                return [sj.slurm_id]  # (its attempt had the grace to stop by itself, as a cancel asks)
            return []
        redis.srem(SLURM_JOBS_KEY, job_id)
        if sj is not None and sj.state != slurm.get("state"):  # (how Slurm saw it end: COMPLETED, FAILED …)
            store.transition(job_id, ENDED, slurm=_fields(rec, state=sj.state, reason=None))
        return []
    if sj is None or not alive(sj):
        return _gone(redis, settings, store, rec, sj)
    said = seen(sj)
    if status == Status.QUEUED.value:
        changes: dict[str, Any] = {"state": sj.state, "reason": sj.reason}
        if said.status == Status.QUEUED.value:
            changes["expected_start"] = when(sj.start)
            message = said.message
            if said.reason == Reason.PREEMPTED.value and rec.get("reason") == Reason.PREEMPTED.value:
                message = rec.get("message") or message  # (its attempt said where it was and where it resumes)
        else:
            message = f"Slurm started its job {sj.slurm_id}: its attempt is starting"
        if _fields(rec, **changes) != slurm or message != rec.get("message"):
            store.transition(job_id, (Status.QUEUED.value,), slurm=_fields(rec, **changes), message=message)
        return []
    if status in ACTIVE and rec.spec.multi_worker:
        gang.check(redis, job_id, rec)  # (its tasks' heartbeats: a lost one stops the others, as on workers)
    elif status in ACTIVE and not beating(redis, store, rec) and redis_uptime_s(redis) > 30:
        lifecycle.worker_lost(redis, job_id, rec, f"no heartbeat from its attempt in Slurm job {sj.slurm_id}")
        return [sj.slurm_id]
    if sj.state != slurm.get("state"):
        store.transition(job_id, ACTIVE, slurm=_fields(rec, state=sj.state, reason=sj.reason))
    return []


def beating(redis: Redis, store: JobStore, rec: Job) -> bool:
    """Whether a job's attempt (any task of a multi-worker job's placement) still beats."""
    spec = rec.spec
    if not spec.multi_worker:
        return store.alive(rec["id"])
    return any(t["alive"] for t in gang.tasks(redis, rec["id"], spec.workers) if t.get("gen") == rec.get("gen"))


def _gone(redis: Redis, settings: Settings, store: JobStore, rec: Job, sj: SlurmJob | None) -> list[str]:
    """A live gpudeck job whose Slurm job ended (or that Slurm forgot: `sj` None)."""
    job_id, status = rec["id"], rec["status"]
    slurm = rec.get("slurm") or {}
    if status in ACTIVE and beating(redis, store, rec):
        return []  # (its attempt is recording its end)
    said = seen(sj) if sj is not None else None
    state = sj.state if sj is not None else "gone"
    redis.srem(SLURM_JOBS_KEY, job_id)
    claimed = slurm.get("claimed")  # (an attempt of it ran in this Slurm job: jobs.run.slurmrun)
    cancelled = said is not None and said.status == Status.CANCELED.value
    again = said is None or said.status == Status.SUCCEEDED.value or said.reason == Reason.WORKER_LOST.value
    if said is None or again or (status == Status.QUEUED.value and claimed and not cancelled):
        # Slurm forgot it, its node failed, or its attempt ended without an end of its own (it put the job back
        # in line, or died before it claimed it): submitted again, or retried while max_retries lasts
        why = f"Slurm job {slurm.get('id')} ended {state} without its attempt's end"
        if status == Status.QUEUED.value:
            if store.transition(job_id, (Status.QUEUED.value,), slurm=None, message=f"{why}; submitted again"):
                queues.enqueue(redis, job_id, rec.spec, rec.get("owner"), rec.get("seq"))
            return []
        lifecycle.worker_lost(redis, job_id, rec, why, slurm=None)
        return []
    message = said.message
    out = tail(output_path(settings, job_id), 10)
    if said.status == Status.FAILED.value and out:
        message += f" (its batch output ends: {out.splitlines()[-1][:200]})"
    end = End(Status(said.status), Reason(said.reason) if said.reason else None, message)
    lifecycle.end(redis, job_id, end, rec, allowed=(status,), slurm=_fields(rec, state=state), log_tail=out or None)
    return []


def reprioritize(settings: Settings, rec: Job, priority: str, tools: Tools | None = None) -> None:
    """A queued job's new priority, told to Slurm when Slurm has the job: the QOS the operator mapped to it
    (GPUDECK_SLURM_QOS), or, unmapped, its `--nice` (`low`: the low nice; else 0) through `scontrol update`.
    Conflict (409) where Slurm has no way: raising a job above normal without a QOS for it (only Slurm's operators
    may lower a nice value), or Slurm refusing the change. (The spec and the line: jobs.steer, as on one box.)"""
    slurm_id = (rec.get("slurm") or {}).get("id")
    if not slurm_id:
        return
    opts = options(settings)
    if priority in opts.qos:
        change = f"QOS={opts.qos[priority]}"
    elif priority == "high":
        raise Conflict(
            f"job {rec['id']} is Slurm's job {slurm_id}: only a QOS raises a job on Slurm, and none is mapped to "
            "high (the operator sets GPUDECK_SLURM_QOS=high=QOS)",
            {"field": "priority", "slurm_id": slurm_id},
        )
    else:
        change = f"Nice={opts.low_nice if priority == 'low' else 0}"
    try:
        (tools or Tools()).run("scontrol", "update", f"JobId={slurm_id}", change)
    except (SlurmRefused, SlurmAway) as exc:
        raise Conflict(f"Slurm did not change job {slurm_id} ({change}): {exc}", {"slurm_id": slurm_id}) from None


class Round(Periodic):
    """Each second, and at once when the API queued a job (SLURM_WAKE_KEY): the lines' jobs to sbatch; every
    GPUDECK_SLURM_POLL, squeue into the records (backing off while the controller does not answer). One process at
    a time (SLURM_LOCK_KEY)."""

    what, every_s = "slurm", 1.0

    def __init__(self, settings: Settings, tools: Tools | None = None):
        assert settings.redis_url
        super().__init__(settings.redis_url, "gpudeck-slurm")
        self.settings = settings
        self.tools = tools or Tools()
        self.next_poll = 0.0
        self.failures = 0

    def run(self) -> None:
        """Periodic's loop, but between rounds it waits on SLURM_WAKE_KEY: a job the API queued goes to sbatch
        at once, not up to a second later."""
        while not self.stopped.is_set():
            self.once()
            try:
                self.redis.blpop([SLURM_WAKE_KEY], timeout=self.every_s)
            except RedisError:
                self.stopped.wait(self.every_s)

    def round(self) -> None:
        self.under_lock(SLURM_LOCK_KEY, 120, self._round)  # (one agent at a time; released when done)

    def _round(self) -> None:
        self.redis.delete(SLURM_WAKE_KEY)  # (this round sees every job queued until now)
        now = time.monotonic()
        if now < self.next_poll and self.failures:
            return
        try:
            submit_queued(self.redis, self.settings, self.tools)
            if now >= self.next_poll:
                strays = watch(self.redis, self.settings, self.tools.squeue())
                if strays:
                    log.info("scancel %s: Slurm jobs gpudeck no longer wants", " ".join(strays))
                    self.tools.scancel(strays)
                self.next_poll = now + self.settings.slurm_poll_s
        except SlurmAway as exc:
            wait = AWAY_BACKOFF_S[min(self.failures, len(AWAY_BACKOFF_S) - 1)]
            self.failures += 1
            self.next_poll = now + wait
            self.redis.set(SLURM_AWAY_KEY, f"{exc} (since {time.strftime('%H:%M:%S')}; next try in {wait} s)")
            log.warning("Slurm does not answer (%s); next try in %s s", exc, wait)
            return
        if self.failures:
            log.info("Slurm answers again after %d failed tries", self.failures)
        self.failures = 0
        self.redis.delete(SLURM_AWAY_KEY)
