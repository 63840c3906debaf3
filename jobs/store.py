"""Jobs in Redis: records, the id counter, the newest-first index, and capped log/metric streams."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

from redis import Redis

from jobs.errors import NotFound
from jobs.states import Status

PREFIX = "gpudeck"
LOG_MAXLEN = 100_000
"""Log lines kept in a job's Redis stream (the job dir's log.txt keeps all of them)."""
METRICS_MAXLEN = 100_000
"""Metric points kept in a job's Redis stream."""

JSON_FIELDS = ("spec", "gpu_ids", "progress", "metrics", "result", "log_tail")
FLOAT_FIELDS = ("created_at", "started_at", "running_at", "ended_at")
INT_FIELDS = ("id", "pid", "attempt")


def job_key(job_id: int) -> str:
    """The hash of one job record."""
    return f"{PREFIX}:job:{job_id}"


def log_key(job_id: int) -> str:
    """The stream of one job's log lines; entry ids are 0-<line number>."""
    return f"{PREFIX}:job:{job_id}:log"


def metrics_key(job_id: int) -> str:
    """The stream of one job's metric points; entry ids are 0-<point number>."""
    return f"{PREFIX}:job:{job_id}:metrics"


INDEX_KEY = f"{PREFIX}:jobs"
COUNTER_KEY = f"{PREFIX}:next_id"


def iso(ts: float | None) -> str | None:
    """A Unix time as an ISO 8601 UTC string."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _decode(raw: dict[bytes, bytes]) -> dict[str, Any]:
    rec: dict[str, Any] = {}
    for k, v in raw.items():
        key, val = k.decode(), v.decode()
        if key in JSON_FIELDS:
            rec[key] = json.loads(val)
        elif key in FLOAT_FIELDS:
            rec[key] = float(val)
        elif key in INT_FIELDS:
            rec[key] = int(val)
        else:
            rec[key] = val
    return rec


def _encode(fields: dict[str, Any]) -> dict[str, str]:
    return {k: json.dumps(v) if k in JSON_FIELDS else str(v) for k, v in fields.items() if v is not None}


class JobStore:
    """Reads and writes job records; the only module that knows the Redis key layout."""

    def __init__(self, redis: Redis):
        self.redis = redis

    def next_id(self) -> int:
        """A new sequential job id, like a build number."""
        return int(self.redis.incr(COUNTER_KEY))

    def create(self, job_id: int, spec: dict[str, Any], queue: str, pipe: Any = None) -> dict[str, Any]:
        """Write a new queued record (into `pipe` when given, so it lands with the enqueue)."""
        rec = {
            "id": job_id,
            "spec": spec,
            "status": Status.QUEUED.value,
            "queue": queue,
            "attempt": 1,
            "created_at": time.time(),
        }
        target = pipe if pipe is not None else self.redis
        target.hset(job_key(job_id), mapping=_encode(rec))
        target.zadd(INDEX_KEY, {str(job_id): job_id})
        return rec

    def get(self, job_id: int) -> dict[str, Any]:
        """One job record, or NotFound."""
        raw = self.redis.hgetall(job_key(job_id))
        if not raw:
            raise NotFound(f"job {job_id} does not exist", {"id": job_id})
        return _decode(raw)

    def update(self, job_id: int, pipe: Any = None, **fields: Any) -> None:
        """Set fields of an existing record (into `pipe` when given)."""
        enc = _encode(fields)
        if enc:
            (pipe if pipe is not None else self.redis).hset(job_key(job_id), mapping=enc)

    def request_stop(self, job_id: int, reason: str) -> None:
        """Record why a running job is being stopped, before its trainer is signalled."""
        self.redis.set(f"{job_key(job_id)}:stop", reason, ex=7 * 24 * 3600)

    def stop_reason(self, job_id: int) -> str | None:
        """The reason given to request_stop, if any."""
        raw = self.redis.get(f"{job_key(job_id)}:stop")
        return raw.decode() if raw else None

    def list(self, limit: int = 50, before: int | None = None) -> list[dict[str, Any]]:
        """Newest first; `before` is an id cursor (jobs with smaller ids)."""
        hi = f"({before}" if before is not None else "+inf"
        ids = self.redis.zrevrangebyscore(INDEX_KEY, hi, "-inf", start=0, num=limit)
        pipe = self.redis.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(job_key(int(i)))
        return [_decode(raw) for raw in pipe.execute() if raw]

    # -- streams -------------------------------------------------------------------------------
    def stream_length(self, key: str) -> int:
        """The number of the last entry written to a numbered stream (0 when none)."""
        last = self.redis.xrevrange(key, count=1)
        return int(last[0][0].split(b"-")[1]) if last else 0

    def append_lines(self, job_id: int, first: int, lines: list[str], pipe: Any) -> None:
        """Queue log lines numbered from `first` (1-based) into `pipe`."""
        for n, line in enumerate(lines, start=first):
            pipe.xadd(log_key(job_id), {"l": line}, id=f"0-{n}", maxlen=LOG_MAXLEN, approximate=True)

    def append_point(self, job_id: int, n: int, point: dict[str, Any], pipe: Any) -> None:
        """Queue metric point number `n` (1-based) into `pipe`."""
        pipe.xadd(metrics_key(job_id), {"p": json.dumps(point)}, id=f"0-{n}", maxlen=METRICS_MAXLEN, approximate=True)

    def read_lines(self, job_id: int, offset: int, count: int = 10_000) -> tuple[list[str], int]:
        """Log lines after line `offset` and the offset to resume from."""
        entries = self.redis.xrange(log_key(job_id), min=f"0-{offset + 1}", count=count)
        if not entries:
            return [], offset
        lines = [fields[b"l"].decode() for _, fields in entries]
        return lines, int(entries[-1][0].split(b"-")[1])

    def read_points(self, job_id: int) -> list[dict[str, Any]]:
        """Every stored metric point, in order."""
        return [json.loads(f[b"p"]) for _, f in self.redis.xrange(metrics_key(job_id))]
