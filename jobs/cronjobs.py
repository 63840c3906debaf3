"""Schedules that repeat (issue 69 #3): a job spec or a sweep, made at each firing of a cron expression in a time
zone. Each schedule is one record (SCHEDULES_KEY, by name) and, while it is not paused, its next firing in a sorted
set (SCHEDULES_DUE_KEY); the Timetable thread of every worker (one process at a time, under a lock) makes what is
due. A firing makes its job at most once, whichever process fires it and however often the service restarts: its
job is submitted under an idempotency key made of the schedule's name, its creation and the firing's time, and the
record's next firing moves past it in the same step."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

from redis import Redis

from jobs import control, sweeps, tokens
from jobs import spec as spec_mod
from jobs.errors import Conflict, Forbidden, GpudeckError, NotFound, ValidationError
from jobs.keys import SCHEDULES_DUE_KEY, SCHEDULES_KEY, TIMETABLE_LOCK_KEY, schedule_fired_key
from jobs.periodic import Periodic
from jobs.settings import Settings
from jobs.store import JobStore
from models.common import iso
from models.scheduleinput import MISSED_AFTER_S, firings, last_firing, next_firing, problems
from models.states import ENDED

log = logging.getLogger(__name__)

HISTORY = 20
"""Firings a schedule's record keeps (the newest), each with what it made or why it made nothing."""
EVERY_S = 1.0
"""How often a worker looks for due firings: a firing's job is submitted within about this long of its time."""
LOCK_S = 60
MISSED_COUNTED = 10_000
"""Missed firings counted at most (a schedule of every second, down for a day, says "over 10000")."""
CLAIM_S = 24 * 3600
"""How long a firing's claim is kept (a job's is its idempotency key, kept as long)."""


def _read_or_none(redis: Redis, name: str) -> dict[str, Any] | None:
    raw = redis.hget(SCHEDULES_KEY, name)
    return None if raw is None else json.loads(raw)


def _read(redis: Redis, name: str) -> dict[str, Any]:
    record = _read_or_none(redis, name)
    if record is None:
        raise NotFound(f"no schedule named {name!r} (gpudeck schedule ls lists them)", {"schedule": name})
    return record


def _write(redis: Redis, record: dict[str, Any]) -> None:
    with redis.pipeline() as pipe:
        pipe.hset(SCHEDULES_KEY, record["name"], json.dumps(record))
        if record["paused"] or record["next_at"] is None:
            pipe.zrem(SCHEDULES_DUE_KEY, record["name"])
        else:
            pipe.zadd(SCHEDULES_DUE_KEY, {record["name"]: record["next_at"]})
        pipe.execute()


def create(
    redis: Redis, body: Any, settings: Settings, owner: str | None = None, now: float | None = None
) -> dict[str, Any]:
    """Check `body` (its shape, then its job or sweep as a submission is checked, with nothing stored) and keep
    the schedule; 409 when the name is taken. The schedule as shown."""
    refused = problems(body)
    if refused:
        raise ValidationError(refused)
    now = time.time() if now is None else now
    what = "job" if body.get("job") is not None else "sweep"
    try:  # (checked as a submission is now, so that a firing at 2 a.m. is not the first to say it is wrong)
        if what == "job":
            control.dry_run(redis, body["job"], settings, extra={"owner": owner} if owner else None)
        else:
            sweeps.create(redis, body["sweep"], settings, owner=owner, dry_run=True)
    except ValidationError as exc:
        raise type(exc)({f"{what}.{k}": v for k, v in exc.fields.items()}) from None
    paused = bool(body.get("paused", False))
    record = {
        "name": body["name"],
        "cron": body["cron"],
        "tz": body.get("tz", "UTC"),
        "overlap": body.get("overlap", "skip"),
        "catch_up": body.get("catch_up", "none"),
        "kind": what,
        "body": body[what],
        "owner": owner,
        "created_at": now,
        "paused": paused,
        "next_at": next_firing(body["cron"], body.get("tz", "UTC"), now),
        "fired": 0,
        "last_made": None,
        "firings": [],
    }
    if not redis.hsetnx(SCHEDULES_KEY, record["name"], json.dumps(record)):
        raise Conflict(
            f"a schedule named {record['name']!r} exists (gpudeck schedule rm {record['name']} deletes it)",
            {"schedule": record["name"]},
        )
    _write(redis, record)
    return view(record)


def get(redis: Redis, name: str) -> dict[str, Any]:
    return view(_read(redis, name))


def listing(redis: Redis) -> list[dict[str, Any]]:
    return [view(json.loads(raw)) for _, raw in sorted(redis.hgetall(SCHEDULES_KEY).items())]


def owner_of(redis: Redis, name: str) -> str | None:
    return _read(redis, name).get("owner")


def pause(redis: Redis, name: str) -> dict[str, Any]:
    """No firing until resumed (those it would have had meanwhile are not made)."""
    record = _read(redis, name)
    record["paused"] = True
    _write(redis, record)
    return view(record)


def resume(redis: Redis, name: str, now: float | None = None) -> dict[str, Any]:
    """Firing again, from its next time after now."""
    record = _read(redis, name)
    if record["paused"]:
        record["paused"] = False
        record["next_at"] = next_firing(record["cron"], record["tz"], time.time() if now is None else now)
        _write(redis, record)
    return view(record)


def delete(redis: Redis, name: str) -> None:
    """The schedule goes; what it made stays (each job still names it)."""
    _read(redis, name)
    with redis.pipeline() as pipe:
        pipe.hdel(SCHEDULES_KEY, name)
        pipe.zrem(SCHEDULES_DUE_KEY, name)
        pipe.execute()


def view(record: dict[str, Any]) -> dict[str, Any]:
    """A schedule as the API answers it: its times as ISO 8601, its job's secrets not shown."""
    body = record["body"]
    if record["kind"] == "job":
        body = spec_mod.shown(body)
    elif isinstance(body.get("base"), dict):
        body = {**body, "base": spec_mod.shown(body["base"])}
    return {
        "name": record["name"],
        "cron": record["cron"],
        "tz": record["tz"],
        "overlap": record["overlap"],
        "catch_up": record["catch_up"],
        record["kind"]: body,
        "owner": record.get("owner"),
        "created_at": iso(record["created_at"]),
        "paused": record["paused"],
        "next_at": None if record["paused"] else iso(record["next_at"]),
        "fired": record["fired"],
        "last_made": record.get("last_made"),
        "firings": record["firings"],
    }


# -- firing ----------------------------------------------------------------------------------------------------------
def fire_due(redis: Redis, settings: Settings, now: float | None = None) -> list[dict[str, Any]]:
    """Make what every due schedule's firing makes (one process at a time: the caller holds TIMETABLE_LOCK_KEY).
    The firings handled, as kept in their schedules' records."""
    now = time.time() if now is None else now
    handled = []
    for raw in redis.zrangebyscore(SCHEDULES_DUE_KEY, "-inf", now):
        name = raw.decode()
        try:
            handled += _fire(redis, settings, _read(redis, name), now)
        except NotFound:  # (deleted meanwhile)
            redis.zrem(SCHEDULES_DUE_KEY, name)
    return handled


def _fire(redis: Redis, settings: Settings, record: dict[str, Any], now: float) -> list[dict[str, Any]]:
    cron, tz, next_at = record["cron"], record["tz"], record["next_at"]
    cut = now - MISSED_AFTER_S  # (a firing before it is a missed one)
    on_time = [t for t in [next_at, *firings(cron, tz, max(next_at, cut), now)] if cut <= t <= now]
    said: list[dict[str, Any]] = []
    if next_at < cut:
        missed = [next_at, *firings(cron, tz, next_at, cut, MISSED_COUNTED)]
        latest = last_firing(cron, tz, cut)
        first, last = iso(next_at), iso(latest)
        many = f"{len(missed)}" if len(missed) <= MISSED_COUNTED else f"over {MISSED_COUNTED}"
        when = first if first == last else f"{many} from {first} to {last}"
        said.append({"firing": last, "at": iso(now), "made": None, "why": f"missed ({when}): the service was down"})
        if not on_time and record["catch_up"] == "one":
            said[-1]["why"] += "; caught up with one now"
            on_time = [latest]
    if on_time:  # (several on time: the service was away under a minute; they make one)
        said.append(_make(redis, settings, record, on_time[-1], now))
    record["next_at"] = next_firing(record["cron"], record["tz"], now)
    record["firings"] = [*record["firings"], *said][-HISTORY:]
    current = _read_or_none(redis, record["name"])
    if current is None or current["created_at"] != record["created_at"]:
        return said  # (deleted, or deleted and made again, while it fired: what it made stays, its record goes)
    record["paused"] = current["paused"]
    _write(redis, record)
    return said


def _make(redis: Redis, settings: Settings, record: dict[str, Any], firing: float, now: float) -> dict[str, Any]:
    """One firing: its job (or sweep), unless its overlap rule says otherwise; what it made or why not."""
    said: dict[str, Any] = {"firing": iso(firing), "at": iso(now), "made": None, "why": None}
    last = record.get("last_made")
    if last is not None and not _ended(redis, last):
        what = f"{last['kind']} {last['id']}"
        if record["overlap"] == "skip":
            said["why"] = f"skipped: {what} it made last has not ended (overlap skip)"
            return said
        if record["overlap"] == "cancel-previous":
            _cancel(redis, last)
            said["why"] = f"canceled {what} it made last (overlap cancel-previous)"
    owner = record.get("owner")
    allowed = dataclasses.replace(settings, command_jobs=True)  # (the schedule's maker was allowed to submit it)
    try:
        if owner:  # (and still is, at each firing: a revoked or narrowed token makes nothing)
            who, why = tokens.named(redis, owner)
            body = record["body"] if record["kind"] == "job" else record["body"].get("base")
            refused = (why, {}) if who is None else tokens.refusal(who, body, spec_mod.is_command(body or {}))
            if refused is not None:
                raise Forbidden(refused[0], refused[1])
        made = _submit(redis, allowed, record, firing)
    except GpudeckError as exc:
        said["why"] = f"refused: {exc.message}"
        log.warning("schedule %s: its firing at %s made nothing: %s", record["name"], iso(firing), exc.message)
        return said
    said["made"] = made
    record["last_made"] = made
    record["fired"] += 1
    log.info("schedule %s: its firing at %s made %s %s", record["name"], iso(firing), made["kind"], made["id"])
    return said


def _submit(redis: Redis, settings: Settings, record: dict[str, Any], firing: float) -> dict[str, Any]:
    name, owner = record["name"], record.get("owner")
    tag = f"schedule:{name}"
    made_by = {"name": name, "firing": iso(firing)}
    if record["kind"] == "sweep":
        claim = schedule_fired_key(name, record["created_at"], firing)
        if not redis.set(claim, "", nx=True, ex=CLAIM_S):  # (made already: by a process that died before its record)
            made = (redis.get(claim) or b"").decode()
            raise Conflict(f"this firing made sweep {made} already" if made else "this firing is being made already")
        body = dict(record["body"])
        base = {**body["base"], "tags": [*(body["base"].get("tags") or []), tag]}
        try:
            sweep = sweeps.create(redis, {**body, "base": base}, settings, owner=owner)
        except BaseException:
            redis.delete(claim)  # (a refused sweep does not use up its firing)
            raise
        redis.set(claim, str(sweep["id"]), ex=CLAIM_S)
        return {"kind": "sweep", "id": sweep["id"]}
    spec = {**record["body"], "tags": [*(record["body"].get("tags") or []), tag]}
    extra: dict[str, Any] = {"schedule": made_by, **({"owner": owner} if owner else {})}
    # (once per firing, whichever process fires it, however often it restarts: the key names the firing)
    key = f"schedule {name} {record['created_at']!r} {firing!r}"
    rec, _ = control.submit(redis, spec, settings, idempotency_key=key, extra=extra)
    return {"kind": "job", "id": rec["id"]}


def _ended(redis: Redis, made: dict[str, Any]) -> bool:
    try:
        if made["kind"] == "job":
            return JobStore(redis).get(made["id"])["status"] in ENDED
        return sweeps.summary(redis, made["id"])["state"] != "running"
    except NotFound:
        return True  # (deleted)


def _cancel(redis: Redis, made: dict[str, Any]) -> None:
    try:
        if made["kind"] == "job":
            control.cancel(redis, made["id"])
        else:
            control.stop_sweep(redis, made["id"])
            for job_id in sweeps.record_of(redis, made["id"]).get("job_ids", []):
                try:
                    control.cancel(redis, job_id)
                except (NotFound, Conflict):
                    continue
    except (NotFound, Conflict):
        pass  # (deleted, or it ended meanwhile)


class Timetable(Periodic):
    """In each worker (and the Slurm agent): makes the due firings of the schedules, one process at a time."""

    what, every_s = "timetable", EVERY_S

    def __init__(self, settings: Settings):
        super().__init__(settings.redis_url or "", "gpudeck-timetable")
        self.settings = settings

    def round(self) -> None:
        if not self.redis.zrangebyscore(SCHEDULES_DUE_KEY, "-inf", time.time(), start=0, num=1):
            return
        self.under_lock(TIMETABLE_LOCK_KEY, LOCK_S, lambda: fire_due(self.redis, self.settings))
