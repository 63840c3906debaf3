"""The RQ tasks: module-level and small; the work lives in jobs.runner and jobs.taskrun. Their names
(jobs.keys.RUN_JOB, RUN_TASK) are stored in Redis with every queued attempt, so they stay here.

A gpudeck worker passes its context (jobs.launch.WorkerContext) explicitly with each job (jobs.worker.GpudeckJob);
run elsewhere, a task builds one from the environment."""

from __future__ import annotations

from rq import get_current_job

from jobs import runner, taskrun
from jobs.launch import WorkerContext
from jobs.settings import Settings


def _where(context: WorkerContext | None):
    ctx = context or WorkerContext(Settings.from_env())
    current = get_current_job()
    return ctx, current.connection if current is not None else ctx.settings.redis()


def run_job(job_id: int, context: WorkerContext | None = None) -> str:
    """Run gpudeck job `job_id` in this work-horse; returns its final status."""
    ctx, redis = _where(context)
    return runner.JobRun(job_id, redis, ctx).run()


def run_task(job_id: int, index: int, gen: int, context: WorkerContext | None = None) -> str:
    """Run task `index` of placement `gen` of multi-worker job `job_id`; returns the task's or job's status."""
    ctx, redis = _where(context)
    return taskrun.TaskRun(job_id, index, gen, redis, ctx).run()
