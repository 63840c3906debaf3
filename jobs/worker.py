"""`gpudeck worker`: an RQ worker pinned to its GPUs. The worker process never imports TensorFlow."""
from __future__ import annotations

import logging
import os
import socket
from typing import Any

from rq import Worker

from jobs import runner
from jobs.queues import worker_queues
from jobs.settings import Settings
from jobs.states import Reason, Status
from jobs.store import JobStore

log = logging.getLogger(__name__)


def job_id_of(rq_job_id: str | None) -> int | None:
    """The gpudeck job id inside an RQ job id (`gpudeck-42` or `gpudeck-42-2`)."""
    if not rq_job_id or not rq_job_id.startswith("gpudeck-"):
        return None
    return int(rq_job_id.split("-")[1])


class GpudeckWorker(Worker):
    """RQ's forking worker, which also stops its trainer honestly when the worker goes away."""

    def request_stop(self, signum: int, frame: Any) -> None:
        """Warm shutdown: the running trainer is told to checkpoint and stop; its job ends worker_lost."""
        job_id = job_id_of(self.get_current_job_id())
        if job_id is not None:
            self._stop_trainer(job_id, Reason.WORKER_LOST.value)
        super().request_stop(signum, frame)

    def _stop_trainer(self, job_id: int, reason: str) -> None:
        store = JobStore(self.connection)
        rec = store.get(job_id)
        if Status(rec["status"]).ended or "pid" not in rec:
            return
        log.warning("worker stopping: job %s gets SIGTERM to checkpoint and stop", job_id)
        store.request_stop(job_id, reason)
        runner.signal_group(rec["pid"], 15)


def on_horse_killed(job: Any, retpid: int, ret_val: int, rusage: Any) -> None:
    """The work-horse died under a job (cold shutdown, a crash): that job is worker_lost."""
    job_id = job_id_of(job.id)
    if job_id is None:
        return
    store = JobStore(job.connection)
    rec = store.get(job_id)
    if "pid" in rec:
        runner.signal_group(rec["pid"], 9)  # its trainer must not outlive it
    if not Status(rec["status"]).ended:
        store.update(
            job_id,
            status=Status.FAILED.value,
            reason=Reason.WORKER_LOST.value,
            message=f"the work-horse died (wait status {ret_val})",
        )


def run(settings: Settings, gpus: list[str], *, name: str | None = None, burst: bool = False) -> None:
    """Pin to `gpus` ([] = CPU), then serve the queues for that GPU count until stopped."""
    # Before anything can import TensorFlow: the trainers this worker starts inherit it.
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    host = socket.gethostname()
    label = f"gpu{'+'.join(gpus)}" if gpus else "cpu"
    name = name or f"{host}.{label}.{os.getpid()}"
    runner.CONTEXT = runner.WorkerContext(settings=settings, name=name, gpu_ids=list(gpus))
    redis = settings.redis()
    queues = worker_queues(len(gpus))
    worker = GpudeckWorker(queues, name=name, connection=redis, work_horse_killed_handler=on_horse_killed)
    log.info("worker %s serving %s with CUDA_VISIBLE_DEVICES=%r", name, ", ".join(queues), os.environ["CUDA_VISIBLE_DEVICES"])
    worker.work(burst=burst, logging_level="INFO")
