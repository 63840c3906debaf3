"""What a running job's processes use on each host: CPU %, resident memory, and the GPU memory and utilization
that nvidia-smi reports for them. The host's sampler (jobs.gpus.Sampler) writes it every 2 s; the API reads it.

A job's processes are the process groups of its trainers (each trainer starts a group of its own: a command
job's shell and everything it runs, a zoo trainer and its children), found from one pass over /proc."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from redis import Redis

from jobs.keys import IDLE_GPU_KEY, gpus_booked_key, job_key, usage_key
from jobs.run.proc import SHIM_FILE, descendants

TTL_S = 10
"""A host's usage of a job expires this long after it was written (the job ended, the host went away)."""

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: str) -> tuple[int, int, float, int] | None:
    """(pid, process group, CPU seconds, RSS bytes) of one /proc entry; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):  # gone (an exiting process may read as empty)
        return None
    # after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime … rss (22)
    return int(pid), int(fields[2]), (int(fields[11]) + int(fields[12])) / _TICK, int(fields[21]) * _PAGE


def tree_rss(pid: int) -> int:
    """The resident memory of process `pid` and every process below it, in bytes (a warm trainer's sandbox and all)."""
    found = (_stat(str(p)) for p in (pid, *descendants(pid)))
    return sum(st[3] for st in found if st is not None)


class UsageMeter:
    """CPU % needs two readings: this keeps the last CPU seconds of each process it saw."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[float, float]] = {}  # pid -> (cpu seconds, when)

    def measure(self, roots: dict[int, int]) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
        """`roots`: trainer pid -> job id. Returns (job id -> {cpu_percent, rss_bytes, processes}, and every
        process of those jobs: pid -> job id)."""
        now = time.monotonic()
        usage: dict[int, dict[str, Any]] = {}
        members: dict[int, int] = {}
        seen: dict[int, tuple[float, float]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            st = _stat(entry)
            if st is None:
                continue
            pid, group, cpu, rss = st
            job_id = roots.get(group, roots.get(pid))
            if job_id is None or _sandbox_machinery(entry):
                continue
            members[pid] = job_id
            seen[pid] = (cpu, now)
            u = usage.setdefault(job_id, {"cpu_percent": None, "rss_bytes": 0, "processes": 0})
            before = self.last.get(pid)
            if before is not None and now > before[1]:  # (a job's first reading has no CPU % yet: None)
                u["cpu_percent"] = (u["cpu_percent"] or 0.0) + max(0.0, cpu - before[0]) / (now - before[1]) * 100
            u["rss_bytes"] += rss
            u["processes"] += 1
        self.last = seen
        for u in usage.values():
            if u["cpu_percent"] is not None:
                u["cpu_percent"] = round(u["cpu_percent"], 1)
        return usage, members


def _sandbox_machinery(pid: str) -> bool:
    """bubblewrap's processes and jobs.run.shim (jobs.run.sandbox): around a job, not of it; not counted as its own."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read(4096)
    except OSError:
        return False
    first = cmd.split(b"\0", 1)[0]
    return first.endswith(b"bwrap") or b"\0" + SHIM_FILE.encode() + b"\0" in cmd


def gpu_usage(gpus: list[dict[str, Any]] | None, job_id: int) -> list[dict[str, Any]]:
    """The GPUs a job's processes are on, from a sampler's nvidia-smi reading: index, the GPU's utilization, and
    the memory the job's processes hold there."""
    out = []
    for gpu in gpus or []:
        mine = [p for p in gpu.get("processes") or [] if p.get("job_id") == job_id]
        if mine:
            used = [p.get("used_memory_mib") for p in mine if p.get("used_memory_mib") is not None]
            out.append(
                {
                    "index": gpu.get("index"),
                    "utilization": gpu.get("utilization"),
                    "memory_used_mib": sum(used) if used else None,
                }
            )
    return out


def write(redis: Redis, host: str, usage: dict[int, dict[str, Any]], gpus: list[dict[str, Any]] | None) -> None:
    """Each job's usage on this host, under the job's usage hash (which expires TTL_S after the last write)."""
    if not usage:
        return
    at = time.time()
    with redis.pipeline(transaction=False) as pipe:
        for job_id, u in usage.items():
            doc = {**u, "host": host, "sampled_at": at, "gpus": gpu_usage(gpus, job_id)}
            pipe.hset(usage_key(job_id), host, json.dumps(doc))
            pipe.expire(usage_key(job_id), TTL_S)
        pipe.execute()


IDLE_PERCENT = 5
"""A GPU under this utilization is idle (as Princeton's jobstats and slurm-job-exporter count it)."""


def booked_seconds(redis: Redis, host: str, now: float, most: float) -> float:
    """The seconds of `host`'s GPU time to book now: since it was last booked, by whichever of the host's samplers
    (the sampling moves between its workers' processes), at most `most` (a gap of no samples is not booked); 0 the
    first time. Each second is booked once: the time of this booking is swapped in atomically."""
    last = redis.set(gpus_booked_key(host), repr(now), get=True)
    return 0.0 if last is None else max(0.0, min(now - float(last), most))


def unbooked(redis: Redis, host: str) -> None:
    """No sample this round (nvidia-smi failed): the next booking starts over rather than booking the gap."""
    redis.delete(gpus_booked_key(host))


def account(redis: Redis, host: str, held: dict[int, tuple[str | None, list[str], float]],
            gpus: list[dict[str, Any]] | None, seconds: float) -> None:  # fmt: skip
    """`seconds` more of GPU life for each job holding GPUs on `host` (`held`: job id -> (owner, its GPU indices
    here, its part of each: a share's fraction, else 1)), as nvidia-smi read them: GPU-seconds held, utilization-
    weighted seconds, and idle seconds (under IDLE_PERCENT) on the job's record, each its part of the GPU's, and its
    owner's idle GPU-seconds (IDLE_GPU_KEY). A GPU whose utilization nvidia-smi does not report ([N/A]) is not
    counted."""
    util = {
        str(g.get("index")): float(g["utilization"])
        for g in gpus or []
        if isinstance(g.get("utilization"), (int, float))
    }
    with redis.pipeline(transaction=False) as pipe:
        for job_id, (owner, indices, part) in held.items():
            read = [util[i] for i in indices if i in util]
            if not read:
                continue
            idle = sum(seconds * part for u in read if u < IDLE_PERCENT)
            pipe.hincrbyfloat(job_key(job_id), "gpu_seconds", seconds * part * len(read))
            pipe.hincrbyfloat(job_key(job_id), "gpu_busy_seconds", sum(seconds * part * u / 100 for u in read))
            pipe.hincrbyfloat(job_key(job_id), "gpu_idle_seconds", idle)
            if idle:
                pipe.hincrbyfloat(IDLE_GPU_KEY, owner or "-", idle)
        pipe.execute()


def life(rec: dict[str, Any]) -> dict[str, Any] | None:
    """A job's GPUs over its life so far (account): mean utilization, and how much of its GPU-time was idle; None
    before its first reading."""
    held = float(rec.get("gpu_seconds") or 0)
    if not held:
        return None
    return {
        "mean_percent": round(100 * float(rec.get("gpu_busy_seconds") or 0) / held, 1),
        "idle_percent": round(100 * float(rec.get("gpu_idle_seconds") or 0) / held, 1),
        "gpu_seconds": round(held, 1),
    }


def idle_gpu_hours(redis: Redis) -> dict[str | None, float]:
    """Each owner's idle GPU-hours (held under IDLE_PERCENT) so far (None: jobs without an owner)."""
    return {(None if k == b"-" else k.decode()): float(v) / 3600 for k, v in redis.hgetall(IDLE_GPU_KEY).items()}


def read(redis: Redis, job_ids: list[int]) -> dict[int, dict[str, Any]]:
    """job id -> its usage summed over hosts ({cpu_percent, rss_bytes, processes, gpus, hosts, sampled_at});
    jobs with no fresh reading are left out. Readings older than TTL_S (a host that stopped writing while
    another still does) are dropped."""
    if not job_ids:
        return {}
    with redis.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            pipe.hvals(usage_key(job_id))
        answers = pipe.execute()
    out = {}
    fresh_after = time.time() - TTL_S
    for job_id, values in zip(job_ids, answers):
        docs = [d for d in (json.loads(v) for v in values) if d.get("sampled_at", 0) >= fresh_after]
        if not docs:
            continue
        cpu = [d["cpu_percent"] for d in docs if d.get("cpu_percent") is not None]
        out[job_id] = {
            "cpu_percent": round(sum(cpu), 1) if cpu else None,
            "rss_bytes": sum(d["rss_bytes"] for d in docs),
            "processes": sum(d["processes"] for d in docs),
            "gpus": [dict(g, host=d["host"]) for d in docs for g in d.get("gpus") or []],
            "hosts": sorted(d["host"] for d in docs),
            "sampled_at": max(d["sampled_at"] for d in docs),
        }
    return out
