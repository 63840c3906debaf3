"""One task of a multi-worker job in a work-horse: the attempt (jobs.run.runner.JobRun) with a task's hooks — it
publishes its host:port, waits for the other tasks' (the rendezvous), trains with TF_CONFIG, and on its end lets
gang.finish decide for the job."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from typing import Any

from redis.exceptions import RedisError

from jobs import gang, outcome, taskrecord
from jobs.keys import rq_task_id
from jobs.record import Kept
from jobs.redis_server import free_port
from jobs.run import launch
from jobs.run.hooks import Hooks, Run
from jobs.store import HEARTBEAT_TTL_S, passing
from models import tfconfig
from models.states import Reason, TaskStatus

log = logging.getLogger(__name__)


class TaskHooks(Hooks):
    """Task `index` of placement `gen` of a multi-worker job."""

    one_of_several = True

    def __init__(self, index: int, gen: int):
        self.index = index
        self.gen = gen

    def begin(self, run: Run) -> None:
        run.reports = self.index == 0
        run.spec = run.store.get(run.job_id).spec
        run.prefix = run.output.prefix = f"[{gang.label(run.spec, self.index)}] "

    def claim(self, run: Run) -> bool:
        if not gang.current(run.redis, run.job_id, self.gen) or run.store.stop_reason(run.job_id):
            return False
        placed = taskrecord.read(run.redis, run.job_id, run.spec.workers)[self.index]
        run.ctx = replace(run.ctx, gpu_ids=[str(g) for g in placed.get("gpus") or run.ctx.gpu_ids])
        taskrecord.update(run.redis, run.job_id, self.index, started_at=time.time(), worker=run.ctx.name)
        run.beat()  # (the attempt's beat, as the pump's: it also tells the work-horse's watchdog that it is not hung)
        return True

    def prepare(self, run: Run, spec: Kept) -> dict[str, str] | None:
        address = f"{gang.advertise_host(run.ctx.settings)}:{free_port()}"
        if self.index == 0:  # task 0 is PyTorch's master: a port of its own for torch.distributed's store
            taskrecord.update(run.redis, run.job_id, self.index, address=address, master_port=free_port())
        else:
            taskrecord.update(run.redis, run.job_id, self.index, address=address)
        n = spec.workers
        go = gang.arrive(run.redis, run.job_id, self.gen, n)
        give_up = time.monotonic() + 2 * gang.RENDEZVOUS_S  # the reaper puts it back in line well before
        while True:  # the last task to arrive lets everyone go at once
            try:
                if run.redis.blpop([go], timeout=1):
                    break
                if self.stop_reason(run) or time.monotonic() > give_up:
                    return None
                run.beat()
            except RedisError as exc:  # Redis away or refusing writes: the rendezvous waits for it
                if not passing(exc) or time.monotonic() > give_up:
                    raise
                time.sleep(1.0)
        placed = gang.tasks(run.redis, run.job_id, n)
        addresses = [str(t.get("address")) for t in placed]
        chief = addresses[0] if spec.chief else None
        cluster = tfconfig.cluster(list(addresses[1:] if chief else addresses), chief=chief)
        kind, i = gang.task_name(spec, self.index)
        config = tfconfig.tf_config(cluster, kind, i)
        run.preamble = [f"gpudeck: task {kind}:{i} of {n} on {run.ctx.name} at {address}; cluster {cluster}"]
        master = str(addresses[0]).rpartition(":")[0]
        torch = launch.torch_env(master, int(placed[0]["master_port"]), n, self.index)
        return {"TF_CONFIG": json.dumps(config), "GPUDECK_TASK_TYPE": kind, "GPUDECK_TASK_INDEX": str(i), **torch}

    def stand_down(self, run: Run) -> str:
        why = self.stop_reason(run) or "the rendezvous did not complete"
        message = f"stood down before training: {why}"
        taskrecord.ended(run.redis, run.job_id, self.index, TaskStatus.STOPPED, message=message)
        return gang.finish(run.redis, run.job_id) or TaskStatus.STOPPED.value

    def beat(self, run: Run) -> None:
        taskrecord.beat(run.redis, run.job_id, self.index, run.ctx.name, HEARTBEAT_TTL_S)

    def stop_reason(self, run: Run) -> str | None:
        reason = run.store.stop_reason(run.job_id) or run.stops.heard_now()
        if reason is None and not gang.current(run.redis, run.job_id, self.gen):
            return "unplaced"
        return reason

    def grace(self, run: Run, reason: str | None) -> float:
        # A peer that failed or left cannot take part in a collective checkpoint: do not wait long for one.
        if reason is None or reason == Reason.CANCELED.value:
            return run.ctx.stop_grace_s
        return min(run.ctx.stop_grace_s, 10.0)

    def started(self, run: Run, pid: int) -> None:
        taskrecord.update(run.redis, run.job_id, self.index, pid=pid, spawned_at=time.time())
        if self.index == 0:
            run.store.update(run.job_id, spawned_at=time.time(), **self.command_running(run))

    def rq_id(self, run: Run) -> str:
        return rq_task_id(run.job_id, self.gen, self.index)

    def finish(self, run: Run, returncode: int | None, oom_before: int | None) -> str:
        self.command_result(run, returncode)
        facts = self.facts(run, returncode, oom_before)
        stop = facts.stop
        status, failure = outcome.of_task(facts)
        fields: dict[str, Any] = {"log_tail": run.output.tail}
        if returncode is not None:
            fields["returncode"] = returncode
        if status == TaskStatus.STOPPED:
            fields["message"] = f"stopped ({stop})"
        if failure is not None:
            fields.update(reason=failure.reason.value if failure.reason else "", message=failure.message or "")
        taskrecord.ended(run.redis, run.job_id, self.index, TaskStatus(status), **fields)
        if failure is not None:
            run.store.request_stop(run.job_id, outcome.TASK_FAILED, only_first=True)  # the others stop
            log.warning("job %s task %s failed: %s", run.job_id, run.prefix.strip(), failure.message)
        return gang.finish(run.redis, run.job_id) or TaskStatus(status).value
