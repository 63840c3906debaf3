"""Workers registered the way `gpudeck worker` registers itself (RQ's register_birth, gpudeck's info and alive
keys) but not started: what placement sees of an idle worker, for tests of placement and quotas."""

from __future__ import annotations

import json

from rq import Worker

from jobs import gang, keys
from jobs.keys import worker_info_key as info_key


def register(redis, name: str, host: str = "box", gpus: tuple[str, ...] = ()) -> str:
    w = Worker([gang.private_queue(name), *keys.worker_queues(len(gpus))], name=name, connection=redis)
    w.register_birth()
    w.set_state("idle")
    redis.set(info_key(name), json.dumps({"host": host, "gpus": list(gpus)}))
    redis.set(gang.alive_key(name), "1")
    return name
