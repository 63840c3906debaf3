"""Fair share: what each owner has used, as GPU-seconds (worker-seconds for a CPU job) decaying exponentially with
a half-life (GPUDECK_FAIRSHARE_HALFLIFE, 7 days by default, as Slurm's PriorityDecayHalfLife).

Each owner's figure is one Redis hash field, {usage, at}: the decayed total as of `at`. An attempt that ends
charges its GPUs x seconds (jobs.lifecycle); what running jobs have used so far is added when the figure is read
(`usage(..., running=)`), so a job that runs for days counts from its first minute."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence

from redis import Redis

from jobs.keys import NO_OWNER, SHARE_KEY
from jobs.record import Job, Kept
from jobs.settings import Settings

# KEYS: SHARE_KEY. ARGV: owner, charge (GPU-seconds), now, half-life (s).
_CHARGE = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local now, half = tonumber(ARGV[3]), tonumber(ARGV[4])
local usage = 0
if raw then
  local u = cjson.decode(raw)
  usage = u.usage * math.pow(0.5, math.max(0, now - u.at) / half)
end
usage = usage + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({usage = usage, at = now}))
return tostring(usage)
"""


@functools.cache
def halflife_s() -> float:
    """GPUDECK_FAIRSHARE_HALFLIFE of this process (jobs.settings read it, and checked it at start), for charges made
    where no Settings is at hand (an attempt's end)."""
    return float(Settings.from_env().fairshare_halflife_s)


def owner_of(owner: str | None) -> str:
    """The name usage is kept under (jobs without an owner share one)."""
    return owner or NO_OWNER


def slots(spec: Kept) -> int:
    """What a job holds while it runs, in the unit of fair share: its GPUs, or its workers for a CPU job."""
    return max(1, spec.gpus) * spec.workers


def decayed(value: float, since: float, now: float, halflife_s: float) -> float:
    """`value` recorded at `since`, as it counts at `now`."""
    return value * 0.5 ** (max(0.0, now - since) / max(1.0, halflife_s))


def charge(
    redis: Redis, owner: str | None, seconds: float, half: float | None = None, now: float | None = None
) -> None:
    """Add `seconds` (GPU-seconds) to `owner`'s decayed usage."""
    if seconds <= 0:
        return
    script = redis.register_script(_CHARGE)
    now = time.time() if now is None else now
    script(keys=[SHARE_KEY], args=[owner_of(owner), seconds, now, half or halflife_s()])


def attempt_seconds(rec: Job, now: float | None = None) -> float:
    """What an attempt that started at the record's `started_at` has used by `now`, in GPU-seconds."""
    started = rec.get("started_at")
    if not started:
        return 0.0
    job = Job.of(rec)
    held = job.gpu_fraction or slots(job.spec)  # (a share: its part)
    return held * max(0.0, (time.time() if now is None else now) - float(started))


def usage(redis: Redis, halflife_s: float, running: Sequence[Job] = (), now: float | None = None) -> dict[str, float]:
    """Every owner's decayed usage now, with what their running jobs (`running`: active records) used so far."""
    now = time.time() if now is None else now
    out: dict[str, float] = {}
    for owner, raw in redis.hgetall(SHARE_KEY).items():
        u = json.loads(raw)
        out[owner.decode()] = decayed(float(u["usage"]), float(u["at"]), now, halflife_s)
    for rec in running:
        key = owner_of(rec.get("owner"))
        out[key] = out.get(key, 0.0) + attempt_seconds(rec, now)
    return out
