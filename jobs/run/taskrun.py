"""One task of a multi-worker job in a work-horse: JobRun with the hooks of a task — it publishes its host:port,
waits for the other tasks' (the rendezvous), trains with TF_CONFIG, and on its end lets gang.finish decide for
the job."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from jobs import gang, outcome, taskrecord
from jobs.keys import rq_task_id
from jobs.redis_server import free_port
from jobs.run import launch
from jobs.run.launch import WorkerContext
from jobs.run.runner import JobRun
from jobs.store import HEARTBEAT_TTL_S, passing
from models import tfconfig
from models.states import Reason, TaskStatus

log = logging.getLogger(__name__)


class TaskRun(JobRun):
    """Task `index` of placement `gen` of a multi-worker job."""

    one_of_several = True

    def __init__(self, job_id: int, index: int, gen: int, redis: Redis, ctx: WorkerContext):
        super().__init__(job_id, redis, ctx, gen)
        self.gen: int = gen  # (a task is always of one placement)
        self.index = index
        self.reports = index == 0
        self.spec = self.store.get(job_id)["spec"]
        self.prefix = self.output.prefix = f"[{gang.label(self.spec, index)}] "

    def claim(self) -> bool:
        if not gang.current(self.redis, self.job_id, self.gen) or self.store.stop_reason(self.job_id):
            return False
        placed = taskrecord.read(self.redis, self.job_id, self.spec["workers"])[self.index]
        self.ctx = replace(self.ctx, gpu_ids=[str(g) for g in placed.get("gpus") or self.ctx.gpu_ids])
        taskrecord.update(self.redis, self.job_id, self.index, started_at=time.time(), worker=self.ctx.name)
        self.beat()
        return True

    def prepare(self, spec: dict[str, Any]) -> dict[str, str] | None:
        address = f"{gang.advertise_host(self.ctx.settings)}:{free_port()}"
        if self.index == 0:  # task 0 is PyTorch's master: a port of its own for torch.distributed's store
            taskrecord.update(self.redis, self.job_id, self.index, address=address, master_port=free_port())
        else:
            taskrecord.update(self.redis, self.job_id, self.index, address=address)
        n = spec["workers"]
        go = gang.arrive(self.redis, self.job_id, self.gen, n)
        give_up = time.monotonic() + 2 * gang.RENDEZVOUS_S  # the reaper puts it back in line well before
        while True:  # the last task to arrive lets everyone go at once
            try:
                if self.redis.blpop([go], timeout=1):
                    break
                if self.stop_reason() or time.monotonic() > give_up:
                    return None
                self.beat()
            except RedisError as exc:  # Redis away or refusing writes: the rendezvous waits for it
                if not passing(exc) or time.monotonic() > give_up:
                    raise
                time.sleep(1.0)
        placed = gang.tasks(self.redis, self.job_id, n)
        addresses = [str(t.get("address")) for t in placed]
        chief = addresses[0] if spec.get("chief") else None
        cluster = tfconfig.cluster(list(addresses[1:] if chief else addresses), chief=chief)
        kind, i = gang.task_name(spec, self.index)
        config = tfconfig.tf_config(cluster, kind, i)
        self.preamble = [f"gpudeck: task {kind}:{i} of {n} on {self.ctx.name} at {address}; cluster {cluster}"]
        master = str(addresses[0]).rpartition(":")[0]
        torch = launch.torch_env(master, int(placed[0]["master_port"]), n, self.index)
        return {"TF_CONFIG": json.dumps(config), "GPUDECK_TASK_TYPE": kind, "GPUDECK_TASK_INDEX": str(i), **torch}

    def stand_down(self) -> str:
        why = self.stop_reason() or "the rendezvous did not complete"
        message = f"stood down before training: {why}"
        taskrecord.ended(self.redis, self.job_id, self.index, TaskStatus.STOPPED, message=message)
        return gang.finish(self.redis, self.job_id) or TaskStatus.STOPPED.value

    def beat(self) -> None:
        taskrecord.beat(self.redis, self.job_id, self.index, self.ctx.name, HEARTBEAT_TTL_S)

    def stop_reason(self) -> str | None:
        reason = self.store.stop_reason(self.job_id) or self.stops.heard_now()
        if reason is None and not gang.current(self.redis, self.job_id, self.gen):
            return "unplaced"
        return reason

    def grace(self, reason: str | None) -> float:
        # A peer that failed or left cannot take part in a collective checkpoint: do not wait long for one.
        if reason is None or reason == Reason.CANCELED.value:
            return self.ctx.stop_grace_s
        return min(self.ctx.stop_grace_s, 10.0)

    def started(self, pid: int) -> None:
        taskrecord.update(self.redis, self.job_id, self.index, pid=pid, spawned_at=time.time())
        if self.index == 0:
            self.store.update(self.job_id, spawned_at=time.time(), **self._command_running())

    def _rq_id(self) -> str:
        return rq_task_id(self.job_id, self.gen, self.index)

    def finish(self, returncode: int | None, oom_before: int | None) -> str:
        self._command_result(returncode)
        facts = self.facts(returncode, oom_before)
        stop = facts.stop
        status, failure = outcome.of_task(facts)
        fields: dict[str, Any] = {"log_tail": self.output.tail}
        if returncode is not None:
            fields["returncode"] = returncode
        if status == TaskStatus.STOPPED:
            fields["message"] = f"stopped ({stop})"
        if failure is not None:
            fields.update(reason=failure.reason.value if failure.reason else "", message=failure.message or "")
        taskrecord.ended(self.redis, self.job_id, self.index, TaskStatus(status), **fields)
        if failure is not None:
            self.store.request_stop(self.job_id, outcome.TASK_FAILED, only_first=True)  # the others stop
            log.warning("job %s task %s failed: %s", self.job_id, self.prefix.strip(), failure.message)
        return gang.finish(self.redis, self.job_id) or TaskStatus(status).value
