"""The RQ tasks: module-level and small; the work lives in jobs.runner. Their names (jobs.keys.RUN_JOB,
RUN_TASK) are stored in Redis with every queued attempt, so they stay here."""

from __future__ import annotations

from jobs import runner


def run_job(job_id: int) -> str:
    """Run gpudeck job `job_id` in this work-horse; returns its final status."""
    return runner.run_current(job_id)


def run_task(job_id: int, index: int, gen: int) -> str:
    """Run task `index` of placement `gen` of multi-worker job `job_id`; returns the task's or job's status."""
    return runner.run_current_task(job_id, index, gen)
