"""Runs written into Redis as a worker writes them (running, log lines, metric points, then the end), with fixed
times: what a test of what clients show of ended jobs needs, without training anything."""

from __future__ import annotations

from jobs.store import JobStore
from models.states import Status

T0 = 1_795_000_000.0
"""When the written runs started (fixed: screens show elapsed times)."""


def ran(redis, job_id: int, points: list[dict], log: list[str], end: dict, **running) -> None:
    """Write a run of queued job `job_id` into Redis as a worker does: running (`running`: more record fields),
    its log lines and metric points, then how it ended (`end`: status, result, …); started at T0, ended 95 s later."""
    store = JobStore(redis)
    running = {"status": Status.RUNNING.value, "worker": "gpu-box.gpu0+1.4242", "gpu_ids": ["0", "1"], **running}
    store.transition(job_id, ("queued",), started_at=T0, running_at=T0 + 5, **running)
    with redis.pipeline() as pipe:
        store.append_lines(job_id, log, pipe)
        for n, point in enumerate(points, 1):
            store.append_point(job_id, n, point, pipe)
        pipe.execute()
    last = [p for p in points if "loss" in p][-1] if points else None
    progress = {"step": last["step"] if last else 0, "total_steps": 400, "steps_per_epoch": 100}
    store.transition(job_id, ("running",), ended_at=T0 + 95, progress=progress, metrics=last, **end)
