"""GPU quotas: a named token made with `--max-gpus N` caps the GPUs its owner's jobs hold at once.

What an owner holds is counted from the source of truth, never kept as a tally that a crash could leave wrong:
the GPUs of the owner's active jobs (every task's for a multi-worker job). The scheduler (jobs.schedule) places
jobs one round at a time under a lock and counts what it hands out in a round itself. A job over its owner's
quota stays in line with `message: "waiting: NAME holds 2 of 2 GPUs"` and holds up nobody else's job.
"""

from __future__ import annotations

import json
from typing import Any

from redis import Redis

from jobs import taskrecord, tokens
from jobs.errors import Forbidden
from jobs.keys import worker_info_key
from jobs.record import Job, Kept
from jobs.store import JobStore


def job_gpus(spec: Kept) -> int:
    """The GPUs a job holds while it runs: every task's."""
    return spec.gpus * spec.workers


def part(rec: Job) -> float:
    """How much of each GPU it holds an active job holds: a share its part (`gpu_fraction`, set where it is placed;
    all of one until then), else all of it (1). The one answer every count of GPUs held uses (issue 64): quotas,
    fair share, the title bar, `gpudeck share`, GPU-seconds, compare, idle accounting."""
    return Job.of(rec).gpu_fraction or 1.0


def holds(rec: Job) -> float:
    """The GPUs an active job holds: every task's, each its part of its GPU (`part`)."""
    return part(rec) * job_gpus(Job.of(rec).spec)


def held(redis: Redis, owner: str) -> float:
    """The GPUs `owner`'s active jobs hold now (every task's of a multi-worker job, a share's part of one)."""
    return sum(holds(rec) for rec in JobStore(redis).active() if rec.get("owner") == owner)


def limit_for(redis: Redis, owner: str | None, gpus: int) -> int | None:
    """The quota a job of `owner` needing `gpus` GPUs is held to (None: none applies: no owner, no limit, or a
    job without GPUs)."""
    return tokens.max_gpus(redis, owner) if owner and gpus else None


def check_fits(redis: Redis, owner: str | None, spec: Kept, project: dict[str, Any] | None = None) -> None:
    """Forbidden for a job that needs more GPUs than its owner (or its project) may ever hold at once: it could
    never start."""
    gpus = job_gpus(spec)
    if project is not None and project.get("max_gpus") is not None and gpus > project["max_gpus"]:
        name, cap = project["name"], project["max_gpus"]
        raise Forbidden(
            f"the job needs {gpus} GPUs and project {name} allows {cap} at once (--max-gpus): it could never start; "
            "ask fewer GPUs or an admin for a larger --max-gpus",
            {"rule": "project_max_gpus", "project": name, "gpus": gpus, "max_gpus": cap},
        )
    limit = limit_for(redis, owner, gpus)
    if limit is not None and gpus > limit:
        raise Forbidden(
            f"the job needs {gpus} GPUs and the token of {owner} allows {limit} at once (--max-gpus): it could never "
            "start; ask fewer GPUs or an admin for a token with a larger --max-gpus",
            {"rule": "max_gpus", "user": owner, "gpus": gpus, "max_gpus": limit},
        )


def waiting(owner: str, holds: float, limit: int) -> str:
    """The message of a job that waits for its owner's quota (a share held counts as its part of a GPU)."""
    return f"waiting: {owner} holds {round(holds, 2):g} of {limit} GPU{'' if limit == 1 else 's'}"


def holders(redis: Redis) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Who holds each GPU now: (host, GPU index) -> [{job_id, owner, kind, gpu_memory}] (one job holding it whole,
    or the jobs sharing it, gpu_memory their bytes), from the active jobs' workers."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in JobStore(redis).active():
        job_id = rec["id"]
        spec = rec.spec
        who = {
            "job_id": job_id,
            "owner": rec.get("owner"),
            "kind": "session" if spec.is_session else "job",
            "gpu_memory": spec.gpu_memory,
            "part": part(rec),
        }
        places = []
        if spec.multi_worker:
            for task in taskrecord.read(redis, job_id, spec.workers):
                if "host" in task:
                    places.append((task["host"], task["gpus"]))
        else:
            raw = redis.get(worker_info_key(str(rec.get("worker", ""))))
            if raw is not None:
                places.append((json.loads(raw).get("host"), rec.get("gpu_ids") or []))
        for host, gpu_ids in places:
            for gpu in gpu_ids:
                out.setdefault((str(host), str(gpu)), []).append(who)
    return out
