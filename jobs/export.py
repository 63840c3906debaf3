"""Ended jobs exported to the operator's MLflow (GPUDECK_MLFLOW_URI), for the jobs whose spec says
`"export": ["mlflow"]` (or their token's default) and whenever a job's owner asks (POST /api/v1/jobs/ID/export).

An export never delays or fails a job: the end queues it (`enqueue`, after the end is written) and an Exporter
thread in the API — one process at a time — makes it with models.mlflowrun, retrying with backoff for a day. Its
state is the job record's `export` (`{"mlflow": {"status": "pending|exported|retrying|failed", "run_id", "error",
"attempts", "at"}}`), which `GET /api/v1/jobs/ID` and `gpudeck show` show. Only the operator's URI is ever called:
a user exports elsewhere from their own machine (`gpudeck export ID --mlflow URI`)."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from redis import Redis

from jobs import jobfiles, outbox
from jobs.errors import Conflict, NotFound, Unprocessable
from jobs.keys import (
    EXPORT_DUE_KEY,
    EXPORTER_LOCK_KEY,
    SEARCHING_KEY,
    job_key,
    sweep_key,
    sweep_stop_key,
    sweep_trials_key,
)
from jobs.record import Job
from jobs.settings import Settings
from jobs.store import JobStore
from jobs.views import job_view
from models.states import ENDED

log = logging.getLogger(__name__)

FIRST_RETRY_S = outbox.FIRST_RETRY_S
EXPORT_EVERY_S = 1.0
BOX = outbox.Box(EXPORT_DUE_KEY, EXPORTER_LOCK_KEY, lock_s=600, batch=20)
"""The exports due: job ids (their state on the record, `export.mlflow`)."""
ARTIFACTS = ("model.keras", "result.json")
"""The files of a job dir an export uploads (where the API's host sees the job dir)."""
NO_URI = (
    "the operator has not set GPUDECK_MLFLOW_URI, so the server exports nowhere; export from your machine with "
    "`gpudeck export ID --mlflow URI`, or ask the operator to set it where `gpudeck up` (the API) runs"
)


def wanted(rec: Job) -> bool:
    """Whether the job asks to be exported to MLflow when it ends."""
    return "mlflow" in rec.spec.export


def enqueue(redis: Redis, rec: Job, asked: bool = False) -> bool:
    """Queue the job's export (`rec` as just written) when it ended and asks for one (`asked`: its owner asked
    now); whether it was queued."""
    if rec["status"] not in ENDED or not (asked or wanted(rec)):
        return False
    state = {**((rec.get("export") or {}).get("mlflow") or {}), "status": "pending", "queued_at": time.time()}
    with redis.pipeline(transaction=True) as pipe:
        JobStore(redis).update(rec["id"], pipe=pipe, export={"mlflow": state})
        BOX.put(pipe, str(rec["id"]))
        pipe.execute()
    return True


def ask(redis: Redis, settings: Settings, job_id: int) -> Job:
    """Its owner asks for the job's export now (POST /api/v1/jobs/ID/export): the record, queued."""
    if not settings.mlflow_uri:
        raise Unprocessable(NO_URI, {"field": "target"})
    rec = JobStore(redis).get(job_id)
    if rec["status"] not in ENDED:
        raise Conflict(f"job {job_id} is {rec['status']}: only an ended job is exported", {"status": rec["status"]})
    enqueue(redis, rec, asked=True)
    return JobStore(redis).get(job_id)


@contextlib.contextmanager
def artifact_copies(settings: Settings, job_id: int) -> Iterator[list[Path]]:
    """The job's ARTIFACTS that are regular files reached through no link (jobs.jobfiles), as the service's own
    files in a folder beside the job dirs (hard links where it can: no space taken), for the MLflow client, which
    reads by path; gone after. A `model.keras` that points at /proc/self/environ or a root-only file is not sent."""
    if not settings.job_dir(job_id).is_dir():  # (no files on this host)
        yield []
        return
    folder = Path(tempfile.mkdtemp(prefix=f".{job_id}.export-", dir=settings.jobs_dir))
    try:
        made = []
        for name in ARTIFACTS:
            try:
                jobfiles.copy_file(settings.job_dir(job_id), name, folder, name, link=True)
            except OSError:
                continue
            made.append(folder / name)
        yield made
    finally:
        shutil.rmtree(folder, ignore_errors=True)


FAILED_SEARCH = "the search failed: "
"""How a search that raised says so in its stop (jobs.search.FAILED; that module is above this one)."""
USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")


def redacted(text: str, uri: str | None = None) -> str:
    """`text` without credentials: a URL's user and password (`https://***@host`), and the configured URI's
    password wherever else it appears."""
    text = USERINFO.sub(r"\1***@", text)
    password = urlsplit(uri or "").password
    if password and len(password) >= 3:
        text = text.replace(password, "***")
    return text


def sweep_times(redis: Redis, store: JobStore, sweep_id: int) -> tuple[float | None, tuple[str, float] | None]:
    """For a sweep's parent run: when the sweep was made, and (its MLflow status, when it ended) once it runs no
    more — no search round drives it, every job of it ended (issue 67 #3: the parent stayed RUNNING after the search
    ended) — else None."""
    raw = redis.get(sweep_key(sweep_id))
    if raw is None:
        return None, None
    record = json.loads(raw)
    began = float(record["created_at"]) if record.get("created_at") else None
    if redis.sismember(SEARCHING_KEY, sweep_id):
        return began, None
    if record.get("search", "grid") == "grid":
        ids = list(record.get("job_ids") or [])
    else:
        ids = [json.loads(v).get("job") for v in redis.hvals(sweep_trials_key(sweep_id))]
    ends = []
    for job_id in (i for i in ids if i is not None):
        try:
            rec = store.get(int(job_id))
        except NotFound:
            continue  # (deleted since)
        if rec["status"] not in ENDED:
            return began, None
        ends.append(float(rec.get("ended_at") or 0))
    stop = (redis.get(sweep_stop_key(sweep_id)) or b"").decode()
    return began, ("FAILED" if stop.startswith(FAILED_SEARCH) else "FINISHED", max(ends, default=time.time()))


def deliver(redis: Redis, settings: Settings, now: float | None = None) -> int:
    """Make every export due now (one attempt each); the number made."""
    now = time.time() if now is None else now
    return BOX.deliver(redis, lambda item: _export(redis, settings, int(item), now), now)


def _export(redis: Redis, settings: Settings, job_id: int, now: float) -> int:
    """One attempt at a job's export, its state written on the record and the item settled; 1 when it was made."""
    from models import mlflowrun  # (the client library loads only where something is exported)

    store = JobStore(redis)
    try:
        rec = store.get(job_id)
    except NotFound:  # (deleted since: nothing to export)
        BOX.settle(redis, str(job_id), None)
        return 0
    state = dict((rec.get("export") or {}).get("mlflow") or {})
    state["attempts"] = state.get("attempts", 0) + 1
    try:
        if not settings.mlflow_uri:
            raise mlflowrun.ExportError("GPUDECK_MLFLOW_URI is not set any more")
        sweep_id = rec.get("sweep_id")
        began, over = sweep_times(redis, store, int(sweep_id)) if sweep_id is not None else (None, None)
        with artifact_copies(settings, job_id) as files:
            done = mlflowrun.export(
                settings.mlflow_uri,
                job_view(rec),
                store.read_points(job_id),
                files,
                settings.mlflow_experiment,
                sweep_began=began,
                sweep_ended=over,
            )
    except mlflowrun.ExportError as exc:
        given_up = outbox.gave_up(float(state.get("queued_at") or now))
        error = redacted(str(exc), settings.mlflow_uri)  # (every user reads the record: no credential in it)
        state.update(status="failed" if given_up else "retrying", error=error, at=time.time())
        state["next_at"] = None if given_up else time.time() + outbox.backoff(state["attempts"])
        log.info("export of job %s to MLflow: %s (attempt %s)", job_id, exc, state["attempts"])
    else:
        state = {"status": "exported", "run_id": done.run_id, "experiment_id": done.experiment_id,
                 "points": done.points, "attempts": state["attempts"], "at": time.time()}  # fmt: skip
    if not redis.exists(job_key(job_id)):  # (deleted while it was exported: no half record made again)
        BOX.settle(redis, str(job_id), None)
        return 0
    with redis.pipeline(transaction=True) as pipe:
        store.update(job_id, pipe=pipe, export={"mlflow": state})
        BOX.settle(pipe, str(job_id), state["next_at"] if state["status"] == "retrying" else None)
        pipe.execute()
    return int(state["status"] == "exported")


class Exporter(outbox.Outbox):
    """Makes the due exports, in one process at a time (a lock held for the round)."""

    what, every_s, box = "exporter", EXPORT_EVERY_S, BOX

    def __init__(self, settings: Settings):
        super().__init__(settings.redis_url or "", "gpudeck-exporter")
        self.settings = settings

    def deliver(self) -> int:
        return deliver(self.redis, self.settings)
