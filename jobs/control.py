"""What a user asks of jobs: submit (placing a multi-worker job at once when it can), cancel, retry, delete."""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from typing import Any

from redis import Redis
from redis.exceptions import RedisError, WatchError

from jobs import (
    accounts,
    archives,
    disk,
    forecast,
    gang,
    lifecycle,
    objectstore,
    plan,
    projects,
    queues,
    quota,
    search,
    sweeps,
    views,
)
from jobs.backends import base as backends
from jobs.errors import Conflict, NotFound
from jobs.keys import (
    INDEX_KEY,
    job_key,
    job_keys,
    sweep_key,
)
from jobs.outcome import CANCELED_QUEUED
from jobs.placement import host_gpus, memory
from jobs.record import Job, Kept
from jobs.settings import Settings
from jobs.store import JobStore, cannot_write, iso, through_outage
from models.states import Reason, Status

log = logging.getLogger(__name__)


def submit(
    redis: Redis,
    body: Any,
    settings: Settings,
    idempotency_key: str | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[Job, bool]:
    """Validate and queue a job (once per Idempotency-Key when one is given); it is placed right away when it can
    start. Returns (record, replayed). Refused while the disk is below
    GPUDECK_MIN_FREE."""
    disk.ensure_room(settings, "a new job")
    if idempotency_key is None:
        rec, replayed = queues.submit(redis, body, settings, extra=extra), False
    else:
        rec, replayed = queues.submit_once(redis, body, idempotency_key, settings, extra=extra)
    if not replayed:
        backends.of(settings).queued(redis, rec["id"], settings)  # (it starts now when it can)
        rec = JobStore(redis).get(rec["id"])
    return rec, replayed


def dry_run(redis: Redis, body: Any, settings: Settings, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What submitting `body` would do, with nothing stored: the spec as it would be queued (checked as a submission
    is: the same 400, 403 and 404 answers, the owner's quota), its queue, how long it is expected to run and from
    what, its expected start were it the last in line (the scheduler's plan: jobs.forecast), and the GPU-hours that
    is (its GPUs times its tasks times its expected duration; a share of a GPU counts its part)."""
    spec = queues.validate(redis, body, settings)
    owner = (extra or {}).get("owner")
    project = projects.settle(redis, owner, spec)
    queues.refuse_over_budget(redis, project)
    typed = Kept(spec)
    quota.check_fits(redis, owner, typed, project)
    rec = Job(id=0, spec=spec, owner=owner)
    took, source = plan.expected(rec, plan.learned(redis, [rec]))
    start: float | None
    why: str | None
    if typed.after:
        start, why = None, queues.waiting_for(list(typed.after))
    else:
        start, why = forecast.estimate(redis, settings, also=rec).get(0, (None, None))
    gpus = float(quota.job_gpus(typed))
    if typed.gpu_memory and gpus:  # (its part of the largest live GPU: where it lands is not known yet)
        totals = [total for total, _, _ in memory(redis, list(host_gpus(redis))).values()]
        gpus = min(1.0, typed.gpu_memory / max(totals)) if totals else 1.0
    return {
        "dry_run": True,
        "spec": spec,
        "queue": queues.queue_name(typed.gpus, typed.priority),
        "expected_duration_s": took,
        "expected_duration_from": source,
        "expected_start": iso(start) if start is not None else None,
        "expected_start_note": why if start is None else "were it the last in line (fair share may put it earlier)",
        "gpu_hours": round(gpus * took / 3600, 4) if took is not None else None,
    }


def cancel(redis: Redis, job_id: int) -> dict[str, Any]:
    """A queued job leaves its queue; a starting or running one gets SIGTERM from its work-horse, a grace
    period to checkpoint, then SIGKILL (the work-horse polls for the request, wherever the API runs)."""
    try:
        return _cancel(redis, job_id)
    except RedisError as exc:
        if not cannot_write(exc):
            raise
        return _cancel_unrecorded(redis, job_id, exc)


def _cancel(redis: Redis, job_id: int) -> dict[str, Any]:
    store = JobStore(redis)
    rec = store.get(job_id)
    if lifecycle.end(redis, job_id, CANCELED_QUEUED, rec, allowed=(Status.QUEUED.value,)):
        queues.withdraw(redis, rec)
        return store.get(job_id)
    rec = store.get(job_id)
    if Status(rec["status"]).ended:
        raise Conflict(
            f"job {job_id} already {rec['status']}; only queued or running jobs can be canceled",
            {"id": job_id, "status": rec["status"]},
        )
    store.request_stop(job_id, Reason.CANCELED.value)
    if rec.spec.multi_worker:
        gang.finish(redis, job_id)  # tasks still waiting for their workers end here; running ones stop
    return store.get(job_id)


def _cancel_unrecorded(redis: Redis, job_id: int, refusal: RedisError) -> dict[str, Any]:
    """Redis cannot write (its disk is full), so the stop cannot be recorded; a running job is still stopped (a
    job filling the disk must be stoppable): its work-horses hear it over Pub/Sub, which Redis still serves, stop
    it as usual, and record its end once Redis can write again. The record comes back with `stop_unrecorded`.
    A queued job (which uses no disk) waits: the refusal stands."""
    store = JobStore(redis)
    rec = store.get(job_id)
    if rec["status"] not in (Status.STARTING.value, Status.RUNNING.value):
        raise refusal
    if not store.announce_stop(job_id, Reason.CANCELED.value):
        raise refusal  # no work-horse listens (between two attempts): nothing was stopped
    log.warning("job %s: canceled while Redis cannot write (%s); its work-horse stops it", job_id, refusal)
    return dict(rec, stop_unrecorded=Reason.CANCELED.value)


def stop_sweep(redis: Redis, sweep_id: int, redis_url: str | None = None) -> dict[str, Any]:
    """Launch no more trials of a sweep (running ones finish): a search asks for no more; a grid's jobs still
    queued are canceled. The sweep as summarized after."""
    record = sweeps.record_of(redis, sweep_id)
    search.stop(redis, sweep_id)
    if record.get("search", "grid") == "grid":
        store = JobStore(redis)
        for job_id in record.get("job_ids", []):
            try:
                if store.get(job_id)["status"] == Status.QUEUED.value:
                    cancel(redis, job_id)
            except (NotFound, Conflict):
                continue  # (deleted, or it started meanwhile: it finishes)
    return sweeps.summary(redis, sweep_id, redis_url)


def retry(
    redis: Redis,
    job_id: int,
    settings: Settings,
    resume: bool = True,
    extra: dict[str, Any] | None = None,
) -> Job:
    """Submit an ended job's spec again, as a new job with the next id (a command job: the same source snapshot).
    A model job `resume`s from the last complete checkpoint the job left (its worker links it in); a command
    job's script keeps its own state."""
    rec = JobStore(redis).get(job_id)
    if not Status(rec["status"]).ended:
        raise Conflict(f"job {job_id} is {rec['status']}; only an ended job can be retried", {"id": job_id})
    spec = rec["spec"]
    # (the tasks of a multi-worker job start over: each restores from a folder of its own)
    typed = Kept(spec)
    resumes = resume and not typed.runs_code and not typed.multi_worker
    fields = {**(extra or {}), **({"resumes": job_id} if resumes else {})}
    return submit(redis, spec, settings, extra=fields or None)[0]


def delete(redis: Redis, settings: Settings, job_ids: list[int]) -> list[dict[str, Any]]:
    """Delete ended jobs for good: each one's record, log and metric streams, the Idempotency-Keys and sweeps
    that name it, and its job dir. Per job it is all or nothing in Redis (one transaction, which also checks it
    has ended: Conflict otherwise); the job dir goes after, renamed aside first, so a crash in between leaves no
    half of a job the API shows. Returns [{id, bytes_freed}] in the order given."""
    store = JobStore(redis)
    recs = {}
    for job_id in job_ids:
        rec = store.get(job_id)  # NotFound for a job that does not exist
        if not Status(rec["status"]).ended:
            raise Conflict(
                f"job {job_id} is {rec['status']}: only an ended job can be deleted (cancel it first)",
                {"id": job_id, "status": rec["status"]},
            )
        recs[job_id] = rec
    out = []
    for job_id, rec in recs.items():
        sweeps = [sweep_key(s) for s in [views.sweep_id(rec)] if s is not None]
        slots = [rec["idempotency"]] if rec.get("idempotency") else []
        aside = settings.jobs_dir / f".deleted-{job_id}-{uuid.uuid4().hex[:8]}"
        try:
            _forget(redis, job_id, rec, slots, sweeps)
            freed = archives.discard(settings.job_dir(job_id), aside)
        except RedisError as exc:
            if not cannot_write(exc):
                raise
            # Redis's disk is full: the job's files go first (that is the room Redis needs to write again), then
            # its records, once Redis takes writes again (it retries its own save every second)
            freed = archives.discard(settings.job_dir(job_id), aside)
            log.warning("job %s: Redis cannot write (%s); its %d bytes of files freed first", job_id, exc, freed)
            forget = functools.partial(_forget, redis, job_id, rec, slots, sweeps)
            through_outage(forget, f"deleting job {job_id}", FULL_WAIT_S)
        entry: dict[str, Any] = {"id": job_id, "bytes_freed": freed}
        kept = objectstore.Store.of(settings.artifacts) if rec.get("artifacts") else None
        if kept is not None:  # (its objects too: what it left in the store goes with it)
            try:
                entry["objects_deleted"] = kept.delete(job_id)
            except objectstore.StoreError as exc:
                entry["store_error"] = str(exc)
                log.warning("job %s deleted, but not its objects: %s", job_id, exc)
        out.append(entry)
        log.info("job %s deleted (%s, ended %s)", job_id, rec["status"], rec.get("ended_at"))
    return out


FULL_WAIT_S = 15.0
"""How long a delete that freed space waits for Redis to take writes again."""


def expired(redis: Redis, settings: Settings, now: float | None = None) -> list[tuple[int, str, float]]:
    """The ended jobs GPUDECK_RETENTION says to delete at `now`: [(id, status, ended_at)], oldest id first."""
    rules = dict(settings.retention)
    if not rules:
        return []
    now = time.time() if now is None else now
    ids = [int(i) for i in redis.zrange(INDEX_KEY, 0, -1)]
    out = []
    for start in range(0, len(ids), 5000):
        chunk = ids[start : start + 5000]
        with redis.pipeline(transaction=False) as pipe:
            for job_id in chunk:
                pipe.hmget(job_key(job_id), "status", "ended_at")
            answers = pipe.execute()
        for job_id, (status, ended_at) in zip(chunk, answers):
            if status is None or ended_at is None or status.decode() not in rules:
                continue
            ended = float(ended_at)
            if ended <= now - rules[status.decode()]:
                out.append((job_id, status.decode(), ended))
    return out


def apply_retention(redis: Redis, settings: Settings, now: float | None = None) -> list[int]:
    """Delete the jobs GPUDECK_RETENTION no longer keeps, each one logged with its rule; the ids deleted."""
    now = time.time() if now is None else now
    rules = dict(settings.retention)
    deleted = []
    for job_id, status, ended in expired(redis, settings, now):
        try:
            freed = delete(redis, settings, [job_id])[0]["bytes_freed"]
        except (NotFound, Conflict):  # deleted or retried meanwhile
            continue
        log.warning(
            "retention: deleted job %s (%s %.1f days ago; GPUDECK_RETENTION keeps %s jobs %.1f days; %d bytes freed)",
            job_id,
            status,
            (now - ended) / 86400,
            status,
            rules[status] / 86400,
            freed,
        )
        deleted.append(job_id)
    return deleted


def _forget(redis: Redis, job_id: int, rec: Job, slots: list[str], sweeps: list[str]) -> None:
    """Everything of one job in Redis, in one transaction that holds only while the job is still ended and the
    sweeps that name it unchanged."""
    keys = job_keys(job_id, rec.spec.workers, int(rec.get("gen") or 0))
    with redis.pipeline() as pipe:
        while True:
            try:
                pipe.watch(job_key(job_id), *sweeps)
                status = pipe.hget(job_key(job_id), "status")
                if status is None:
                    raise NotFound(f"job {job_id} does not exist", {"id": job_id})
                if not Status(status.decode()).ended:
                    raise Conflict(f"job {job_id} is {status.decode()} again: not deleted", {"id": job_id})
                records = {key: pipe.get(key) for key in sweeps}
                pipe.multi()
                pipe.zrem(INDEX_KEY, job_id)
                pipe.delete(*keys, *slots)
                accounts.keep(pipe, job_id, rec)  # (deleting a job does not delete its accounting)
                for key, raw in records.items():
                    if raw:
                        sweep = json.loads(raw)
                        sweep["job_ids"] = [i for i in sweep["job_ids"] if i != job_id]
                        pipe.set(key, json.dumps(sweep), keepttl=True)
                pipe.execute()
                return
            except WatchError:
                continue
