"""One attempt of one job in a work-horse: claim it, launch its process (jobs.run.launch), pump its output
(jobs.run.pump), and record how it ended (jobs.outcome decides, jobs.lifecycle applies). jobs.run.taskrun is one
task of a multi-worker job, the same attempt with other hooks."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from redis import Redis

from jobs import datasets, gang, lifecycle, mps, outcome
from jobs.archives import tree_bytes
from jobs.keys import metrics_key, rq_job_id
from jobs.run import launch, projectenv, sandbox, upload
from jobs.run.launch import NO_SPACE, Attempt, LogFile, Refused, WorkerContext
from jobs.run.proc import Started, become_subreaper, end_descendants, kill_marked
from jobs.run.pump import HEARTBEAT_EVERY_S, Output, Writes, pump
from jobs.run.warm import Adopted, Warm, choose_warm
from jobs.spec import is_command
from jobs.store import JobStore, StopListener, through_outage
from models import protocol
from models.states import ACTIVE, Status

log = logging.getLogger(__name__)

HORSE_NICENESS = 5
"""The work-horse lowers its CPU priority by this much once its trainer runs (the trainer keeps its own)."""


class JobRun:
    """One attempt of one job, in phases: claim it, prepare (its environment), plan_launch (what runs, in its
    sandbox), start it, pump its output and events, finish (the job-end table's verdict applied). TaskRun
    (jobs.run.taskrun) and SessionRun (jobs.run.sessionrun) are attempts with other hooks: `claim`, `prepare`,
    `stand_down`, `plan_launch`, `start`, `beat`, `stop_reason`, `grace`, `started`, `facts` and `finish`."""

    prefix = ""
    """Put before every log line (a task's `[worker1] `)."""
    reports = True
    """Whether this run reports for the job: a command's scalars, environment and result (a multi-worker job's
    task 0 only, as the chief reports for a zoo job)."""
    one_of_several = False
    """A task of a job of several workers (it starts cold: jobs.run.warm)."""

    def __init__(self, job_id: int, redis: Redis, ctx: WorkerContext, gen: int | None = None):
        self.job_id = job_id
        self.gen = gen
        self.redis = redis
        self.ctx = ctx
        self.store = JobStore(redis)
        self.job_dir = ctx.settings.job_dir(job_id)
        self.output = Output(self.store, job_id, self.prefix)
        self.writes = Writes(redis, job_id)
        self.preamble: list[str] = []
        self.spec: dict[str, Any] = {}
        self.command = False
        self.attempt = 1
        self.refused: str | None = None
        self.no_space: str | None = None
        self.log_full = False
        self.resumes: int | None = None
        self.lifeline: tuple[int, int] = (-1, -1)
        self.owner: str | None = None
        self.data_dir: Path | None = None
        self._run_id: str | None = None
        self.stops = StopListener(redis, job_id)
        self.env_failed: str | None = None
        """Why the project's environment could not be built (the job ends failed, reason environment)."""
        self.env_lock: int | None = None
        """The built environment's lock, held shared while the job runs with it (it is never removed then)."""
        self.quick = False
        """A search's trial (jobs.run.pump.TRIAL_EVERY_S)."""
        self.warm: Warm | None = None
        """The warm trainer this attempt starts in (jobs.run.warm), once it chose to."""
        self.adopted: Adopted | None = None

    def run(self) -> str:
        if not self.claim():
            status = self.store.get(self.job_id)["status"]
            log.info("job %s is %s, not for this worker now; skipping", self.job_id, status)
            return status
        rec = self.store.get(self.job_id)
        spec = self.spec = rec["spec"]
        self.command = is_command(spec)
        self.attempt = rec.get("attempt", 1)
        self.resumes = rec.get("resumes")
        self.owner = rec.get("owner")
        self.quick = rec.get("trial") is not None
        if self.attempt > 1 and self.reports:  # (an earlier attempt's points stay; this one goes on after them)
            self.output.after_earlier_attempts(rec)
        try:
            self.data_dir = datasets.local_dir(self.redis, self.ctx.settings, spec.get("dataset"))
            log_file = launch.job_dir_made(self.job_dir, spec, self.data_dir)
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            self.no_space = f"{exc.strerror}: {exc.filename}"
            log.error("job %s cannot start: %s", self.job_id, self.no_space)
            return self.finish(None, oom_before=None)
        with log_file:
            return self._run(spec, log_file)

    def _run(self, spec: dict[str, Any], log_file: LogFile) -> str:
        self.output.points = self.store.stream_length(metrics_key(self.job_id))
        extra_env = self.prepare(spec)
        if extra_env is None:
            return self.stand_down()
        fraction = self.store.get(self.job_id).get("gpu_fraction") if spec.get("gpu_memory") else None
        if spec.get("gpu_memory"):  # (a share of a GPU: its cap, and the frameworks' knobs)
            extra_env = {**protocol.share_env(spec["gpu_memory"], fraction), **extra_env}
        extra_env = {**mps.job_env(self.ctx.settings, self.ctx.gpu_ids, spec.get("gpu_memory"), fraction), **extra_env}
        if self.stop_reason():  # canceled between dequeue and now
            return self.finish(None, oom_before=None)
        self.warm = self.take_warm(extra_env)
        with self.stops.listening():
            return self._launched(spec, extra_env, log_file)

    def _launched(self, spec: dict[str, Any], extra_env: dict[str, str], log_file: LogFile) -> str:
        with launch.Descriptors() as fds:  # (each closed once: where it is done with, else at the end)
            events_r, events_w = fds.pipe()
            self.lifeline = fds.pipe()  # (a sandboxed job is stopped when the write end, ours alone, closes)
            oom_before = launch.oom_kills()
            become_subreaper()  # what the job starts and orphans comes up to this work-horse, which ends it
            try:
                try:
                    built = projectenv.ready(self, spec, log_file) if self.command else None
                except projectenv.NotBuilt:  # (its build failed, or a stop came first)
                    return self.finish(None if self.env_failed is None else 1, oom_before=None)
                how = self.plan_launch(spec, extra_env, events_w, built)
            except Refused as exc:
                self.refused = str(exc)
                self.preamble.append(f"gpudeck: cannot start the command: {exc}")
            if self.preamble:
                self.say(log_file, *self.preamble)
            if self.refused:
                return self.finish(None, oom_before=None)
            try:
                proc = self.start(how, () if self.command else (events_w,))  # (a command has no events to send)
            except OSError as exc:  # (its job dir could not become the warm trainer's folder)
                log.warning("job %s: no warm start (%s); it starts cold", self.job_id, exc)
                self._cold()
                how = self.plan_launch(spec, extra_env, events_w, built)
                proc = self.start(how, (events_w,))
            fds.close(events_w)
            how.close_files()  # (a sandbox's: its options and the lifeline's read end, now the sandbox's alone)
            if how.sandboxed:
                fds.release(self.lifeline[0])
            else:
                fds.close(self.lifeline[0])
            self.started(proc.pid)
            with contextlib.suppress(OSError):
                os.nice(HORSE_NICENESS)
            log.info("job %s%s: trainer pid %s in %s", self.job_id, self.prefix.rstrip(), proc.pid, self.job_dir)
            if self.adopted is not None:
                fds.close(events_r)
                events = self.adopted.events()
            else:
                events = os.fdopen(fds.release(events_r), "rb")
            uploader = upload.start(self.ctx.settings.artifacts, self.job_id, self.job_dir) if self.reports else None
            pump(self, proc, events, log_file, spec.get("timeout"))
            returncode = proc.wait()
            fds.close(self.lifeline[1])
            if uploader is not None:  # (its last files up, the job's heartbeat kept meanwhile)
                said = lambda *lines: self.say(log_file, *lines)  # noqa: E731
                upload.ended(uploader, (self.beat, HEARTBEAT_EVERY_S), said, self._record)
            if self.adopted is not None:
                self.adopted.close()
        returncode = launch.exit_status(returncode, how.sandboxed or self.adopted is not None)
        self.log_full = log_file.full
        kill_marked(launch.RUN_ID_ENV, self.run_id)  # what it started and left behind, in its group or not
        end_descendants()  # and what dropped the mark: below this subreaper still
        if self.writes.carry is not None:  # what the outage kept back goes in before the end
            through_outage(lambda: self.writes.flush(self.writes.pipeline(), strict=True), "the job's output")
        return through_outage(lambda: self.finish(returncode, oom_before), f"the end of job {self.job_id}")

    def _record(self, **fields: Any) -> None:
        self.store.update(self.job_id, **fields)

    def plan_launch(
        self, spec: dict[str, Any], extra_env: dict[str, str], events_w: int, built: Path | None = None
    ) -> launch.Launch:
        """What this attempt runs (Refused when it cannot start here); a command's variables go in its record."""
        attempt = Attempt(self.job_id, self.attempt, self.run_id, self.job_dir)
        readable = [self.data_dir] if self.data_dir is not None else []
        if not self.command:
            own = self.job_id if self.attempt > 1 else None  # (an id reused after a new Redis: not its objects)
            said = launch.take_checkpoints(self.ctx.settings, self.job_dir, self.resumes, own)
            self.preamble += [said] if said and said not in self.preamble else []
            how = launch.trainer(self.ctx, attempt, events_w, extra_env)
            if self.warm is not None:  # (it runs in the warm trainer's sandbox, made already)
                return how
            return launch.sandboxed(self.ctx, how, self.job_dir, readable, self.lifeline[0])
        launch.may_run_unsandboxed(self.ctx, self.owner)
        how = launch.command(self.ctx, attempt, spec, self.data_dir, extra_env, built)
        self.preamble += launch.sandbox_notes(self.ctx.settings, spec, self.job_dir)  # (a host path it cannot use)
        readable += [built] if built is not None else []
        if self.reports:
            self.output.command_launched(how, spec, self.job_dir, built)
        return launch.sandboxed(self.ctx, how, self.job_dir, readable, self.lifeline[0])

    def spawn(self, how: launch.Launch, fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
        """Start what `how` runs (the job, or its environment's build): its output one pipe, its own process
        group (cancel and timeout signal the whole tree), a sandbox's options and lifeline (and `fds`) passed."""
        return launch.spawn(how, self.ctx.max_memory, fds)

    def start(self, how: launch.Launch, fds: tuple[int, ...]) -> Started:
        """Start the attempt's process (a session's shell starts on a terminal instead: jobs.run.sessionrun), or
        hand the job to the warm trainer it chose (OSError when its job dir cannot move there)."""
        if self.warm is not None:
            user = sandbox.job_user(self.ctx.settings.job_user)
            self.adopted = self.warm.begin(how.env, list(launch.TRAINER_ARGS), self.job_dir, user)
            return self.adopted
        return self.spawn(how, fds)

    def take_warm(self, extra_env: dict[str, str]) -> Warm | None:
        """The warm trainer the worker handed this work-horse, when this attempt can start in it (its run mark is
        then the warm trainer's: what the end of the attempt sweeps); else the attempt starts cold."""
        warm = choose_warm(self.ctx.warm, self.job_id, self.command, self.one_of_several, self.data_dir, extra_env)
        if warm is None:
            self._cold()
            return None
        self._run_id = warm.run_id
        return warm

    def _cold(self) -> None:
        """Let the warm trainer go (this attempt starts cold)."""
        if self.ctx.warm is not None:
            self.ctx.warm.close()
        self.ctx = replace(self.ctx, warm=None)
        self.warm = self._run_id = None

    def say(self, log_file: LogFile, *lines: str) -> None:
        """Lines of gpudeck's own into the job's log, as its output is written."""
        pipe = self.redis.pipeline(transaction=False)
        self.output.handle("log", [line.encode() for line in lines], log_file, pipe)
        pipe.execute()

    @property
    def run_id(self) -> str:
        """The mark on every process this attempt starts: its RQ id and a token of its own, so that no other
        attempt's processes (another gpudeck on this host, a test's) ever carry it."""
        if self._run_id is None:
            self._run_id = f"{self._rq_id()}.{uuid.uuid4().hex[:12]}"
        return self._run_id

    def _rq_id(self) -> str:
        return rq_job_id(self.job_id, self.attempt)

    def measure(self) -> None:
        """The job dir's size, into a record that is still active (never one that ended or went meanwhile)."""
        self.store.transition(self.job_id, ACTIVE, disk_bytes=tree_bytes(self.job_dir))

    def request_stop(self, reason: str) -> None:
        self.stops.heard = self.stops.heard or reason  # (kept should Redis refuse to record it)
        self.store.request_stop(self.job_id, reason)

    # -- hooks -------------------------------------------------------------------------------
    def claim(self) -> bool:
        """Take the job the scheduler placed on this worker (placement `gen`, jobs.schedule): it runs on every GPU
        of its place; False when it was canceled or placed elsewhere meanwhile (or was never placed: an RQ job of
        an older gpudeck, queued before the scheduler placed every job)."""
        if self.gen is None:
            return False
        rec = self.store.get(self.job_id)
        if not gang.current(self.redis, self.job_id, self.gen) or rec.get("worker") != self.ctx.name:
            return False
        self.ctx = replace(self.ctx, gpu_ids=[str(g) for g in rec.get("gpu_ids") or []])
        self.store.beat(self.job_id, self.ctx.name)
        return self.store.transition(self.job_id, (Status.STARTING.value,), claimed_at=time.time())

    def prepare(self, spec: dict[str, Any]) -> dict[str, str] | None:
        """Extra environment for the trainer; None when the attempt must stand down without training."""
        return {}

    def stand_down(self) -> str:
        return self.store.get(self.job_id)["status"]

    def beat(self) -> None:
        self.store.beat(self.job_id, self.ctx.name)

    def stop_reason(self) -> str | None:
        return self.store.stop_reason(self.job_id) or self.stops.heard_now()

    def grace(self, reason: str | None) -> float:
        """Seconds between SIGTERM and SIGKILL for a stop with this reason."""
        return self.ctx.stop_grace_s

    def started(self, pid: int) -> None:
        self.store.update(
            self.job_id, pid=pid, spawned_at=time.time(), warm_start=self.adopted is not None, **self._command_running()
        )
        if self.command:
            self.output.went_running = True  # (told by the pump, with a trainer's `running` event)

    def _command_running(self) -> dict[str, Any]:
        """A command job is running once its process is: there is no trainer to say so."""
        return self.output.command_running(self.spec.get("total_steps")) if self.command else {}

    def _command_result(self, returncode: int | None) -> None:
        if self.command and self.reports and returncode == protocol.EXIT_OK:
            self.output.command_result(self.job_dir, self.spec.get("classes"))

    def facts(self, returncode: int | None, oom_before: int | None) -> outcome.Facts:
        """What the job-end table (jobs.outcome) weighs of this attempt."""
        tail = self.output.tail
        killed = oom_before is not None and (launch.oom_kills() or 0) > oom_before
        return outcome.Facts(
            stop=self.stop_reason(),
            returncode=returncode,
            has_result=self.output.result is not None,
            oom=outcome.out_of_memory(returncode, tail, killed),
            command=self.command,
            diverged=self.output.diverged,
            # the process failed for want of disk space: its last lines say so, or log.txt found none
            full=outcome.disk_full(returncode, tail) or (self.log_full and returncode not in (0, None)),
            refusal=self.refused,
            no_space=self.no_space is not None,
            environment=self.env_failed,
            mps_fault=outcome.mps_fault(returncode, tail),
        )

    def finish(self, returncode: int | None, oom_before: int | None) -> str:
        """Record the honest final state (jobs.outcome decides, jobs.lifecycle applies): succeeded, canceled,
        failed with a typed reason, or queued again after a worker_lost stop while retries last."""
        self._command_result(returncode)
        end = outcome.of_job(self.facts(returncode, oom_before))
        size = tree_bytes(self.job_dir)
        kept = launch.newest_checkpoint(self.job_dir) if end.requeue and not self.command else None
        status = lifecycle.end(  # (its own attempt only: never the next one, should the reaper have moved on)
            self.redis,
            self.job_id,
            end,
            of_attempt=self.attempt,
            log_tail=self.output.tail,
            disk_bytes=size,
            checkpoint_step=kept,
        )
        return status or self.store.get(self.job_id)["status"]
