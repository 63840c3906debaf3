"""Workers registered the way `gpudeck worker` registers itself (RQ's register_birth, gpudeck's info and alive
keys) but not started: what placement sees of an idle worker, for tests of placement and quotas."""

from __future__ import annotations

import json

from rq import Queue, Worker

from jobs import keys, lifecycle, outcome, schedule
from jobs.keys import worker_info_key as info_key
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
