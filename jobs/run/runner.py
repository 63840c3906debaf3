"""One attempt of one job in a work-horse: claim it, launch its process (jobs.run.launch), pump its output
(jobs.run.pump), and record how it ended (jobs.outcome decides, jobs.lifecycle applies). What differs between a
single job, a task of a multi-worker job and a session is the attempt's hooks (jobs.run.hooks), an object it is
given."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import time
import uuid
from dataclasses import replace
from functools import partial
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

from jobs import datasets, mps
from jobs.archives import tree_bytes
from jobs.keys import metrics_key, warm_wanted_key
from jobs.periodic import not_stuck
from jobs.record import Kept
from jobs.run import launch, projectenv, upload, warmpy
from jobs.run.hooks import Hooks
from jobs.run.launch import NO_SPACE, LogFile, Refused, WorkerContext
from jobs.run.proc import become_subreaper, end_descendants, kill_marked
from jobs.run.pump import HEARTBEAT_EVERY_S, Output, Writes, pump
from jobs.run.warm import Adopted, PythonWant, Warm, let_go, note_python, recorded_imports, taken, wanted
from jobs.store import JobStore, StopListener, through_outage
from models.states import ACTIVE

log = logging.getLogger(__name__)

HORSE_NICENESS = 5
"""The work-horse lowers its CPU priority by this much once its trainer runs (the trainer keeps its own)."""


class JobRun:
    """One attempt of one job, in phases, each a hook of `hooks` (jobs.run.hooks): claim it, prepare (its
    environment; else stand_down), plan_launch (what runs, in its sandbox), start it, started, pump its output and
    events (beat, stop_reason, grace), finish (the job-end table's verdict on its facts, applied)."""

    def __init__(
        self, job_id: int, redis: Redis, ctx: WorkerContext, gen: int | None = None, hooks: Hooks | None = None
    ):
        self.hooks = hooks or Hooks()
        self.prefix = ""
        """Put before every log line (a task's `[worker1] `)."""
        self.reports = True
        """Whether this run reports for the job: a command's scalars, environment and result (a multi-worker job's
        task 0 only, as the chief reports for a zoo job)."""
        self.job_id = job_id
        self.gen = gen
        self.redis = redis
        self.ctx = ctx
        self.store = JobStore(redis)
        self.job_dir = ctx.settings.job_dir(job_id)
        self.output = Output(self.store, job_id, self.prefix)
        self.writes = Writes(redis, job_id)
        self.preamble: list[str] = []
        self.spec = Kept()
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
        self.python_want: PythonWant | None = None
        """The warm interpreter a Python command job of this attempt could start in (noted at its end)."""
        self.warm_key = warm_wanted_key(socket.gethostname(), ctx.gpu_ids)
        """Where its worker's GPUs say what to keep warm (the worker's own GPUs, not the job's place)."""
        self.hooks.begin(self)

    def run(self) -> str:
        if not self.hooks.claim(self):
            status = self.store.get(self.job_id).status
            log.info("job %s is %s, not for this worker now; skipping", self.job_id, status)
            return status
        job = self.store.get(self.job_id)
        spec = self.spec = job.spec
        self.command = spec.runs_code
        self.attempt, self.resumes, self.owner, self.quick = job.attempt, job.resumes, job.owner, job.trial is not None
        if self.attempt > 1 and self.reports:  # (an earlier attempt's points stay; this one goes on after them)
            self.output.after_earlier_attempts()
        try:
            self.data_dir = datasets.local_dir(self.redis, self.ctx.settings, spec.dataset)
            log_file = launch.job_dir_made(self.job_dir, spec, self.data_dir)
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            self.no_space = f"{exc.strerror}: {exc.filename}"
            log.error("job %s cannot start: %s", self.job_id, self.no_space)
            return self.finish(None, oom_before=None)
        with log_file:
            return self._run(spec, job.gpu_fraction, log_file)

    def _run(self, spec: Kept, fraction: float | None, log_file: LogFile) -> str:
        self.output.points = self.store.stream_length(metrics_key(self.job_id))
        extra_env = self.hooks.prepare(self, spec)
        if extra_env is None:
            return self.hooks.stand_down(self)
        told = mps.attempt_env(self.ctx.settings, self.ctx.gpu_ids, spec.gpu_memory, fraction)
        extra_env = {**told, **extra_env}
        if self.stop_reason():  # canceled between dequeue and now
            return self.finish(None, oom_before=None)
        self.warm = self.take_warm(extra_env)
        with self.stops.listening():
            return self._launched(spec, extra_env, log_file)

    def _launched(self, spec: Kept, extra_env: dict[str, str], log_file: LogFile) -> str:
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
                how = self.hooks.plan_launch(self, spec, extra_env, events_w, built)
            except Refused as exc:
                self.refused = str(exc)
                self.preamble.append(f"gpudeck: cannot start the command: {exc}")
            if self.preamble:
                self.say(log_file, *self.preamble)
            if self.refused:
                return self.finish(None, oom_before=None)
            try:
                proc = self.hooks.start(self, how, () if self.command else (events_w,))  # (a command sends no events)
            except OSError as exc:  # (its job dir could not become the warm trainer's folder)
                log.warning("job %s: no warm start (%s); it starts cold", self.job_id, exc)
                self._cold()
                how = self.hooks.plan_launch(self, spec, extra_env, events_w, built)
                proc = self.hooks.start(self, how, (events_w,))
            fds.started(how, events_w, lifeline=self.lifeline[0])
            self.hooks.started(self, proc.pid)
            with contextlib.suppress(OSError):
                os.nice(HORSE_NICENESS)
            log.info("job %s%s: trainer pid %s in %s", self.job_id, self.prefix.rstrip(), proc.pid, self.job_dir)
            events = self.adopted.events() if self.adopted is not None else fds.reader(events_r)
            uploader = upload.start(self.ctx.settings.artifacts, self.job_id, self.job_dir) if self.reports else None
            pump(self, proc, events, log_file, spec.timeout)
            returncode = proc.wait()
            if self.python_want is not None:  # (its record of imports read and removed before the last upload)
                self.note_python_want()
            fds.close(self.lifeline[1])
            if uploader is not None:  # (its last files up, the job's heartbeat kept meanwhile)
                said = lambda *lines: self.say(log_file, *lines)  # noqa: E731
                upload.ended(uploader, (self.beat, HEARTBEAT_EVERY_S), said, partial(self.store.update, self.job_id))
            if self.adopted is not None:
                self.adopted.close()
        returncode = launch.exit_status(returncode, how.sandboxed or self.adopted is not None)
        self.log_full = log_file.full
        kill_marked(launch.RUN_ID_ENV, self.run_id)  # what it started and left behind, in its group or not
        end_descendants()  # and what dropped the mark: below this subreaper still
        if self.writes.carry is not None:  # what the outage kept back goes in before the end
            through_outage(lambda: self.writes.flush(self.writes.pipeline(), strict=True), "the job's output")
        return through_outage(lambda: self.finish(returncode, oom_before), f"the end of job {self.job_id}")

    def spawn(self, how: launch.Launch, fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
        """Start what `how` runs (the job, or its environment's build: jobs.run.launch.spawn)."""
        return launch.spawn(how, self.ctx.max_memory, fds)

    def take_warm(self, extra_env: dict[str, str]) -> Warm | None:
        """The warm trainer this attempt starts in, if any (jobs.run.warm.taken)."""
        self.ctx, warm = taken(self.ctx, self.job_id, self.command, self.hooks.one_of_several, self.data_dir, extra_env)
        self._run_id = warm.run_id if warm is not None else None
        return warm

    def _cold(self) -> None:
        self.drop_warm()
        self._run_id = None

    def drop_warm(self) -> None:
        """Let the warm process go: the attempt starts cold (with the run mark it has)."""
        self.ctx, self.warm = let_go(self.ctx), None

    def note_python_want(self) -> None:
        """At a Python command job's end: these GPUs' first worker keeps a warm interpreter of its environment ready,
        importing what this job imported (as its warm interpreter recorded it) or what the last one did."""
        assert self.python_want is not None
        imports = recorded_imports(self.job_dir) if self.adopted is not None else ()
        s = self.ctx.settings
        try:
            now = wanted(self.redis.get(self.warm_key), time.time(), s.warm_max_age_s)
            last = now.imports if isinstance(now, PythonWant) and now.same_place(self.python_want) else ()
            imports = tuple(dict.fromkeys([*imports, *self.spec.warm_imports]))[: warmpy.MAX_IMPORTS]
            if not imports or set(imports) == set(last):  # (the same modules in another order: no new interpreter)
                imports = last
            note_python(self.redis, self.warm_key, replace(self.python_want, imports=imports), s.warm_max_age_s)
        except RedisError:
            log.warning("job %s: its warm interpreter's environment not noted (Redis)", self.job_id)

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
            self._run_id = f"{self.hooks.rq_id(self)}.{uuid.uuid4().hex[:12]}"
        return self._run_id

    def measure(self) -> None:
        """The job dir's size, into a record that is still active (never one that ended or went meanwhile)."""
        self.store.transition(self.job_id, ACTIVE, disk_bytes=tree_bytes(self.job_dir))

    def request_stop(self, reason: str) -> None:
        self.stops.heard = self.stops.heard or reason  # (kept should Redis refuse to record it)
        self.store.request_stop(self.job_id, reason)

    # -- the hooks the pump and the environment's build call ------------------------------------------------
    def beat(self) -> None:
        self.hooks.beat(self)
        not_stuck()  # (the attempt beats: its work-horse is not hung; jobs.worker armed say_where_if_stuck)

    def stop_reason(self) -> str | None:
        return self.hooks.stop_reason(self)

    def grace(self, reason: str | None) -> float:
        return self.hooks.grace(self, reason)

    def finish(self, returncode: int | None, oom_before: int | None) -> str:
        return self.hooks.finish(self, returncode, oom_before)
