"""The RQ task: module-level and small; the work lives in jobs.runner."""

from __future__ import annotations

from jobs import runner


def run_job(job_id: int) -> str:
    """Run gpudeck job `job_id` in this work-horse; returns its final status."""
    return runner.run_current(job_id)
