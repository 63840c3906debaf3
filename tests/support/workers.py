"""Workers registered the way `gpudeck worker` registers itself (RQ's register_birth, gpudeck's info and alive
keys) but not started: what placement sees of an idle worker, for tests of placement and quotas; and the jobs the
scheduler's tests put on them (`submit`, then `running` or `succeed` as their work-horses would)."""

from __future__ import annotations

import json
import time

from rq import Queue, Worker

from jobs import control, keys, lifecycle, outcome, schedule
from jobs.keys import worker_info_key as info_key
from jobs.store import JobStore
from tests.support.policy import DEFAULTS


def register(redis, name: str, host: str = "box", gpus: tuple[str, ...] = (), facts: dict | None = None) -> str:
    """`facts`: what the worker says of its host and Python (jobs.worker.host_facts; none: an older worker)."""
    w = Worker([keys.private_queue(name)], name=name, connection=redis)
    w.register_birth()
    w.set_state("idle")
    redis.set(info_key(name), json.dumps({"host": host, "gpus": list(gpus), **({"facts": facts} if facts else {})}))
    redis.set(keys.alive_key(name), "1")
    return name


def box(redis, gpus: int = 4, host: str = "box") -> list[str]:
    """`gpudeck up` on a host with `gpus` GPUs: one worker per GPU."""
    return [register(redis, f"{host}.gpu{i}", host=host, gpus=(str(i),)) for i in range(gpus)]


def rec(redis, job_id: int) -> dict:
    from jobs.store import JobStore

    return JobStore(redis).get(job_id)


def taken(redis, job_id: int) -> None:
    """The workers of the job's place took what the scheduler handed them (their private queues are empty)."""
    for name in rec(redis, job_id).get("slots") or []:
        q = Queue(keys.private_queue(name), connection=redis)
        for rq_id in q.get_job_ids():
            if keys.job_id_of(rq_id) == job_id:
                q.remove(rq_id)


def placed_on(redis, names) -> dict[str, list[str]]:
    """RQ ids waiting on each worker's private queue (what the scheduler handed it)."""
    return {n: Queue(keys.private_queue(n), connection=redis).get_job_ids() for n in names}


def take_all(redis, worker: str) -> list[int]:
    """The gpudeck job ids the scheduler hands `worker`, in order, each ended (succeeded) as soon as it is handed
    out, until it hands out no more: the order a lone worker runs the line in."""
    taken: list[int] = []
    while True:
        schedule.place(redis, DEFAULTS)
        ids = placed_on(redis, [worker])[worker]
        if not ids:
            return taken
        for rq_id in ids:
            Queue(keys.private_queue(worker), connection=redis).remove(rq_id)
            job_id = keys.job_id_of(rq_id)
            taken.append(job_id)
            assert lifecycle.end(redis, job_id, outcome.SUCCEEDED)


JOB = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}, "gpus": 1}


def submit(redis, settings=None, owner=None, **spec) -> int:
    """A 1-GPU lenet job (JOB, `spec` over it) submitted as `owner` (its submission runs a round)."""
    return control.submit(redis, {**JOB, **spec}, settings or DEFAULTS, extra={"owner": owner} if owner else None)[0][
        "id"
    ]


def succeed(redis, job_id: int) -> None:
    """The placed job ran and succeeded."""
    taken(redis, job_id)
    assert lifecycle.end(redis, job_id, outcome.SUCCEEDED)


def running(redis, job_id: int, ago: float = 3600.0) -> None:
    """The placed job's work-horse started it `ago` seconds ago."""
    taken(redis, job_id)
    t = time.time() - ago
    assert JobStore(redis).transition(job_id, ("starting",), status="running", started_at=t, running_at=t)


def booked(redis, owner, created, waited, hours, part=1.0, idle=False, status="succeeded", gpus=1, project=None):
    """A job of `owner` (in `project`) submitted at `created`, started `waited` s later, that held `gpus` GPUs (each
    its `part`) for `hours`, booked by the GPU sampler (jobs.usage.account) an hour at a time, then ended `status`."""
    from jobs import usage

    store = JobStore(redis)
    job_id = store.next_id()
    spec = {**JOB, "gpus": gpus, **({"project": project} if project else {})}
    store.create(job_id, spec, "gpus-1", extra={"owner": owner, "created_at": created})
    started = created + waited
    store.update(job_id, status="running", started_at=started, first_started_at=started, gpu_fraction=part)
    util = [{"index": str(i), "utilization": 0 if idle else 90} for i in range(gpus)]
    for _ in range(int(hours)):
        usage.account(redis, "box", {job_id: (owner, [str(i) for i in range(gpus)], part)}, util, 3600.0)
    assert store.transition(job_id, ("running",), status=status, ended_at=started + hours * 3600)
    return job_id
