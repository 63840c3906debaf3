"""Projects (issue 69 #1): a lab's groups of people, each with its caps. An admin makes a project (`gpudeck project
create NAME --max-gpus 4 --max-queued 200`) and puts named tokens in it (`gpudeck project add NAME USER`); a job
belongs to one project (its spec's `project`, else its owner's default project: the first they were put in, or the
one named with --default). A project's caps hold as a person's do: its running jobs' GPUs (a share its part) wait
past --max-gpus, and a submission past --max-queued is refused. Each record is JSON in PROJECTS_KEY, by name."""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from typing import Any

from redis import Redis

from jobs import tokens
from jobs.errors import BadRequest, Conflict, Forbidden, NotFound, ReferenceNotFound
from jobs.keys import PROJECT_DEFAULTS_KEY, PROJECTS_KEY, TOKENS_KEY, job_key, project_live_key
from models.jobspec import PROJECT_NAME
from models.states import Status

NAME = re.compile(PROJECT_NAME)


def _read(redis: Redis, name: str) -> dict[str, Any]:
    raw = redis.hget(PROJECTS_KEY, name)
    if raw is None:
        raise NotFound(f"no project named {name!r} (gpudeck project ls lists them)", {"project": name})
    return json.loads(raw)


BUDGET = re.compile(r"^([0-9]+(?:\.[0-9]+)?)/(day|week|month)$")
OVER_BUDGET = ("wait", "refuse")


def budget_of(text: str) -> tuple[float, str]:
    """`500/month` as (500.0, "month"); ValueError saying what is wrong."""
    found = BUDGET.match(text.strip())
    if not found or float(found.group(1)) <= 0:
        raise ValueError(f"write GPU-hours per day, week or month: 500/month, 40/week; got {text!r}")
    return float(found.group(1)), found.group(2)


def create(
    redis: Redis,
    name: str,
    max_gpus: int | None = None,
    max_queued: int | None = None,
    share: float = 1.0,
    max_gpu_hours: str | None = None,
    over_budget: str = "wait",
) -> dict[str, Any]:
    """A new project; `max_gpu_hours`: its GPU-hours a period (500/month: the GPU time of its jobs that ended in
    the calendar month, UTC, and of those running now), past which its jobs wait or are refused (`over_budget`)."""
    if not NAME.match(name):
        raise BadRequest(
            f"a project's name is a lowercase letter, then up to 31 of a-z 0-9 _ . -, got {name!r}", {"field": "name"}
        )
    for field, value in (("max_gpus", max_gpus), ("max_queued", max_queued)):
        if value is not None and value < 1:
            raise BadRequest(f"{field} must be 1 or more, got {value}", {"field": field})
    if not share > 0:
        raise BadRequest(f"share must be above 0, got {share}", {"field": "share"})
    budget = None
    if max_gpu_hours is not None:
        try:
            budget = budget_of(max_gpu_hours)
        except ValueError as exc:
            raise BadRequest(f"max_gpu_hours: {exc}", {"field": "max_gpu_hours"}) from None
    if over_budget not in OVER_BUDGET:
        raise BadRequest(f"over_budget must be wait or refuse, got {over_budget!r}", {"field": "over_budget"})
    record: dict[str, Any] = {
        "name": name,
        "max_gpus": max_gpus,
        "max_queued": max_queued,
        "share": share,
        "max_gpu_hours": None if budget is None else budget[0],
        "budget_period": None if budget is None else budget[1],
        "over_budget": over_budget,
        "members": [],
        "admins": [],
        "created_at": time.time(),
    }
    if not redis.hsetnx(PROJECTS_KEY, name, json.dumps(record)):
        raise Conflict(f"a project named {name!r} exists", {"project": name})
    return record


def get(redis: Redis, name: str) -> dict[str, Any]:
    return _read(redis, name)


def listing(redis: Redis) -> list[dict[str, Any]]:
    defaults = {k.decode(): v.decode() for k, v in redis.hgetall(PROJECT_DEFAULTS_KEY).items()}
    out = []
    for _, raw in sorted(redis.hgetall(PROJECTS_KEY).items()):
        record = json.loads(raw)
        record["defaults_of"] = sorted(u for u, p in defaults.items() if p == record["name"])
        out.append(record)
    return out


def add(redis: Redis, name: str, user: str, default: bool = False, admin: bool = False) -> dict[str, Any]:
    """Put the named token `user` in project `name` (their default project when they have none, or `default`);
    `admin`: they may steer the project's jobs (cancel, priority, place in line), as an admin may anyone's."""
    record = _read(redis, name)
    if redis.hget(TOKENS_KEY, user) is None:
        raise NotFound(f"no named token {user!r} (gpudeck token ls lists them)", {"user": user})
    admins = set(record.get("admins", [])) | ({user} if admin else set())
    if user not in record["members"] or admins != set(record.get("admins", [])):
        record["members"] = sorted({*record["members"], user})
        record["admins"] = sorted(admins)
        redis.hset(PROJECTS_KEY, name, json.dumps(record))
    if default:
        redis.hset(PROJECT_DEFAULTS_KEY, user, name)
    else:
        redis.hsetnx(PROJECT_DEFAULTS_KEY, user, name)
    return record


def remove(redis: Redis, name: str, user: str | None = None) -> None:
    """Take `user` out of project `name`, or (no user) delete the project; its jobs keep its name."""
    record = _read(redis, name)
    members = [user] if user is not None else record["members"]
    if user is not None:
        record["members"] = [m for m in record["members"] if m != user]
        record["admins"] = [m for m in record.get("admins", []) if m != user]
        redis.hset(PROJECTS_KEY, name, json.dumps(record))
    else:
        redis.hdel(PROJECTS_KEY, name)
        redis.delete(project_live_key(name))
    for member in members:
        if (redis.hget(PROJECT_DEFAULTS_KEY, member) or b"").decode() == name:
            others = [p["name"] for p in listing(redis) if member in p["members"]]
            if others:
                redis.hset(PROJECT_DEFAULTS_KEY, member, others[0])
            else:
                redis.hdel(PROJECT_DEFAULTS_KEY, member)


def steers(redis: Redis, project: str | None, user: str) -> bool:
    """Whether `user` is an admin of `project` (`gpudeck project add NAME USER --admin`)."""
    raw = redis.hget(PROJECTS_KEY, project) if project else None
    return raw is not None and user in json.loads(raw).get("admins", [])


Groups = dict[str, tuple[str, float]]
"""A named token in a project -> (its default project, that project's share)."""


def groups(redis: Redis) -> Groups:
    """The groups fair share orders first: each named token in a project -> (its default project, that project's
    share) (a person's line is counted with their default project's)."""
    shares = {name: float(record.get("share", 1.0)) for name, record in records(redis).items()}
    out = {}
    for user, project in redis.hgetall(PROJECT_DEFAULTS_KEY).items():
        if project.decode() in shares:
            out[user.decode()] = (project.decode(), shares[project.decode()])
    return out


def group_of(groups: Groups, owner: str) -> tuple[str | None, float]:
    """The project an owner's line counts with and its share: (None, 1.0) for one in no project (one group)."""
    return groups.get(owner, (None, 1.0))


def spent(used: dict[str, float], groups: Groups) -> defaultdict[str | None, float]:
    """Each project's decayed usage: its people's (`used`: each owner's, by share.owner_of name; 0 for a project
    none of whose people has any)."""
    out: defaultdict[str | None, float] = defaultdict(float)
    for owner, seconds in used.items():
        out[group_of(groups, owner)[0]] += seconds
    return out


def default_of(redis: Redis, user: str) -> str | None:
    raw = redis.hget(PROJECT_DEFAULTS_KEY, user)
    return raw.decode() if raw is not None else None


def settle(redis: Redis, owner: str | None, spec: dict[str, Any]) -> dict[str, Any] | None:
    """The project a job of `owner` belongs to, written into its spec (its `project`, else the owner's default;
    none where the owner has none): 404 for a project that does not exist, 403 for one the owner is not in (an
    admin may submit into any) or that holds --max-queued queued jobs. The project's record, or None."""
    name = spec.get("project")
    if name is None:
        name = default_of(redis, owner) if owner else None
        if name is None:
            return None
        spec["project"] = name
    raw = redis.hget(PROJECTS_KEY, name)
    if raw is None:
        raise ReferenceNotFound({"project": f"no project named {name!r} (gpudeck project ls lists them)"})
    record = json.loads(raw)
    if owner and owner not in record["members"]:
        who, _ = tokens.named(redis, owner)
        if who is None or not who.admin:
            raise Forbidden(
                f"{owner} is not in project {name}: an admin puts them in it with `gpudeck project add {name} "
                f"{owner}`, or the job names one of their projects",
                {"rule": "project", "project": name, "user": owner},
            )
    cap = record.get("max_queued")
    if cap is not None and (queued := queued_of(redis, name)) >= cap:
        raise Forbidden(
            f"project {name} has {queued} queued jobs and may have {cap} (--max-queued): wait for some to start, "
            "or cancel some",
            {"rule": "max_queued", "project": name, "queued": queued, "max_queued": cap},
        )
    return record


def track(pipe: Any, project: str, job_id: int) -> None:
    """In the transaction that submits a job of `project`: counted among its jobs not yet ended."""
    pipe.sadd(project_live_key(project), job_id)


def queued_of(redis: Redis, project: str) -> int:
    """How many of the project's jobs are queued now (those it tracks that ended are let go)."""
    ids = [int(i) for i in redis.smembers(project_live_key(project))]
    if not ids:
        return 0
    with redis.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hget(job_key(job_id), "status")
        statuses = [s.decode() if s else None for s in pipe.execute()]
    gone = [i for i, s in zip(ids, statuses) if s is None or Status(s).ended]
    if gone:
        redis.srem(project_live_key(project), *gone)
    return sum(s == Status.QUEUED.value for s in statuses)


def records(redis: Redis) -> dict[str, dict[str, Any]]:
    """Every project's record by name, in one read (what a scheduling round holds its caps and budgets to)."""
    return {name.decode(): json.loads(raw) for name, raw in redis.hgetall(PROJECTS_KEY).items()}
