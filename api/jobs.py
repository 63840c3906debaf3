"""/api/v1/jobs: submit, list, show, logs, metrics."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict

from flask import Blueprint, Response, current_app, request

from api import auth, deps, longpoll
from api.finite import finite
from jobs import control, export, gang, notify, plan, steer, usage
from jobs.backends import base as backends
from jobs.compare import csv_cell
from jobs.errors import BadRequest, NotFound
from jobs.record import Job
from jobs.views import LIVE, job_view
from models.common import search_text
from models.states import PRIORITIES, Status

bp = Blueprint("jobs", __name__)

MAX_PAGE = 500
"""Most jobs one list page returns."""
MAX_OFFSET = 2**62
"""Largest log offset or list cursor a request may give."""
MAX_WAIT_S = 3600
"""Longest a single /wait request holds (clients loop for longer waits)."""
WAIT_POLL_S = 0.25
"""How often /wait re-reads the job record."""


@bp.post("")
def submit():
    body = auth.with_defaults(deps.json_body())
    settings = auth.settings_for_submit(body)
    key = request.headers.get("Idempotency-Key")
    extra = auth.owned()
    if deps.bool_arg("dry_run"):  # (checked as a submission is; nothing stored, nothing placed)
        return control.dry_run(deps.redis(), body, settings, extra=extra), 200
    if key is None:
        rec, _ = control.submit(deps.redis(), body, settings, extra=extra)
        return views([rec])[0], 201, {"Location": f"/api/v1/jobs/{rec['id']}"}
    if not 0 < len(key) <= 255:
        raise BadRequest("Idempotency-Key must be 1 to 255 characters", {"field": "Idempotency-Key"})
    rec, replayed = control.submit(deps.redis(), body, settings, idempotency_key=key, extra=extra)
    headers = {"Location": f"/api/v1/jobs/{rec['id']}", "Idempotent-Replayed": str(replayed).lower()}
    return views([rec])[0], 200 if replayed else 201, headers


@bp.post("/<int:job_id>/cancel")
def cancel(job_id: int):
    steered = deps.store().get(job_id)  # (its owner, an admin, or an admin of its project)
    auth.may(steered.get("owner"), "cancel", f"job {job_id}", steered.spec.project)
    rec = control.cancel(deps.redis(), job_id)
    if rec.get("stop_unrecorded"):  # 202: the stop is under way but Redis could not record it (its disk is full)
        message = (
            "Redis cannot write (its disk is full), so the cancel is not recorded yet: the job's worker stops it now "
            "and records its end once Redis can write again; free space with `gpudeck rm` of ended jobs"
        )
        return {**job_view(rec), "message": message}, 202
    return job_view(rec)


@bp.patch("/<int:job_id>")
def update(job_id: int):
    """A queued job's priority: {"priority": "high" | "normal" | "low"} (409 once it has left the line)."""
    body = deps.json_body()
    if not isinstance(body, dict) or set(body) != {"priority"}:
        raise BadRequest('the body is {"priority": "high" | "normal" | "low"}', {"field": "body"})
    priority = body["priority"]
    if priority not in PRIORITIES:
        raise BadRequest(
            f"priority must be one of {', '.join(PRIORITIES)}, got {json.dumps(priority)}", {"field": "priority"}
        )
    steered = deps.store().get(job_id)
    auth.may(steered.get("owner"), "change the priority of", f"job {job_id}", steered.spec.project)
    auth.may_priority(priority)
    rec = steer.reprioritize(deps.redis(), job_id, priority, deps.settings())
    return views([rec], with_tasks=True)[0]


@bp.post("/<int:job_id>/move")
def move(job_id: int):
    """A queued job's place in its line: {"before": ID}, {"after": ID} or {"top": true}."""
    body = deps.json_body()
    if not isinstance(body, dict) or len(body) != 1 or not set(body) <= {"before", "after", "top"}:
        raise BadRequest('the body is one of {"before": ID}, {"after": ID}, {"top": true}', {"field": "body"})
    ((field, value),) = body.items()
    if field == "top":
        if value is not True:
            raise BadRequest(f"top must be true, got {json.dumps(value)}", {"field": "top"})
    elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(f"{field} must be a job id, got {json.dumps(value)}", {"field": field})
    store = deps.store()
    steered = store.get(job_id)
    auth.may(steered.get("owner"), "move", f"job {job_id}", steered.spec.project)
    target = {"before": None, "after": None, **({field: value} if field != "top" else {})}
    rec = backends.of(deps.settings()).move(deps.redis(), job_id, **target)
    return views([rec], with_tasks=True)[0]


@bp.delete("/<int:job_id>")
def delete(job_id: int):
    """An ended job, gone for good: its record, streams, references and job dir (409 while it is not ended)."""
    auth.may(deps.store().get(job_id).get("owner"), "delete", f"job {job_id}")
    return {**control.delete(deps.redis(), deps.settings(), [job_id])[0], "deleted": True}


@bp.post("/<int:job_id>/retry")
def retry(job_id: int):
    """The job again, as a new job; a model job resumes from the last checkpoint the job left unless the
    optional body says {"resume": false}."""
    body = deps.json_body() if request.content_length else {}
    if not isinstance(body, dict) or set(body) - {"resume"}:
        raise BadRequest('the body, when there is one, is {"resume": true|false}', {"field": "body"})
    resume = body.get("resume", True)
    if not isinstance(resume, bool):
        raise BadRequest(f"resume must be true or false, got {json.dumps(resume)}", {"field": "resume"})
    old = deps.store().get(job_id)
    auth.may(old.get("owner"), "retry", f"job {job_id}")
    settings = auth.settings_for_submit(old["spec"])
    # (the new job is the old one's owner's: an admin's retry of alice's job counts against alice's quota)
    owner = {"owner": old["owner"]} if old.get("owner") else auth.owned()
    rec = control.retry(deps.redis(), job_id, settings, resume=resume, extra=owner)
    return views([rec])[0], 201, {"Location": f"/api/v1/jobs/{rec['id']}"}


@bp.post("/<int:job_id>/export")
def export_job(job_id: int):
    """Export the ended job to the operator's MLflow now (the optional body: {"target": "mlflow"})."""
    body = deps.json_body() if request.content_length else {}
    if not isinstance(body, dict) or set(body) - {"target"} or body.get("target", "mlflow") != "mlflow":
        raise BadRequest('the body, when there is one, is {"target": "mlflow"}', {"field": "target"})
    auth.may(deps.store().get(job_id).get("owner"), "export", f"job {job_id}")
    return views([export.ask(deps.redis(), deps.settings(), job_id)])[0], 202


@bp.get("")
def list_jobs():
    deps.only_args(request.args, ("status", "model", "tag", "owner", "q", "limit", "cursor"))
    limit = deps.int_arg("limit", 50, 1, MAX_PAGE)
    cursor = deps.int_arg("cursor", 0, 0, MAX_OFFSET) or None
    statuses = _statuses(request.args.get("status"))
    model, tag = request.args.get("model") or None, request.args.get("tag") or None
    owner = auth.owner_arg()
    words = (request.args.get("q") or "").lower().split()

    def keep(rec: dict) -> bool:
        spec = rec["spec"]
        return (
            (statuses is None or rec["status"] in statuses)
            and (model is None or spec.get("model") == model)
            and (tag is None or tag in spec.get("tags", ()))
            and (owner is None or rec.get("owner") == owner)
            and (not words or all(w in search_text(rec) for w in words))
        )

    filtered = (statuses, model, tag, owner) != (None, None, None, None) or bool(words)
    store = deps.store()
    recs = store.list(limit=limit + 1, before=cursor, where=keep if filtered else None)
    next_cursor = recs[limit - 1]["id"] if len(recs) > limit else None
    # An ETag, so a client that polls the list (the TUI, every 2 s) is answered 304 with no body for a page that
    # has not changed since it last read it (old pages of ended jobs seldom do).
    body = {"jobs": views(recs[:limit]), "next_cursor": next_cursor, "total": store.count()}
    resp = current_app.json.response(body)
    resp.add_etag()
    return resp.make_conditional(request)


def views(recs: list[Job], with_tasks: bool = False) -> list[dict]:
    """Job records as the API answers them, with each queued job's place in line and expected start, and each
    running job's usage (CPU, memory, GPU)."""
    redis = deps.redis()
    line, starts = backends.of(deps.settings()).lines(redis, recs, deps.settings())
    used = usage.read(redis, [r["id"] for r in recs if r["status"] in ("starting", "running")])
    history = plan.learned(redis, [r for r in recs if r["status"] in LIVE])
    return [
        job_view(
            r,
            tasks=gang.view(redis, r) if with_tasks else None,
            queue_position=line.get(r["id"]),
            expected_start=starts.get(r["id"], (None, None)),
            expected=plan.expected(r, history) if r["status"] in LIVE else (None, None),
            learned=history.learned(r) if r["status"] in LIVE else None,
            usage=used.get(r["id"]),
            names_only=auth.names_only(r.get("owner")),
        )
        for r in recs
    ]


def _statuses(raw: str | None) -> set[str] | None:
    if not raw:
        return None
    wanted = {s.strip() for s in raw.split(",") if s.strip()}
    known = {s.value for s in Status}
    bad = sorted(wanted - known)
    if bad:
        raise BadRequest(
            f"query argument status: unknown status {bad[0]!r}; known: {', '.join(known)}", {"field": "status"}
        )
    return wanted


@bp.get("/<int:job_id>")
def show(job_id: int):
    return views([deps.store().get(job_id)], with_tasks=True)[0]


@bp.get("/<int:job_id>/wait")
def wait(job_id: int):
    """Answer when the job has ended or `timeout` seconds (default 60, at most 3600) have passed; a long poll
    (api.longpoll): it ends early, answering nobody, when its client has gone."""
    deps.only_args(request.args, ("timeout",))
    timeout = deps.int_arg("timeout", 60, 0, MAX_WAIT_S)
    store = deps.store()
    rec = store.get(job_id)
    if Status(rec["status"]).ended or timeout == 0:
        return views([rec], with_tasks=True)[0]
    slots, client, environ = _long_poll_slots()
    slots.acquire(client)
    try:
        deadline = time.monotonic() + timeout
        while not Status(rec["status"]).ended and time.monotonic() < deadline:
            time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))
            if longpoll.client_gone(environ):
                return Response(status=499)  # nobody reads it; the server closes the connection
            rec = store.get(job_id)
    finally:
        slots.release(client)
    return views([rec], with_tasks=True)[0]


def _long_poll_slots() -> tuple[longpoll.Slots, str, dict]:
    """This process's long-poll slots (each forked process has its own copy of the app's), the client's address
    and the request's WSGI environ (where gunicorn puts the client's socket)."""
    return current_app.extensions["gpudeck.longpolls"], request.remote_addr or "unknown", request.environ


FOLLOW_BLOCK_MS = 1000
"""How long a follow stream waits in Redis for a new line before it looks at the job and its client again."""


@bp.get("/<int:job_id>/logs")
def logs(job_id: int):
    """Lines after line `offset`; with follow=1 a stream that ends when the job has ended (or its client has
    gone: a long poll, api.longpoll). X-Next-Offset is the offset to resume from: after this answer's lines
    (plain), or before the first streamed line (follow: add the lines received). With live=1 the line the job
    is drawing (a progress bar before its newline) comes after the last line, after a `\r` and with no newline:
    once (plain, when the answer reaches the end), or each time it changes, at most once a second (follow)."""
    deps.only_args(request.args, ("offset", "follow", "live"))
    store = deps.store()
    store.get(job_id)  # 404 for an unknown job
    offset = deps.int_arg("offset", 0, 0, MAX_OFFSET)
    live = deps.bool_arg("live")
    if not deps.bool_arg("follow"):
        lines, next_offset = store.read_lines(job_id, offset)
        body = "".join(line + "\n" for line in lines)
        if live and (drawn := store.live_line(job_id)) is not None and not store.read_lines(job_id, next_offset, 1)[0]:
            body += "\r" + drawn
        return Response(body, mimetype="text/plain", headers={"X-Next-Offset": str(next_offset)})
    slots, client, environ = _long_poll_slots()
    headers = {"X-Next-Offset": str(offset), "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    response = Response(_follow(store, job_id, offset, environ, live), mimetype="text/plain", headers=headers)
    return longpoll.held_while_sent(response, slots, client)


def _follow(store, job_id: int, offset: int, environ: dict, live: bool):
    yield ""  # the headers go out now: the client knows it is streaming before the first line
    drawn = None  # the live line last sent (a line sent after it starts with "\r": it replaces it)
    while True:
        ended = Status(store.get(job_id)["status"]).ended  # read before the lines: none written before the end
        lines, nxt = store.read_lines(job_id, offset)  # is missed
        if lines:
            offset = nxt
            yield ("\r" if drawn is not None else "") + "".join(line + "\n" for line in lines)
            drawn = None
        elif ended:
            return
        else:
            if live and (now := store.live_line(job_id)) is not None and now != drawn:
                drawn = now
                yield "\r" + now
            store.wait_lines(job_id, offset, FOLLOW_BLOCK_MS)
            if longpoll.client_gone(environ):
                return


@bp.get("/<int:job_id>/notifications")
def notifications(job_id: int):
    """Every delivery attempt of the job's notifications (endpoint, event, attempt, when, delivered, the answer: a
    status code or an exception's class, never a URL): its owner's and admins' to see; anybody else's 404, as for a
    job that does not exist (which endpoints a person's jobs tell is theirs)."""
    deps.only_args(request.args, ())
    rec = deps.store().get(job_id)  # 404 for an unknown job
    who = auth.user()
    if who is not None and not who.admin and rec.get("owner") != who.name:
        raise NotFound(f"job {job_id} does not exist", {"id": job_id})
    return {
        "job_id": job_id,
        "notify": rec["spec"].get("notify") or [],
        "attempts": notify.attempts(deps.redis(), job_id),
    }


@bp.get("/<int:job_id>/metrics")
def metrics(job_id: int):
    deps.only_args(request.args, ("format", "run"))
    store = deps.store()
    rec = store.get(job_id)
    fmt = request.args.get("format", "json")
    if fmt not in ("json", "csv"):
        raise BadRequest(f"query argument format must be json or csv, got {fmt!r}", {"field": "format"})
    run = request.args.get("run")
    if run is not None and run not in (rec.get("runs") or []):
        raise BadRequest(f"job {job_id} has no run {run!r}; its runs: {rec.get('runs') or []}", {"field": "run"})
    if fmt == "csv":
        return Response(
            _csv([p for p in store.read_points(job_id) if run in (None, p.get("run"))]), mimetype="text/csv"
        )
    if run is not None:  # one training of a script that trained several times (its points only)
        points = [finite(p) for p in store.read_points(job_id) if p.get("run") == run]
        train = [p for p in points if any(k not in POINT_KEYS and not k.startswith("val_") for k in p)]
        validation = [p for p in points if any(k.startswith("val_") for k in p)]
        return {"job_id": job_id, "train": train, "validation": validation}
    series = _series(store, job_id, rec)
    body = b"".join((b'{"job_id":%d,"train":[' % job_id, series.train, b'],"validation":[', series.validation, b"]}"))
    return Response(body, mimetype="application/json")


class _Series:
    """One job's points as the JSON text Redis holds, split train/validation once and kept as the comma-separated
    inside of each array: a reload reads only the points written since, and answering copies two buffers instead
    of parsing and dumping every point (a long run has 100,000)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget every point (under `lock`, which stays the same object)."""
        self.oldest: int | None = None
        self.last = 0
        self.train = bytearray()
        self.validation = bytearray()

    @staticmethod
    def add(buf: bytearray, raw: bytes) -> None:
        if buf:
            buf += b","
        buf += raw


MAX_SERIES = 32
"""Jobs whose points one API process keeps (the most recently read)."""


def _series(store, job_id: int, rec: dict) -> _Series:
    cache: OrderedDict = current_app.extensions.setdefault("gpudeck.series", OrderedDict())
    key = (job_id, rec.get("created_at"))  # a job id that is reused (deleted, a new Redis) is a new series
    with _series_lock:
        series = cache.pop(key, None) or _Series()
        cache[key] = series
        while len(cache) > MAX_SERIES:
            cache.popitem(last=False)
    with series.lock:
        oldest, new = store.read_points_raw(job_id, series.last)
        if series.last and oldest != series.oldest:  # trimmed (MAXLEN) or rewritten: read it all again
            series.reset()
            oldest, new = store.read_points_raw(job_id, 0)
        series.oldest = oldest
        for n, raw in new:
            point = json.loads(raw)
            if b"NaN" in raw or b"Infinity" in raw:  # as json.dumps wrote a diverged loss: not JSON
                raw = json.dumps(finite(point), separators=(",", ":"), allow_nan=False).encode()
            if any(k.startswith("val_") for k in point):
                series.add(series.validation, raw)
            if any(k not in POINT_KEYS and not k.startswith("val_") for k in point):
                series.add(series.train, raw)  # a script that logs both at one step: on both curves
            series.last = n
        return series


_series_lock = threading.Lock()


POINT_KEYS = ("step", "epoch", "time", "run")
"""Fields of a metric point that place it rather than measure something."""


CSV_COLUMNS = ("step", "epoch", "loss", "accuracy", "lr", "images_per_sec", "val_loss", "val_accuracy")
"""The zoo's columns first; a command job's other scalars follow in the order they first appear."""


def _csv(points: list[dict]) -> str:
    columns = list(CSV_COLUMNS)
    for p in points:
        columns.extend(k for k in p if k not in columns and k != "time")
    rows = [",".join(csv_cell(c) for c in columns)]
    for p in points:
        rows.append(",".join("" if p.get(c) is None else str(p[c]) for c in columns))
    return "\n".join(rows) + "\n"
