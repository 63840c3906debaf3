"""Jobs in Redis: records, the id counter, the newest-first index, and capped log/metric streams."""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jobs.errors import NotFound
from jobs.keys import (
    ACTIVE_KEY,
    AFTER_CHECK_KEY,
    COUNTER_KEY,
    ENDED_KEY,
    INDEX_KEY,
    dependants_key,
    heartbeat_key,
    job_key,
    live_key,
    log_key,
    metrics_key,
    stop_channel,
    stop_key,
)
from jobs.record import FLOAT, INT, JSON, Job
from models.common import iso  # noqa: F401 (re-exported: its old home)
from models.states import ENDED, Status

LOG_MAXLEN = 100_000
"""Log lines kept in a job's Redis stream (the job dir's log.txt keeps all of them)."""
LIVE_TTL_S = 30
"""How long the line a job is drawing stays shown after its last update (a job killed mid-bar leaves none)."""
METRICS_MAXLEN = 100_000
"""Metric points kept in a job's Redis stream."""

JSON_FIELDS = Job.stored_as(JSON)
FLOAT_FIELDS = Job.stored_as(FLOAT)
INT_FIELDS = Job.stored_as(INT)
"""The codec of a record's hash, from the record's declaration (jobs.record.Job): a field not named is text."""
HEARTBEAT_TTL_S = 15
"""A running job's heartbeat key lives this long; the work-horse refreshes it every few seconds."""

log = logging.getLogger(__name__)

OUTAGE = (RedisConnectionError, RedisTimeoutError)
"""What a Redis that is away (restarting, a network blip) raises, as opposed to one that refused a command."""


def cannot_write(exc: BaseException) -> bool:
    """Redis refuses writes because it cannot save to its disk (its last snapshot failed: MISCONF; its append-only
    file cannot be written: `MISCONF Errors writing to the AOF file`), also when the refusal comes from inside a
    pipeline (redis-py then says `Command # N (…) of pipeline caused error: …`). It takes writes again by itself
    once it can save."""
    text = str(exc)
    return isinstance(exc, RedisError) and ("MISCONF" in text or "Errors writing to the AOF file" in text)


def write_refusal(redis: Redis) -> str | None:
    """Why Redis refuses writes now (its last save to disk failed: the AOF's write or an RDB snapshot), or None."""
    info = redis.info("persistence")
    if info.get("aof_enabled") and info.get("aof_last_write_status") == "err":
        return "its append-only file could not be written (is the disk full?)"
    if info.get("rdb_last_bgsave_status") == "err":
        return "its last snapshot could not be saved (is the disk full?)"
    return None


def passing(exc: BaseException) -> bool:
    """A Redis trouble that passes by itself and is ridden out: away (OUTAGE) or unable to write for now."""
    return isinstance(exc, OUTAGE) or cannot_write(exc)


OUTAGE_LIMIT_S = 600.0
"""How long a work-horse waits for Redis to come back to record how its job ended, before it gives up."""
T = TypeVar("T")


def through_outage(fn: Callable[[], T], what: str, limit_s: float = OUTAGE_LIMIT_S) -> T:
    """fn(), called again every second while Redis is unreachable or cannot write (passing), for up to `limit_s`;
    logs the wait once."""
    deadline = time.monotonic() + limit_s
    waited = False
    while True:
        try:
            out = fn()
        except RedisError as exc:
            if not passing(exc) or time.monotonic() > deadline:
                raise
            if not waited:
                log.warning("redis unreachable (%s): %s waits for it", exc, what)
                waited = True
            time.sleep(1.0)
            continue
        if waited:
            log.warning("redis is back: %s done", what)
        return out


def redis_uptime_s(redis: Redis) -> float:
    """How long this Redis server has been up (a restarted one has dropped the keys that expired meanwhile)."""
    return float(redis.info("server")["uptime_in_seconds"])


APPEND_LINES = """
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local n = 0
if #last > 0 then n = tonumber(string.sub(last[1][1], 3)) end
for i = 2, #ARGV do
  n = n + 1
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '0-' .. n, 'l', ARGV[i])
end
return n
"""
"""Appends log lines as entries 0-<line number>, numbering after the stream's last entry, atomically."""


def _append_script(redis: Redis) -> Any:
    return redis.register_script(APPEND_LINES)


def decode(raw: dict[bytes, bytes]) -> Job:
    """A record as Redis keeps it (its hash's fields and values, bytes), typed."""
    rec = Job()
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
    """Reads and writes job records and their streams (keys from jobs.keys)."""

    def __init__(self, redis: Redis):
        self.redis = redis

    def next_id(self) -> int:
        """A new sequential job id, like a build number."""
        return int(self.redis.incr(COUNTER_KEY))

    def create(
        self,
        job_id: int,
        spec: dict[str, Any],
        queue: str,
        pipe: Any = None,
        source: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Job:
        """Write a new queued record (into `pipe` when given, so it lands with the enqueue); `source`: a command
        job's pinned source snapshot (ref, sha256, files, size, git); `extra`: more fields (`resumes`)."""
        rec = Job(
            id=job_id,
            spec=spec,
            status=Status.QUEUED.value,
            queue=queue,
            attempt=1,
            created_at=time.time(),
        )
        if source is not None:
            rec["source"] = source
        rec.update(extra or {})
        target = pipe if pipe is not None else self.redis
        target.hset(job_key(job_id), mapping=_encode(rec))
        target.zadd(INDEX_KEY, {str(job_id): job_id})
        return rec

    def get(self, job_id: int) -> Job:
        """One job record (typed: Job), or NotFound."""
        raw = self.redis.hgetall(job_key(job_id))
        if not raw:
            raise NotFound(f"job {job_id} does not exist", {"id": job_id})
        return decode(raw)

    def get_many(self, job_ids: list[int]) -> list[Job | None]:
        """Records in one round trip (None for one that does not exist)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hgetall(job_key(job_id))
            return [decode(raw) if raw else None for raw in pipe.execute()]

    def exists(self, job_id: int) -> bool:
        """Whether job `job_id` has a record."""
        return bool(self.redis.exists(job_key(job_id)))

    def update(self, job_id: int, pipe: Any = None, **fields: Any) -> None:
        """Set fields of an existing record (into `pipe` when given); a field given as None is removed."""
        self._write(pipe if pipe is not None else self.redis, job_id, fields)

    @staticmethod
    def _write(target: Any, job_id: int, fields: dict[str, Any]) -> None:
        enc = _encode(fields)
        if enc:
            target.hset(job_key(job_id), mapping=enc)
        gone = [k for k, v in fields.items() if v is None]
        if gone:
            target.hdel(job_key(job_id), *gone)

    def transition(self, job_id: int, allowed: tuple[str, ...], of_attempt: int | None = None, **fields: Any) -> bool:
        """Set fields only if the job's status is one of `allowed` (and, given `of_attempt`, it is still that
        attempt: a work-horse the reaper gave up on while Redis could not take its heartbeats must not end the
        next attempt), atomically; False if it was not."""
        key = job_key(job_id)
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    status, attempt = pipe.hmget(key, ["status", "attempt"])
                    if status is None or status.decode() not in allowed:
                        pipe.unwatch()
                        return False
                    if of_attempt is not None and int(attempt or 1) != of_attempt:
                        pipe.unwatch()
                        return False
                    pipe.multi()
                    self._write(pipe, job_id, fields)
                    if fields.get("status") in (Status.STARTING.value, Status.RUNNING.value):
                        pipe.sadd(ACTIVE_KEY, job_id)
                    elif "status" in fields:
                        pipe.srem(ACTIVE_KEY, job_id)
                    if fields.get("status") in ENDED:  # the jobs that wait for this one: looked at next round
                        pipe.sunionstore(AFTER_CHECK_KEY, [AFTER_CHECK_KEY, dependants_key(job_id)])
                        pipe.delete(dependants_key(job_id))
                        pipe.zadd(ENDED_KEY, {str(job_id): float(fields.get("ended_at") or time.time())})
                    pipe.execute()
                    return True
                except WatchError:
                    continue

    def active_ids(self) -> list[int]:
        """Jobs a worker has taken and not yet ended."""
        return sorted(int(i) for i in self.redis.smembers(ACTIVE_KEY))

    def active(self) -> list[Job]:
        """The records of the jobs a worker holds (starting or running), in one round trip."""
        return [rec for rec in self.get_many(self.active_ids()) if rec is not None]

    def beat(self, job_id: int, worker: str) -> None:
        """Say the work-horse of this job is alive for the next HEARTBEAT_TTL_S seconds."""
        self.redis.set(heartbeat_key(job_id), worker, ex=HEARTBEAT_TTL_S)

    def alive(self, job_id: int) -> bool:
        """Whether the job's work-horse has beaten within HEARTBEAT_TTL_S."""
        return bool(self.redis.exists(heartbeat_key(job_id)))

    def request_stop(self, job_id: int, reason: str, only_first: bool = False) -> None:
        """Record why a running job is being stopped, before its trainer is signalled (`only_first`: unless
        a reason is recorded already)."""
        self.redis.set(stop_key(job_id), reason, ex=7 * 24 * 3600, nx=only_first)

    def announce_stop(self, job_id: int, reason: str) -> int:
        """Tell the job's work-horses to stop now, unrecorded (Redis cannot write: PUBLISH still goes); returns
        how many heard it."""
        return int(self.redis.publish(stop_channel(job_id), reason))

    def clear_stop(self, job_id: int) -> None:
        """Forget a stop request (a re-queued attempt starts clean)."""
        self.redis.delete(stop_key(job_id))

    def stop_reason(self, job_id: int) -> str | None:
        """The reason given to request_stop, if any."""
        raw = self.redis.get(stop_key(job_id))
        return raw.decode() if raw else None

    def list(self, limit: int = 50, before: int | None = None, where: Any = None) -> list[Job]:
        """Up to `limit` records, newest first, with ids below the cursor `before`, for which `where(rec)` holds."""
        found: list[Job] = []
        chunk = limit if where is None else 2 * limit
        while len(found) < limit:
            hi = f"({before}" if before is not None else "+inf"
            ids = self.redis.zrevrangebyscore(INDEX_KEY, hi, "-inf", start=0, num=chunk)
            if not ids:
                break
            pipe = self.redis.pipeline(transaction=False)
            for i in ids:
                pipe.hgetall(job_key(int(i)))
            recs = [decode(raw) for raw in pipe.execute() if raw]
            found.extend(r for r in recs if where is None or where(r))
            before = int(ids[-1])
            if len(ids) < chunk:
                break
            chunk = min(2 * chunk, 5000)  # a rare match: read further ahead each round
        return found[:limit]

    def count(self) -> int:
        """How many jobs the store holds."""
        return int(self.redis.zcard(INDEX_KEY))

    def count_by_status(self) -> dict[str, int]:
        """How many jobs are in each status (every record is read: meant for /metrics, not for hot paths)."""
        counts = {s.value: 0 for s in Status}
        ids = self.redis.zrange(INDEX_KEY, 0, -1)
        for start in range(0, len(ids), 5000):
            pipe = self.redis.pipeline(transaction=False)
            for i in ids[start : start + 5000]:
                pipe.hget(job_key(int(i)), "status")
            for status in pipe.execute():
                if status is not None:
                    counts[status.decode()] = counts.get(status.decode(), 0) + 1
        return counts

    # -- streams -------------------------------------------------------------------------------
    def stream_length(self, key: str) -> int:
        """The number of the last entry written to a numbered stream (0 when none)."""
        last = self.redis.xrevrange(key, count=1)
        return int(last[0][0].split(b"-")[1]) if last else 0

    def last_point(self, job_id: int) -> dict[str, Any] | None:
        """The newest metric point the job's stream holds, or None."""
        last = self.redis.xrevrange(metrics_key(job_id), count=1)
        return json.loads(last[0][1][b"p"]) if last else None

    def append_lines(self, job_id: int, lines: builtins.list[str], pipe: Any) -> None:
        """Queue log lines into `pipe`, numbered on from the stream's last line inside Redis, so the tasks of
        a multi-worker job can write one log between them."""
        if lines:
            _append_script(self.redis)(keys=[log_key(job_id)], args=[LOG_MAXLEN, *lines], client=pipe)

    def set_live(self, job_id: int, line: str | None, pipe: Any) -> None:
        """Queue into `pipe` the line the job is drawing now (None: it has ended, with its newline)."""
        if line is None:
            pipe.delete(live_key(job_id))
        else:
            pipe.set(live_key(job_id), line, ex=LIVE_TTL_S)

    def live_line(self, job_id: int) -> str | None:
        """The line a job is drawing now, as a terminal shows it (a progress bar before its newline), or None."""
        line = self.redis.get(live_key(job_id))
        return None if line is None else line.decode("utf-8", "replace")

    def append_point(self, job_id: int, n: int, point: dict[str, Any], pipe: Any) -> None:
        """Queue metric point number `n` (1-based) into `pipe`."""
        pipe.xadd(
            metrics_key(job_id),
            {"p": json.dumps(point, separators=(",", ":"))},
            id=f"0-{n}",
            maxlen=METRICS_MAXLEN,
            approximate=True,
        )

    def read_lines(self, job_id: int, offset: int, count: int = 10_000) -> tuple[builtins.list[str], int]:
        """Log lines after line `offset` and the offset to resume from."""
        entries = self.redis.xrange(log_key(job_id), min=f"0-{offset + 1}", count=count)
        if not entries:
            return [], offset
        lines = [fields[b"l"].decode() for _, fields in entries]
        return lines, int(entries[-1][0].split(b"-")[1])

    def wait_lines(self, job_id: int, offset: int, block_ms: int) -> None:
        """Block until a log line after `offset` exists or `block_ms` passes."""
        self.redis.xread({log_key(job_id): f"0-{offset}"}, count=1, block=block_ms)

    def read_points(self, job_id: int) -> builtins.list[dict[str, Any]]:
        """Every stored metric point, in order."""
        return [json.loads(f[b"p"]) for _, f in self.redis.xrange(metrics_key(job_id))]

    def read_points_raw(self, job_id: int, after: int = 0) -> tuple[int | None, builtins.list[tuple[int, bytes]]]:
        """(number of the oldest point still stored, [(number, point as JSON)] after point `after`): what a
        reader that keeps the points it has seen needs (an oldest number it did not see means a trim)."""
        key = metrics_key(job_id)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.xrange(key, count=1)
            pipe.xrange(key, min=f"0-{after + 1}")
            first, entries = pipe.execute()
        oldest = int(first[0][0].split(b"-")[1]) if first else None
        return oldest, [(int(eid.split(b"-")[1]), f[b"p"]) for eid, f in entries]


class StopListener:
    """The stops an attempt is told of on its stop channel (jobs.control publishes there what Redis cannot record,
    a cancel while its disk is full): `heard` is kept until the attempt's end is recorded."""

    def __init__(self, redis: Redis, job_id: int):
        self.redis, self.job_id = redis, job_id
        self.heard: str | None = None
        self._sub: Any = None

    @contextlib.contextmanager
    def listening(self) -> Iterator[StopListener]:
        try:
            self._sub = self.redis.pubsub(ignore_subscribe_messages=True)
            self._sub.subscribe(stop_channel(self.job_id))
        except RedisError as exc:
            if not passing(exc):
                raise
            self._sub = None  # away now: a stop is recorded once it is back, as ever
        try:
            yield self
        finally:
            if self._sub is not None:
                self._sub.close()
                self._sub = None

    def heard_now(self) -> str | None:
        """A stop told of but not recorded (or one this attempt asked for itself while Redis could not record it)."""
        while self.heard is None and self._sub is not None:
            message = self._sub.get_message(timeout=0)
            if message is None:
                break
            if message.get("type") == "message":
                self.heard = message["data"].decode()
                log.warning("job %s: stop (%s) heard while Redis cannot record it", self.job_id, self.heard)
        return self.heard
