"""GPU quotas: a named token made with `--max-gpus N` caps the GPUs its owner's jobs hold at once.

What an owner holds is counted from the source of truth, never kept as a tally that a crash could leave wrong:
the GPUs (`gpu_ids`, every task's for a multi-worker job) of the owner's active jobs, plus the claims of jobs a
worker has just taken and not yet started (a claim lasts CLAIM_TTL_S, and only while its job is still queued).
Counting and claiming is one Lua script, so two workers taking two jobs of one owner at the same moment cannot
both get past the limit.

A single job over its owner's quota is taken off its RQ queue and parked (so the jobs behind it, other users',
are not held up), with `message: "waiting: NAME holds 2 of 2 GPUs"`; every worker's placer looks at the parked
jobs each second and puts one back at the front of its queue as soon as its owner's jobs hold few enough GPUs.
A multi-worker job is checked where it is placed (jobs.gang); it never sits in an RQ queue.
"""

from __future__ import annotations

import json
import time
from typing import Any

from redis import Redis
from rq import Queue

from jobs import taskrecord, tokens
from jobs.errors import Forbidden, NotFound
from jobs.keys import ACTIVE_KEY, PREFIX, QUOTA_CLAIMS_KEY, QUOTA_PARKED_KEY, job_key, worker_info_key
from jobs.spec import is_multi_worker
from jobs.store import JobStore
from models.states import Status

CLAIM_TTL_S = 120
"""How long a claim counts for a job a worker took but whose work-horse has not started it (a crash between)."""

# KEYS: ACTIVE_KEY, QUOTA_CLAIMS_KEY. ARGV: PREFIX (records are PREFIX:job:ID, as jobs.keys.job_key names them),
# owner, job id ('' counts only), gpus, limit, now, ttl.
# Returns {1 claimed | 0 refused, GPUs the owner's other jobs hold}.
_CLAIM = """
local prefix, owner, job = ARGV[1], ARGV[2], ARGV[3]
local n, limit, now = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local held = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if id ~= job then
    local f = redis.call('HMGET', prefix .. ':job:' .. id, 'owner', 'gpu_ids')
    if f[1] == owner and f[2] then held = held + #cjson.decode(f[2]) end
  end
end
local claims = redis.call('HGETALL', KEYS[2])
for i = 1, #claims, 2 do
  local id, c = claims[i], cjson.decode(claims[i + 1])
  if c.expires < now or redis.call('HGET', prefix .. ':job:' .. id, 'status') ~= 'queued' then
    redis.call('HDEL', KEYS[2], id)
  elseif c.owner == owner and id ~= job then
    held = held + c.gpus
  end
end
if job == '' then return {1, held} end
if held + n > limit then return {0, held} end
redis.call('HSET', KEYS[2], job, cjson.encode({owner = owner, gpus = n, expires = now + tonumber(ARGV[7])}))
return {1, held}
"""


def job_gpus(spec: dict[str, Any]) -> int:
    """The GPUs a job holds while it runs: every task's."""
    return int(spec.get("gpus") or 0) * int(spec.get("workers") or 1)


def held(redis: Redis, owner: str) -> int:
    """The GPUs `owner`'s active jobs (and the jobs just taken for them) hold now."""
    return int(_run(redis, owner, "", 0, 0)[1])


def claim(redis: Redis, owner: str, job_id: int, gpus: int, limit: int) -> tuple[bool, int]:
    """Count `gpus` for `owner`'s job if their jobs then hold at most `limit`: (claimed, GPUs held by the others)."""
    ok, others = _run(redis, owner, str(job_id), gpus, limit)
    return bool(ok), int(others)


def _run(redis: Redis, owner: str, job: str, gpus: int, limit: int) -> list[int]:
    script = redis.register_script(_CLAIM)
    return script(keys=[ACTIVE_KEY, QUOTA_CLAIMS_KEY], args=[PREFIX, owner, job, gpus, limit, time.time(), CLAIM_TTL_S])


def limit_for(redis: Redis, owner: str | None, gpus: int) -> int | None:
    """The quota a job of `owner` needing `gpus` GPUs is held to (None: none applies: no owner, no limit, or a
    job without GPUs)."""
    return tokens.max_gpus(redis, owner) if owner and gpus else None


def check_fits(redis: Redis, owner: str | None, spec: dict[str, Any]) -> None:
    """Forbidden for a job that needs more GPUs than its owner may ever hold at once: it could never start."""
    gpus = job_gpus(spec)
    limit = limit_for(redis, owner, gpus)
    if limit is not None and gpus > limit:
        raise Forbidden(
            f"the job needs {gpus} GPUs and the token of {owner} allows {limit} at once (--max-gpus): it could never "
            "start; ask fewer GPUs or an admin for a token with a larger --max-gpus",
            {"rule": "max_gpus", "user": owner, "gpus": gpus, "max_gpus": limit},
        )


def waiting(owner: str, holds: int, limit: int) -> str:
    """The message of a job that waits for its owner's quota."""
    return f"waiting: {owner} holds {holds} of {limit} GPU{'' if limit == 1 else 's'}"


def admit(redis: Redis, job_id: int, rq_id: str, queue: str) -> bool:
    """Whether a worker that just took job `job_id` off `queue` may run it; if the owner's quota says no, the job
    is parked (off every queue, its record saying why) and False is returned."""
    store = JobStore(redis)
    try:
        rec = store.get(job_id)
    except NotFound:  # (the work-horse says what became of it)
        return True
    owner, gpus = rec.get("owner"), job_gpus(rec["spec"])
    limit = limit_for(redis, owner, gpus)
    if limit is None or rec["status"] != Status.QUEUED.value:
        return True
    ok, others = claim(redis, owner, job_id, gpus, limit)
    if ok:
        return True
    entry = json.dumps({"job": job_id, "rq": rq_id, "queue": queue, "owner": owner, "gpus": gpus}, sort_keys=True)
    redis.zadd(QUOTA_PARKED_KEY, {entry: job_id})
    # RQ moved it to the queue's intermediate list when it was taken; left there, RQ's maintenance would fail it
    Queue(queue, connection=redis).intermediate_queue.remove(rq_id)
    store.transition(job_id, (Status.QUEUED.value,), message=waiting(owner, others, limit))
    return False


def unpark(redis: Redis) -> list[int]:
    """Put parked jobs back at the front of their queues where their owners' quotas allow now (the oldest of an
    owner first, one per owner a round); forget parked jobs that are not queued any more. Returns the ids put
    back."""
    entries = redis.zrange(QUOTA_PARKED_KEY, 0, -1)
    if not entries:
        return []
    store = JobStore(redis)
    back: list[int] = []
    seen: set[str] = set()
    for raw in entries:
        e = json.loads(raw)
        status = redis.hget(job_key(e["job"]), "status")
        if status is None or status.decode() != Status.QUEUED.value:
            redis.zrem(QUOTA_PARKED_KEY, raw)
            continue
        if e["owner"] in seen:
            continue
        seen.add(e["owner"])
        limit = tokens.max_gpus(redis, e["owner"])
        holds = held(redis, e["owner"])
        if limit is not None and holds + e["gpus"] > limit:
            message = waiting(e["owner"], holds, limit)
            if redis.hget(job_key(e["job"]), "message") != message.encode():  # (written when it reads differently)
                store.transition(e["job"], (Status.QUEUED.value,), message=message)
            continue
        if redis.zrem(QUOTA_PARKED_KEY, raw):  # (one placer wins a job: the others find it gone)
            store.transition(e["job"], (Status.QUEUED.value,), message=None)
            Queue(e["queue"], connection=redis).push_job_id(e["rq"], at_front=True)
            back.append(e["job"])
    return back


def parked(redis: Redis) -> set[int]:
    """Ids of the jobs parked now."""
    return {json.loads(raw)["job"] for raw in redis.zrange(QUOTA_PARKED_KEY, 0, -1)}


def holders(redis: Redis) -> dict[tuple[str, str], dict[str, Any]]:
    """Who holds each GPU now: (host, GPU index) -> {job_id, owner}, from the active jobs' workers."""
    store = JobStore(redis)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for job_id in store.active_ids():
        try:
            rec = store.get(job_id)
        except NotFound:  # (deleted meanwhile: it holds nothing)
            continue
        who = {"job_id": job_id, "owner": rec.get("owner")}
        places = []
        if is_multi_worker(rec["spec"]):
            for task in taskrecord.read(redis, job_id, int(rec["spec"]["workers"])):
                if "host" in task:
                    places.append((task["host"], task["gpus"]))
        else:
            raw = redis.get(worker_info_key(str(rec.get("worker", ""))))
            if raw is not None:
                places.append((json.loads(raw).get("host"), rec.get("gpu_ids") or []))
        for host, gpu_ids in places:
            for gpu in gpu_ids:
                out[(str(host), str(gpu))] = who
    return out
