"""The record of one task of a multi-worker job (`gpudeck:job:<id>:task:<k>`, a hash) and its heartbeat: the one
module that writes and reads them."""

from __future__ import annotations

import json
import time
from enum import Enum
from typing import Any

from redis import Redis

from jobs.keys import task_beat_key, task_key
from models.states import TASK_ENDED, TaskStatus  # noqa: F401 (the engine takes them from here)

INTS = ("gen", "pid", "returncode")
FLOATS = ("started_at", "spawned_at", "exited_at")
JSON = ("gpus", "log_tail")


def _encode(fields: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in fields.items():
        if isinstance(v, Enum):
            v = v.value
        out[k] = json.dumps(v) if k in JSON else v
    return out


def place(pipe: Any, job_id: int, index: int, gen: int, worker: str, host: str, gpus: list[str]) -> None:
    """A new placement's task `index` on `worker`: the old record and heartbeat go (into `pipe`)."""
    pipe.delete(task_key(job_id, index), task_beat_key(job_id, index))
    pipe.hset(task_key(job_id, index), mapping=_encode({"worker": worker, "host": host, "gpus": gpus, "gen": gen}))


def update(redis: Any, job_id: int, index: int, **fields: Any) -> None:
    """Set fields of task `index` (statuses as TaskStatus or their strings; gpus and log_tail as lists)."""
    redis.hset(task_key(job_id, index), mapping=_encode(fields))


def ended(redis: Redis, job_id: int, index: int, status: TaskStatus, **fields: Any) -> None:
    """Task `index` ended with `status` (and why, in `fields`); its heartbeat goes."""
    update(redis, job_id, index, status=status, exited_at=time.time(), **fields)
    redis.delete(task_beat_key(job_id, index))


def beat(redis: Redis, job_id: int, index: int, worker: str, ttl: int) -> None:
    redis.set(task_beat_key(job_id, index), worker, ex=ttl)


def pid(redis: Redis, job_id: int, index: int) -> int | None:
    """The pid of task `index`'s process (None before it started)."""
    raw = redis.hget(task_key(job_id, index), "pid")
    return int(raw) if raw else None


def read(redis: Redis, job_id: int, n: int) -> list[dict[str, Any]]:
    """The job's `n` task records, with `index` and `alive` (heartbeat present)."""
    pipe = redis.pipeline(transaction=False)
    for i in range(n):
        pipe.hgetall(task_key(job_id, i))
        pipe.exists(task_beat_key(job_id, i))
    raw = pipe.execute()
    out = []
    for i in range(n):
        t: dict[str, Any] = {k.decode(): v.decode() for k, v in raw[2 * i].items()}
        for k in INTS:
            if k in t:
                t[k] = int(t[k])
        for k in FLOATS:
            if k in t:
                t[k] = float(t[k])
        for k in JSON:
            if k in t:
                t[k] = json.loads(t[k])
        t["index"], t["alive"] = i, bool(raw[2 * i + 1])
        out.append(t)
    return out


def shown_status(t: dict[str, Any]) -> str:
    """A task's status as a client sees it: its own once it ended, else running while it beats, else placed."""
    return t.get("status") or (TaskStatus.RUNNING.value if t["alive"] else TaskStatus.PLACED.value)
