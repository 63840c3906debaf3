"""The RQ tasks: module-level and small; the work lives in jobs.run.runner (with a task's or a session's hooks:
jobs.run.taskrun, jobs.run.sessionrun). Their names (jobs.keys.RUN_JOB, RUN_TASK) are stored in Redis with every
queued attempt, so they stay here.

A gpudeck worker passes its context (jobs.run.launch.WorkerContext) explicitly with each job (jobs.worker.GpudeckJob);
run elsewhere, a task builds one from the environment."""

from __future__ import annotations

import time

from rq import get_current_job

from jobs import gang
from jobs.errors import NotFound
from jobs.run import runner, sessionrun, taskrun
from jobs.run.launch import WorkerContext
from jobs.settings import Settings
from jobs.store import JobStore


def _where(context: WorkerContext | None):
    ctx = context or WorkerContext(Settings.from_env())
    current = get_current_job()
    return ctx, current.connection if current is not None else ctx.settings.redis()


def run_job(job_id: int, gen: int | None = None, context: WorkerContext | None = None) -> str:
    """Run placement `gen` of gpudeck job `job_id` in this work-horse; returns its final status."""
    ctx, redis = _where(context)
    try:
        session = JobStore(redis).get(job_id).spec.is_session
    except NotFound:  # (deleted meanwhile: the run says so as ever)
        session = False
    hooks = sessionrun.SessionHooks() if session else None
    return runner.JobRun(job_id, redis, ctx, gen, hooks).run()


def run_task(job_id: int, index: int, gen: int, context: WorkerContext | None = None) -> str:
    """Run task `index` of placement `gen` of multi-worker job `job_id`; returns the task's or job's status."""
    ctx, redis = _where(context)
    return runner.JobRun(job_id, redis, ctx, gen, taskrun.TaskHooks(index, gen)).run()


HOLD_POLL_S = 0.5
"""How often a held worker looks whether the job it holds for has ended."""


def hold(job_id: int, gen: int, context: WorkerContext | None = None) -> str:
    """Keep this worker (its GPUs) for placement `gen` of job `job_id`, which another worker of its place runs
    with every GPU of the place, until that placement ends."""
    _, redis = _where(context)
    while gang.current(redis, job_id, gen):  # (placement `gen` still holds its workers)
        time.sleep(HOLD_POLL_S)
    return "released"
