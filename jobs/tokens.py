"""Named tokens: who a request is. Only the sha256 of a token is stored; the token is shown once, when made.
`GPUDECK_TOKENS` keeps working as before (anonymous admin tokens); with neither, nobody is asked (today's
single-user behaviour)."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from redis import Redis

from jobs.errors import BadRequest, Conflict, NotFound
from jobs.keys import AUDIT_KEY, TOKENS_KEY, token_hash_key
from models.common import notify_problem
from models.specchecks import EXPORT_TARGETS
from models.states import PRIORITIES

AUDIT_MAXLEN = 100_000
"""State changes the audit stream keeps (the oldest go first)."""
NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
TOUCH = "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end"
LAST_USED_EVERY_S = 60.0
"""A token's `last_used` is written at most this often (not on every request)."""


@dataclass(frozen=True)
class User:
    """Who a request is: a named token's owner, or `admin` for a shared GPUDECK_TOKENS token."""

    name: str
    admin: bool
    max_gpus: int | None = None
    commands: bool = True
    named: bool = True
    max_priority: str | None = None
    notify: tuple[str, ...] = ()
    """The endpoints told of this user's jobs when a job names none (`gpudeck token create --notify lab`)."""
    export: tuple[str, ...] = ()
    """Where this user's jobs are exported when a job says nothing of it (`gpudeck token create --export mlflow`)."""

    @property
    def role(self) -> str:
        return "admin" if self.admin else "user"


SHARED = User("GPUDECK_TOKENS", admin=True, named=False)
"""Whoever holds one of GPUDECK_TOKENS: an admin without a name of their own (what they make has no owner; the
audit trail names them by the setting, which no named token can be called)."""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create(
    redis: Redis,
    name: str,
    admin: bool = False,
    max_gpus: int | None = None,
    commands: bool = True,
    expires_s: int | None = None,
    now: float | None = None,
    max_priority: str | None = None,
    notify: tuple[str, ...] = (),
    webhooks: tuple[str, ...] | None = None,
    export: tuple[str, ...] = (),
    slurm_account: str | None = None,
) -> str:
    """Store a new named token and return it (the only time it is seen). `notify`: the endpoints (of `webhooks`,
    the operator's) its jobs tell when they name none; `export`: where its jobs are exported when they say nothing
    of it; `slurm_account`: the Slurm account its jobs are charged to on Slurm (so Slurm's fair share sees people,
    not the service)."""
    if not NAME.match(name or ""):
        raise BadRequest(f"token name {name!r}: 1 to 32 of a-z 0-9 _ . -, starting with a letter", {"field": "name"})
    if max_gpus is not None and max_gpus < 0:
        raise BadRequest(f"--max-gpus must be 0 or more, got {max_gpus}", {"field": "max_gpus"})
    if max_priority is not None and max_priority not in PRIORITIES:
        raise BadRequest(
            f"--max-priority must be one of {', '.join(PRIORITIES)}, got {max_priority!r}", {"field": "max_priority"}
        )
    problem = notify_problem(list(notify), webhooks) if notify else None
    if problem:
        raise BadRequest(f"--notify: {problem}", {"field": "notify"})
    bad = [t for t in export if t not in EXPORT_TARGETS]
    if bad:
        raise BadRequest(f"--export: {bad[0]!r} is no export target; the targets: {', '.join(EXPORT_TARGETS)}",
                         {"field": "export"})  # fmt: skip
    if slurm_account is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", slurm_account):
        raise BadRequest(
            f"--slurm-account: {slurm_account!r} is no Slurm account name (1 to 64 of A-Z a-z 0-9 _ . -)",
            {"field": "slurm_account"},
        )
    now = time.time() if now is None else now
    token = "gpd_" + secrets.token_urlsafe(32)
    meta: dict[str, Any] = {
        "name": name,
        "sha256": digest(token),
        "role": "admin" if admin else "user",
        "max_gpus": max_gpus,
        "commands": commands,
        "max_priority": max_priority,
        "notify": list(notify),
        "export": list(dict.fromkeys(export)),
        "slurm_account": slurm_account,
        "created_at": now,
        "expires_at": now + expires_s if expires_s else None,
        "last_used_at": None,
    }
    if not redis.hsetnx(TOKENS_KEY, name, json.dumps(meta)):
        raise Conflict(f"a token named {name!r} exists: revoke it first (gpudeck token revoke {name})", {"name": name})
    redis.set(token_hash_key(meta["sha256"]), name)
    return token


def list_all(redis: Redis) -> list[dict[str, Any]]:
    """Every named token's description (never the token or its hash), by name."""
    out = []
    for raw in redis.hvals(TOKENS_KEY):
        meta = json.loads(raw)
        meta.pop("sha256", None)
        out.append(meta)
    return sorted(out, key=lambda m: m["name"])


def revoke(redis: Redis, name: str) -> None:
    """Forget a named token: the next request with it is refused."""
    raw = redis.hget(TOKENS_KEY, name)
    if raw is None:
        raise NotFound(f"no token named {name!r} (gpudeck token ls lists them)", {"name": name})
    with redis.pipeline() as pipe:
        pipe.delete(token_hash_key(json.loads(raw)["sha256"]))
        pipe.hdel(TOKENS_KEY, name)
        pipe.execute()


def max_gpus(redis: Redis, name: str) -> int | None:
    """The GPU quota of a named token's owner (None: no limit, or no such token now)."""
    raw = redis.hget(TOKENS_KEY, name)
    return None if raw is None else json.loads(raw).get("max_gpus")


def slurm_account(redis: Redis, name: str | None) -> str | None:
    """The Slurm account of a named token's jobs (`gpudeck token create NAME --slurm-account A`), or None."""
    raw = redis.hget(TOKENS_KEY, name) if name else None
    return None if raw is None else json.loads(raw).get("slurm_account")


def quotas(redis: Redis) -> dict[str, int | None]:
    """Every named token's GPU quota, by name, in one read (what a scheduling round consults)."""
    return {name.decode(): json.loads(raw).get("max_gpus") for name, raw in redis.hgetall(TOKENS_KEY).items()}


def any_named(redis: Redis) -> bool:
    return bool(redis.hlen(TOKENS_KEY))


def identify(redis: Redis, token: str, now: float | None = None) -> tuple[User | None, str]:
    """The user a named token belongs to, or (None, why not)."""
    now = time.time() if now is None else now
    name = redis.get(token_hash_key(digest(token)))
    raw = redis.hget(TOKENS_KEY, name) if name else None
    if raw is None:
        return None, "unknown or revoked token"
    meta = json.loads(raw)
    if meta.get("expires_at") and now >= meta["expires_at"]:
        return None, f"token {meta['name']!r} expired"
    if not meta.get("last_used_at") or now - meta["last_used_at"] > LAST_USED_EVERY_S:
        meta["last_used_at"] = now  # (only while it still exists: a revoke meanwhile is not undone)
        redis.eval(TOUCH, 1, TOKENS_KEY, meta["name"], json.dumps(meta))
    return _user(meta), ""


def named(redis: Redis, name: str, now: float | None = None) -> tuple[User | None, str]:
    """The user `name` is now (what their token allows), or (None, why not: revoked, expired): what a search
    made by `name` asks before each trial it launches for them."""
    raw = redis.hget(TOKENS_KEY, name)
    if raw is None:
        return None, f"the token of {name!r} was revoked"
    meta = json.loads(raw)
    if meta.get("expires_at") and (time.time() if now is None else now) >= meta["expires_at"]:
        return None, f"the token of {name!r} expired"
    return _user(meta), ""


def refusal(who: User | None, spec: Any, command: bool) -> tuple[str, dict[str, Any]] | None:
    """Why `who` may not submit `spec` by the rules of their token — a job that cannot be preempted (admins only),
    a priority above their --max-priority, a command (`command`: jobs.spec.is_command) from a --no-commands token —
    as (message, details), or None.
    The one set of rules for a job sent directly (api.auth) and each trial of a search (jobs.search)."""
    if who is None or not isinstance(spec, dict):
        return None
    if spec.get("preemptible") is False and not who.admin:
        return (
            f"only an admin may make a job that cannot be preempted (preemptible: false); token {who.name!r} is "
            "a user's",
            {"rule": "preemptible_admin_only", "user": who.name, "field": "preemptible"},
        )
    if spec.get("idle_exempt") is True and not who.admin:
        return (
            f"only an admin may exempt a job from the idle-GPU policy (idle_exempt: true); token {who.name!r} is "
            "a user's",
            {"rule": "idle_exempt_admin_only", "user": who.name, "field": "idle_exempt"},
        )
    priority = spec.get("priority")
    if who.max_priority is not None and priority in PRIORITIES:
        if PRIORITIES.index(priority) < PRIORITIES.index(who.max_priority):
            return (
                f"token {who.name!r} may give a job at most priority {who.max_priority}, not {priority} (an admin "
                "can change that: gpudeck token create NAME --max-priority high)",
                {"rule": "max_priority", "user": who.name, "field": "priority", "max_priority": who.max_priority},
            )
    if who.named and command and not who.commands:
        return (
            f"token {who.name!r} was created with --no-commands: it may submit model jobs only (an admin can make "
            f"one that may: gpudeck token create NAME)",
            {"rule": "no_commands", "user": who.name},
        )
    return None


def _user(meta: dict[str, Any]) -> User:
    return User(
        meta["name"],
        meta["role"] == "admin",
        meta.get("max_gpus"),
        bool(meta.get("commands", True)),
        max_priority=meta.get("max_priority"),
        notify=tuple(meta.get("notify") or ()),
        export=tuple(meta.get("export") or ()),
    )


def audit(redis: Redis, who: str, address: str, method: str, path: str, status: int, detail: str = "") -> None:
    """One state-changing request (or a token change made on the server) into the capped audit stream."""
    entry = {"user": who, "address": address, "method": method, "path": path, "status": status, "detail": detail}
    redis.xadd(AUDIT_KEY, {k: str(v) for k, v in entry.items()}, maxlen=AUDIT_MAXLEN, approximate=True)
