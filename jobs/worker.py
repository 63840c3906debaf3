"""`gpudeck worker`: an RQ worker pinned to its GPUs. The worker process never imports TensorFlow."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import replace
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from rq import Worker
from rq.command import send_shutdown_command
from rq.job import Job

from jobs import control, disk, gang, gpuhealth, mps, schedule, taskrecord
from jobs.cronjobs import Timetable
from jobs.errors import ConfigError, NotFound
from jobs.gpus import Sampler
from jobs.keys import (
    RUN_HOLD,
    RUN_JOB,
    RUN_TASK,
    alive_key,
    attempt_of,
    base_queue,
    drain_key,
    job_id_of,
    private_queue,
    waiting_key,
    worker_info_key,
    worker_name,
)
from jobs.lifecycle import worker_lost
from jobs.notify import Notifier
from jobs.periodic import FORK_GUARD, Periodic, Watch, not_stuck, say_where_if_stuck
from jobs.reaper import Reaper
from jobs.run import launch, proc, sandbox, warm
from jobs.run.launch import WorkerContext
from jobs.search import Searcher
from jobs.settings import Settings
from jobs.store import JobStore, cannot_write, iso, passing, write_refusal
from jobs.warmkeep import WARM_RETRY_S, KeepsWarm  # noqa: F401 (WARM_RETRY_S re-exported: its home before warmkeep)
from models.protocol import DEFAULT_GRACE_S
from models.sourcetree import human
from models.states import Reason, Status

log = logging.getLogger(__name__)

LOW_DISK_POLL_S = 5.0
"""How often a worker that waits for disk space looks again."""


class GpudeckJob(Job):
    """An RQ job that hands the worker's context to its task function (`context=`) when the worker set one: the
    context travels with the job into the work-horse, explicitly, rather than through a module global."""

    context: WorkerContext | None = None

    def _execute(self) -> Any:
        if self.context is None or self.func_name not in (RUN_JOB, RUN_TASK, RUN_HOLD):
            return super()._execute()
        return self.func(*self.args, context=self.context, **self.kwargs)


class GpudeckWorker(KeepsWarm, Worker):
    """RQ's forking worker, which also stops its trainer honestly when the worker goes away."""

    def __init__(self, *args: Any, context: WorkerContext | None = None, **kwargs: Any):
        kwargs["job_class"] = GpudeckJob
        super().__init__(*args, **kwargs)
        self.context = context
        self._warm: warm.Warm | None = None
        """The warm trainer this worker keeps ready (jobs.run.warm)."""
        self._let_go: list[warm.Warm] = []
        """Warm trainers handed on or let go, until they exit (this worker is their parent: it reaps them)."""
        self._warm_failed_at = 0.0
        self.placer: schedule.Placer | None = None
        """The thread that says this worker is alive for placement (stopped with the worker's stop request)."""

    def perform_job(self, job: Any, queue: Any, execution: Any) -> bool:
        """In the work-horse: the job runs with this worker's context (with the warm trainer, when the worker handed
        it this job; any other it leaves to the worker)."""
        if job.func_name in (RUN_JOB, RUN_TASK):  # (a hold beats nothing: it waits for its gang's tasks)
            say_where_if_stuck()
        if self._warm is not None and (self.context is None or self.context.warm is not self._warm):
            self._warm.close()  # (the worker's: this work-horse holds no end of it)
        job.context = self.context
        try:
            return super().perform_job(job, queue, execution)
        finally:
            not_stuck()

    def fork_work_horse(self, job: Any, queue: Any) -> None:
        """RQ's fork of a work-horse, which a zoo job's takes the warm trainer into (jobs.run.warm); the worker then
        makes the next one ready."""
        ctx, handed = self.context, self._warm_for(job)
        if ctx is not None:
            self.context = replace(ctx, warm=handed)
        try:
            # (no helper thread of this worker is in the middle of an import, nor of starting a process: proc.SPAWNING)
            with FORK_GUARD, proc.SPAWNING:
                super().fork_work_horse(job, queue)
        finally:
            self.context = ctx
        if handed is not None:  # (the work-horse holds its ends now; the worker reaps it once it exits)
            self._let_warm_go(handed, None)
            self._warm = None
        self._keep_warm()

    def request_stop(self, signum: int, frame: Any) -> None:
        """Warm shutdown: the running trainer checkpoints and stops (its job is retried as worker_lost);
        a draining worker instead lets the job finish (RQ's warm shutdown waits for it)."""
        if self.placer is not None:  # (a worker that leaves is placed nothing more, its stopped job's retry neither)
            self.placer.stopped.set()
            self._tolerant("leaving placement", self.connection.delete, alive_key(self.name))
        job = self.get_current_job()
        if (
            job is not None
            and job_id_of(job.id) is not None
            and job.func_name != RUN_HOLD  # (a held worker leaves; the job it held GPUs for runs on)
            and not self.connection.exists(drain_key(self.name))
        ):
            self._stop_trainer(job)
        super().request_stop(signum, frame)

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        """While the disk under GPUDECK_HOME is below GPUDECK_MIN_FREE the worker takes no new job: queued jobs
        wait in line (a job started there would soon fail as disk_full) and it says so once in its log. A burst
        worker (timeout None) finds nothing to do instead."""
        settings = self.context.settings if self.context else None
        waited = False
        while settings is not None and not self._stop_requested and (free := disk.low(settings)) is not None:
            if timeout is None:
                return None
            if not waited:
                log.warning(
                    "worker %s takes no new job: %s free under %s, below GPUDECK_MIN_FREE (%s)",
                    self.name,
                    human(free),
                    settings.home,
                    human(settings.min_free),
                )
                waited = True
            self.heartbeat()
            time.sleep(LOW_DISK_POLL_S)
        if waited and settings is not None:
            if self._stop_requested:
                return None  # asked to stop while it waited: no job now
            log.warning("worker %s: there is room again under %s; it takes jobs", self.name, settings.home)
        refusing = False  # Redis cannot save (its disk is full): a job taken now could not even be recorded
        while not self._stop_requested and (why := self._redis_refusal()) is not None:
            if timeout is None:
                return None
            if not refusing:
                log.warning("worker %s takes no new job: Redis refuses writes (%s)", self.name, why)
                refusing = True
            time.sleep(LOW_DISK_POLL_S)
        if refusing:
            if self._stop_requested:
                return None
            log.warning("worker %s: Redis takes writes again; it takes jobs", self.name)
        self._keep_warm()
        # A scheduling round now, with this worker free (and alive for it): what it may run comes at once, and a
        # burst worker finds the jobs it may take placed on it before it looks.
        self._tolerant("scheduling round", self._place)
        said = False
        while True:
            try:
                got = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
                break
            except RedisError as exc:  # (the disk filled between its look above and RQ's BLMOVE: it rides it out)
                if not cannot_write(exc) or timeout is None or self._stop_requested:
                    raise
                if not said:
                    log.warning("worker %s takes no new job: Redis refuses writes (%s)", self.name, exc)
                    said = True
                time.sleep(LOW_DISK_POLL_S)
        if got is None and max_idle_time is not None and timeout is not None and not self._stop_requested:
            return self.retire()
        return got

    def retire(self) -> Any:
        """Idle for its --idle-exit (an extra job slot `gpudeck up` started for shares that waited, jobs.supervisor):
        out of placement (draining) under the scheduler's lock, so no round places a job on it as it goes; a job a
        round placed on it before is served first, and it stays. None: it exits (RQ's loop ends)."""
        with schedule.lock_round(self.connection, wait_s=schedule.LOCK_WAIT_S):
            self.connection.set(drain_key(self.name), "idle", ex=3600)
        got = super().dequeue_job_and_maintain_ttl(None, None)  # (no wait: what is on its queue already)
        if got is not None:
            self.connection.delete(drain_key(self.name))
            log.info("worker %s: a job came as it would leave; it stays", self.name)
        return got

    def _place(self) -> None:
        self.connection.set(alive_key(self.name), f"{time.time():.3f}", ex=schedule.ALIVE_TTL_S)
        if self.context is not None:  # (a worker made without one, as RQ's own tools make it, places nothing)
            # (after a round another process is running: what it places here is on this worker's queue before it
            # looks; a burst worker that looked first would leave it there and exit)
            schedule.place(self.connection, self.context.settings, wait_s=2.0)

    def _redis_refusal(self) -> str | None:
        try:
            return write_refusal(self.connection)
        except RedisError as exc:
            if not passing(exc):
                raise
            return None  # away: RQ's own loop waits for it as before

    def set_state(self, state: Any, pipeline: Any = None) -> None:
        """RQ's state of the worker (busy, idle): while Redis cannot write, not recorded; the worker goes on."""
        self._tolerant(f"its state {state}", super().set_state, state, pipeline)

    def run_maintenance_tasks(self) -> None:
        """RQ's cleaning of its registries: while Redis cannot write, put off to the next round."""
        self._tolerant("maintenance", super().run_maintenance_tasks)

    def check_for_suspension(self, burst: bool) -> None:
        """RQ's look for `rq suspend` (which writes a heartbeat too): while Redis cannot write, not suspended."""
        self._tolerant("suspension check", super().check_for_suspension, burst)

    def register_death(self) -> None:
        """RQ's record of this worker's exit: while Redis cannot write, left to the worker's key expiring. Its warm
        trainer goes with it."""
        if self._warm is not None:
            stopping, self._warm = self._warm, None
            self._let_warm_go(stopping, "its worker stops")
            shutil.rmtree(stopping.folder, ignore_errors=True)
        self._tolerant("exit record", super().register_death)

    def _tolerant(self, what: str, fn: Any, *args: Any) -> None:
        """fn(*args); a Redis that is away or cannot write (its disk is full) is logged and ridden out, so the
        worker never quits (and crash-loops) on it."""
        try:
            fn(*args)
        except RedisError as exc:
            if not passing(exc):
                raise
            log.warning("worker %s: %s put off (%s)", self.name, what, exc)

    def heartbeat(self, timeout: Any = None, pipeline: Any = None) -> None:
        """RQ's heartbeat of the worker: while Redis cannot write, skipped; the worker goes on."""
        self._tolerant("heartbeat", super().heartbeat, timeout, pipeline)

    def maintain_heartbeats(self, job: Any, execution: Any) -> None:
        """RQ's heartbeats while a work-horse runs; while Redis is away (restarting, a blip) they wait, and the
        worker and its job ride the outage out instead of the worker quitting on the error."""
        try:
            super().maintain_heartbeats(job, execution)
        except RedisError as exc:
            if not passing(exc):
                raise
            log.warning("worker %s: redis unreachable (%s); its job goes on", self.name, exc)

    def execute_job(self, job: Any, queue: Any) -> None:
        """RQ's running of one job: a work-horse that ended while Redis was away (RQ then reads the job's status
        to judge how it ended) does not make the worker quit; the job's end is the work-horse's to record, or the
        reaper's to find. (Raised while a work-horse still runs, it would: the worker must not take another.)"""
        try:
            super().execute_job(job, queue)
        except RedisError as exc:
            if not passing(exc) or self._horse_pid:
                raise
            log.warning(
                "worker %s: job %s ended while redis was unreachable (%s); the worker goes on", self.name, job.id, exc
            )

    def _stop_trainer(self, job: Any) -> None:
        job_id, pid = trainer_of(job)
        store = JobStore(self.connection)
        if Status(store.get(job_id)["status"]).ended or pid is None:
            return
        log.warning("worker stopping: job %s gets SIGTERM to checkpoint and stop", job_id)
        store.request_stop(job_id, Reason.WORKER_LOST.value)
        launch.signal_group(pid, signal.SIGTERM)


def trainer_of(job: Any) -> tuple[int, int | None]:
    """(gpudeck job id, trainer pid) of an RQ job: a single job's or one task's of a multi-worker job."""
    job_id = job_id_of(job.id)
    assert job_id is not None
    if job.func_name == RUN_TASK:
        return job_id, taskrecord.pid(job.connection, job_id, job.args[1])
    return job_id, JobStore(job.connection).get(job_id).get("pid")


def on_horse_killed(job: Any, retpid: int, ret_val: int, rusage: Any) -> None:
    """The work-horse died under a job (cold shutdown, a crash): its trainer goes too, the job is worker_lost
    (for a task of a multi-worker job: the other tasks stop, and the job is retried or fails as worker_lost)."""
    try:
        _horse_lost(job, f"the work-horse died (wait status {ret_val})")
    except RedisError as exc:  # away, or its disk full: the worker goes on; the reaper ends the job later
        log.warning("job %s: could not record that its work-horse died (%s); the reaper will", job.id, exc)


def on_job_error(job: Any, exc_type: type, exc: BaseException, tb: Any) -> None:
    """gpudeck's own code raised in the work-horse (a bug, a full disk): the job is worker_lost now, with the
    error as its message, rather than when its heartbeat expires with a message that names no cause. Runs in the
    work-horse, after RQ has logged the traceback in the worker's log."""
    try:
        _horse_lost(
            job,
            f"gpudeck failed on worker {getattr(job.context, 'name', None) or '?'}: {exc_type.__name__}: {exc}",
        )
    except Exception:  # e.g. Redis is away too: the reaper judges it by its heartbeat instead
        log.exception("job %s: could not record the error", job.id)


def _horse_lost(job: Any, why: str) -> None:
    if job_id_of(job.id) is None or job.func_name == RUN_HOLD:
        return
    store = JobStore(job.connection)
    rec = store.get(int(job_id_of(job.id) or 0))
    attempt = attempt_of(job.id)
    if attempt is not None and int(rec.get("attempt", 1)) != attempt:
        return  # (an earlier attempt's work-horse: the job has moved on, its next attempt maybe running elsewhere)
    job_id, pid = trainer_of(job)
    if pid is not None:
        launch.signal_group(pid, signal.SIGKILL)  # its trainer must not outlive it
    if Status(rec["status"]).ended:
        return
    if job.func_name == RUN_TASK:
        index, gen = job.args[1], job.args[2]
        if gang.current(job.connection, job_id, gen):
            gang.task_lost(job.connection, job_id, index, why)
        return
    worker_lost(job.connection, job_id, rec, why)


def drain(redis: Redis, name: str) -> dict[str, Any]:
    """Ask worker `name` to finish its current job, take no new one, and exit."""
    if name not in {w.name for w in Worker.all(connection=redis)}:
        raise NotFound(f"no live worker named {name!r}", {"worker": name})
    redis.set(drain_key(name), "1", ex=7 * 24 * 3600)
    send_shutdown_command(redis, name)  # RQ's warm shutdown: an idle worker exits now, a busy one after its job
    return {"worker": name, "draining": True}


def alive(redis: Redis, names: list[str]) -> list[bool]:
    """Whether each worker beat in the last ALIVE_TTL_S seconds (its own thread refreshes the key every second;
    the same mark placement trusts). RQ keeps a killed worker in its registry for minutes."""
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.exists(alive_key(name))
        return [bool(n) for n in pipe.execute()]


def host_facts(settings: Settings) -> dict[str, Any]:
    """What `gpudeck doctor` asks of a worker's host (GET /api/v1/doctor): the NVIDIA driver's version (None: no
    nvidia-smi answered), whether NVIDIA MPS is installed (its control binary on PATH) and asked for
    (GPUDECK_MPS)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        out = []
    return {
        "driver": out[0] if out else None,
        "mps_installed": shutil.which(mps.CONTROL) is not None,
        "mps": settings.mps,
        **kinds(),
    }


def kinds() -> dict[str, bool]:
    """Which kinds of job this worker's Python can run (issue 68): zoo models (TensorFlow, gpudeck[tensorflow]),
    project environments (uv: gpudeck[envs] or on PATH), notebook sessions (Jupyter: gpudeck[notebook]); commands
    and shell sessions always. Looked up without importing any of them."""
    import importlib.util

    def has(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False

    return {
        "tensorflow": has("tensorflow"),
        "uv": has("uv") or shutil.which("uv") is not None,
        "jupyter": has("jupyter_server") or has("jupyterlab"),
    }


def clocks(redis: Redis, names: list[str]) -> dict[str, float]:
    """Each live worker's clock as it last said it was alive (its Placer, every second)."""
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.get(alive_key(name))
        said = pipe.execute()
    out = {}
    for name, raw in zip(names, said):
        try:
            out[name] = float(raw)
        except (TypeError, ValueError):
            continue  # (an older worker says "1")
    return out


def describe(redis: Redis) -> list[dict[str, Any]]:
    """Registered workers: identity (host, GPUs), state (`lost` when it stopped beating), current job, draining."""
    out = []
    workers = sorted(Worker.all(connection=redis), key=lambda w: w.name)
    ready = warm.ready(redis)
    for w, beating in zip(workers, alive(redis, [w.name for w in workers])):
        raw = redis.get(worker_info_key(w.name))
        info = json.loads(raw) if raw else {}
        current = job_id_of(w.get_current_job_id())
        waiting = redis.get(waiting_key(w.name))
        state = w.get_state() if beating else "lost"
        if waiting is not None and state == "idle":
            state = waiting.decode()  # e.g. a foreign process uses its GPU
        out.append(
            {
                "name": w.name,
                "host": info.get("host", w.hostname),
                "pid": w.pid,
                "gpus": info.get("gpus", []),
                "queues": [base_queue(len(info.get("gpus", [])))],
                "state": state,
                "alive": beating,
                "job_id": current if beating else None,
                "draining": bool(redis.exists(drain_key(w.name))),
                "sandboxed": info.get("sandboxed"),
                "isolation": info.get("isolation"),
                "warm": ready.get(w.name),
                "last_heartbeat": iso(w.last_heartbeat.timestamp()) if w.last_heartbeat else None,  # (one form)
            }
        )
    return out


def run(
    settings: Settings,
    gpus: list[str],
    *,
    name: str | None = None,
    burst: bool = False,
    idle_exit_s: float | None = None,
    stop_grace_s: float = DEFAULT_GRACE_S,
    max_memory: int | None = None,
) -> None:
    """Pin to `gpus` ([] = CPU), then serve the queues for that GPU count until stopped (or, `idle_exit_s`, idle that
    long: an extra job slot of `gpudeck up`, GpudeckWorker.retire)."""
    if settings.sandbox == "bwrap" and sandbox.unavailable():
        raise ConfigError(f"GPUDECK_SANDBOX=bwrap, but {sandbox.unavailable()}")
    if sandbox.active(settings.sandbox):
        sandbox.job_user(settings.job_user)  # (ConfigError for a user this host has not, or root)
    mps.check_worker(settings, gpus)  # (GPUDECK_MPS=on: its GPU's daemon must be up)
    # Before anything can import TensorFlow: the trainers this worker starts inherit it.
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    host = socket.gethostname()
    name = name or worker_name(host, gpus, os.getpid())
    context = WorkerContext(
        settings=settings, name=name, gpu_ids=list(gpus), stop_grace_s=stop_grace_s, max_memory=max_memory
    )
    redis = settings.redis()
    isolation = sandbox.describe(settings.sandbox, settings.command_jobs_trusted, settings.job_user)
    info = {
        "host": host,
        "gpus": gpus,
        "sandboxed": sandbox.active(settings.sandbox),
        "isolation": isolation,
        "facts": host_facts(settings),
    }
    redis.set(worker_info_key(name), json.dumps(info), ex=7 * 24 * 3600)
    gpuhealth.adopt_legacy_cordons(redis)  # (an older gpudeck's cordons: still out of service after an upgrade)
    worker = GpudeckWorker(
        [private_queue(name)],
        name=name,
        connection=redis,
        work_horse_killed_handler=on_horse_killed,
        exception_handlers=[on_job_error],
        context=context,
    )
    assert settings.redis_url
    retention = (lambda r: control.apply_retention(r, settings)) if settings.retention else None
    helpers: list[Periodic] = [
        Reaper(settings.redis_url, retention),
        Sampler(
            settings.redis_url,
            host,
            settings.gpu_memory_grace_s,
            settings.gpu_context_memory,
            settings.idle_gpu,
            settings.idle_gpu_window_s,
            settings.admin_notify,
        ),
        placer := schedule.Placer(settings.redis_url, name, settings),
        Searcher(settings),  # (one process at a time drives the searches: whichever holds the lock this round)
        Timetable(settings),  # (and makes the schedules' due firings)
        Notifier(settings),  # (and sends the notifications due: the API's does too, one of them at a time)
        warm.Report(settings.redis_url, name, lambda: worker._warm),  # (what its warm trainer holds)
    ]
    helpers.append(Watch(settings.redis_url, list(helpers)))  # (says where one of them is stuck, should one be)
    for helper in helpers:
        helper.start()
    worker.placer = placer
    log.info(
        "worker %s serving %s jobs (the scheduler places them on %s) with CUDA_VISIBLE_DEVICES=%r",
        name,
        base_queue(len(gpus)),
        private_queue(name),
        os.environ["CUDA_VISIBLE_DEVICES"],
    )
    log.info("worker %s: %s", name, isolation)
    try:
        idle = None if idle_exit_s is None else max(1, round(idle_exit_s))
        worker.work(burst=burst, logging_level="INFO", max_idle_time=idle)
    finally:
        for helper in helpers:
            helper.stopped.set()
        redis.delete(worker_info_key(name), drain_key(name), alive_key(name))
