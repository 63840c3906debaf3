"""A command job's project environment on its worker (jobs.run.pyenv says which one its source asks for): reused
when built, else built now in the job's sandbox by uv, its output a phase of the job's log, beating and answering
stops as a running job does."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path
from typing import Protocol

from jobs.record import Kept
from jobs.run import launch, pyenv, sandbox
from jobs.run.launch import Attempt, LogFile, Refused, WorkerContext
from jobs.run.proc import kill_marked
from jobs.run.pump import Running, pump
from jobs.store import JobStore


class NotBuilt(Exception):
    """The job's environment was not built: the build failed (the run's env_failed says how) or a stop came first."""


class Building(Running, Protocol):
    """What building needs of the attempt (jobs.run.runner.JobRun)."""

    ctx: WorkerContext
    store: JobStore
    owner: str | None
    attempt: int
    job_dir: Path
    env_failed: str | None
    env_lock: int | None

    def say(self, log_file: LogFile, *lines: str) -> None: ...
    def spawn(self, how: launch.Launch, fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]: ...


def ready(run: Building, spec: Kept, log_file: LogFile) -> Path | None:
    """The project's own environment (jobs.run.pyenv) when its source asks for one: reused, or built now in the
    job's sandbox, its output a phase of the job's log. None: it runs with the worker's Python (or the
    registered env_name). NotBuilt: the build failed (`run.env_failed` says how) or a stop came first."""
    if spec.env_name:
        return None
    launch.may_run_unsandboxed(run.ctx, run.owner)
    src = launch.source_copy(run.ctx, spec, run.job_dir)
    try:
        need = pyenv.need(spec, src, run.owner)
    except pyenv.Unusable as exc:
        raise Refused(str(exc)) from None
    if need is None:
        return None
    s = run.ctx.settings
    path = pyenv.folder(s, need)
    run.env_lock = pyenv.open_lock(s, need)

    def waiting() -> bool:
        run.beat()
        return run.stop_reason() is None

    if not pyenv.acquire(run.env_lock, False, waiting):
        raise NotBuilt
    if not pyenv.is_ready(path):
        fcntl.flock(run.env_lock, fcntl.LOCK_UN)
        if not pyenv.acquire(run.env_lock, True, waiting):
            raise NotBuilt
        if not pyenv.is_ready(path):  # (else another job built it while this one waited)
            if not _build(run, spec, need, path, log_file):
                raise NotBuilt
        fcntl.flock(run.env_lock, fcntl.LOCK_SH)  # (held while the job runs: never removed under it)
    else:
        run.say(log_file, f"gpudeck: reusing environment {need.digest[:12]} ({need.packages} packages, {need.kind})")
    pyenv.used(path, run.job_id)
    return path


def _build(run: Building, spec: Kept, need: pyenv.Need, path: Path, log_file: LogFile) -> bool:
    """Build the environment at `path` in the job's sandbox (only `path` writable besides the job dir), its
    output in the log, beating and answering stops as a running job does; mark it ready when it succeeded."""
    try:
        argv = pyenv.build_argv(run.ctx.settings, need, path)
    except pyenv.Unusable as exc:  # (no uv here: gpudeck[envs])
        raise Refused(str(exc)) from None
    pyenv.start_build(path)
    run.store.update(run.job_id, message=f"building environment ({need.packages} packages)")
    env = launch.base_env(Attempt(run.job_id, run.attempt, run.run_id, run.job_dir), run.ctx.settings, True)
    env.update(launch.own_code_env())
    how = launch.Launch(argv, run.job_dir / "src", env)
    lifeline = os.pipe()  # (its own: the job's is for the job)
    how = launch.sandboxed(run.ctx, how, run.job_dir, pyenv.index_paths(), lifeline[0], writable=[path])
    events_r, events_w = os.pipe()
    os.close(events_w)  # (a build sends no events)
    proc = run.spawn(how)
    how.close_files()
    if not how.sandboxed:
        os.close(lifeline[0])
    pump(run, proc, os.fdopen(events_r, "rb"), log_file, spec.timeout)
    returncode = proc.wait()
    os.close(lifeline[1])
    kill_marked(launch.RUN_ID_ENV, run.run_id)
    if returncode != 0 or run.stop_reason():
        if not run.stop_reason():
            run.env_failed = f"the project's environment could not be built (uv exited with status {returncode})"
        shutil.rmtree(path, ignore_errors=True)
        return False
    if os.geteuid() == 0:  # (built as the job's user: the service's from now on, unchangeable by any job)
        sandbox.take_back(path)
    pyenv.mark_ready(path, need, run.job_id, run.owner)
    removed = pyenv.prune(run.ctx.settings, keep=need.digest, owner=run.owner)
    if removed:
        run.say(log_file, f"gpudeck: removed {len(removed)} least recently used environments (GPUDECK_ENV_MAX_BYTES)")
    run.store.update(run.job_id, message=None)
    return True
