"""A word when a job ends: the job's summary sent to the operator's endpoints (GPUDECK_WEBHOOKS) that the job
names in `notify`, signed (GPUDECK_WEBHOOK_SECRETS), in Slack's shape where the endpoint is marked so.

A delivery never delays or fails a job: the end queues it (`enqueue`, after the end is written) and a Notifier
thread — in the API and in every worker, one process at a time — sends what is due, retrying with backoff for a
day; every attempt is recorded in the job's `notifications`. Users name endpoints, never URLs: only the operator
decides where the server sends anything.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import uuid
from typing import Any

import requests
from redis import Redis

from jobs import outbox
from jobs.keys import (
    ADMIN_NOTIFICATIONS_KEY,
    NOTIFIER_LOCK_KEY,
    NOTIFY_DELIVERIES_KEY,
    NOTIFY_DUE_KEY,
    notifications_key,
)
from jobs.record import Job
from jobs.settings import Settings, Webhook
from models.common import NOTIFY_ENTRY

log = logging.getLogger(__name__)

ENDS = ("succeeded", "failed", "canceled", "stopped_early")
"""What `notify: ["lab"]` is sent for (`lab:any`: every change of status too)."""
BOX = outbox.Box(NOTIFY_DUE_KEY, NOTIFIER_LOCK_KEY, lock_s=120, batch=50)
"""The deliveries due: their ids (each delivery in NOTIFY_DELIVERIES_KEY); retried after GPUDECK_WEBHOOK_RETRY
seconds, then twice as long each time."""
SEND_TIMEOUT_S = 5.0
NOTIFY_EVERY_S = 0.5
KEEP_ATTEMPTS = 100
"""Attempts kept per job."""
SIGNATURE = "X-Gpudeck-Signature"
TIMESTAMP = "X-Gpudeck-Timestamp"


def event_of(status: str, reason: str | None) -> str:
    """The event a status change is: its status, or stopped_early for a trial its search stopped."""
    return "stopped_early" if status == "succeeded" and reason == "stopped_early" else status


def wanted(entry: str, event: str) -> bool:
    """Whether a `notify` entry (`lab`, `lab:failed,canceled`, `lab:any`) asks for `event`."""
    m = NOTIFY_ENTRY.fullmatch(entry)
    if m is None:
        return False
    events = (m.group(2) or "").split(",") if m.group(2) else list(ENDS)
    return "any" in events or event in events


def summary(rec: Job) -> dict[str, Any]:
    """What an endpoint is told of a job: id, name, owner, status, reason, message, result, duration (and, when
    sent, a link to it)."""
    started, ended = rec.get("started_at"), rec.get("ended_at")
    return {
        "id": rec["id"],
        "name": rec.spec.name or None,
        "owner": rec.get("owner"),
        "status": rec["status"],
        "reason": rec.get("reason"),
        "message": rec.get("message"),
        "result": rec.get("result"),
        "duration_s": round(ended - started, 1) if started and ended else None,
        "sweep_id": rec.get("sweep_id"),
    }


def enqueue(redis: Redis, rec: Job) -> list[str]:
    """Queue the notifications the job asks for its current status (`rec` as just written); the ids queued."""
    entries = rec.spec.notify
    if not entries:
        return []
    event = event_of(rec["status"], rec.get("reason"))
    names = tuple(entry.partition(":")[0] for entry in entries if wanted(entry, event))
    return _queue(redis, names, rec["id"], event, summary(rec))


def enqueue_event(redis: Redis, endpoints: tuple[str, ...], event: str, told: dict[str, Any]) -> list[str]:
    """Queue a notification of the box itself (no job: a GPU cordoned, `told` its host, GPU, XID) to the operator's
    admin endpoints (GPUDECK_ADMIN_NOTIFY); the ids queued."""
    return _queue(redis, endpoints, None, event, told)


def _queue(redis: Redis, endpoints: tuple[str, ...], job: int | None, event: str, told: dict[str, Any]) -> list[str]:
    """One delivery per endpoint, due now, in one transaction; the ids queued."""
    ids, now = [], time.time()
    with redis.pipeline(transaction=True) as pipe:
        for name in endpoints:
            delivery_id = uuid.uuid4().hex
            delivery = {"id": delivery_id, "endpoint": name, "job": job, "event": event, "summary": told,
                        "created_at": now, "attempts": 0}  # fmt: skip
            pipe.hset(NOTIFY_DELIVERIES_KEY, delivery_id, json.dumps(delivery))
            BOX.put(pipe, delivery_id, now)
            ids.append(delivery_id)
        pipe.execute()
    return ids


def body_of(hook: Webhook, event: str, told: dict[str, Any]) -> bytes:
    """The request body: the summary as JSON (with the event), or Slack's {"text": …} for a Slack endpoint; an
    event of the box (no job) says what it is about (`gpu`)."""
    if "id" not in told:  # (the box's own: a GPU cordoned)
        if not hook.slack:
            return json.dumps({"event": event, "gpu": told}, separators=(",", ":")).encode()
        said = f"gpudeck: GPU {told.get('gpu')} of {told.get('host')} {event.replace('_', ' ')}: Xid {told.get('xid')}"
        return json.dumps({"text": f"{said} ({told.get('text', '')})"}).encode()
    if not hook.slack:
        return json.dumps({"event": event, "job": told}, separators=(",", ":")).encode()
    what = f"job {told['id']}" + (f" ({told['name']})" if told.get("name") else "")
    said = f"gpudeck: {what} {event}"
    if told.get("reason") and told["reason"] != event:
        said += f" ({told['reason']})"
    if told.get("duration_s") is not None:
        said += f" after {told['duration_s']:.0f} s"
    if told.get("message"):
        said += f": {told['message']}"
    result = told.get("result") or {}
    if result:
        said += " — " + ", ".join(f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, (int, float)))
    return json.dumps({"text": f"{said} <{told['url']}|open>"}).encode()


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 with the endpoint's secret over `<timestamp>.<body>` (a receiver rejects an old
    timestamp: a replayed delivery)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def send(hook: Webhook, event: str, told: dict[str, Any], base_url: str) -> tuple[bool, str]:
    """One attempt: (delivered, what happened: the status code, or the error's class). Never the error's text: it
    holds the URL, and a Slack incoming webhook's secret is its path."""
    body = body_of(hook, event, {**told, "url": f"{base_url}/api/v1/jobs/{told['id']}"} if "id" in told else told)
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", "User-Agent": "gpudeck-webhook", TIMESTAMP: timestamp}
    if hook.secret:
        headers[SIGNATURE] = sign(hook.secret, timestamp, body)
    try:
        resp = requests.post(hook.url, data=body, headers=headers, timeout=SEND_TIMEOUT_S, allow_redirects=False)
    except requests.RequestException as exc:
        return False, type(exc).__name__
    return 200 <= resp.status_code < 300, str(resp.status_code)


def attempts(redis: Redis, job_id: int) -> list[dict[str, Any]]:
    """Every recorded attempt of the job's notifications, oldest first, and the deliveries still pending."""
    return [json.loads(raw) for raw in redis.lrange(notifications_key(job_id), 0, -1)]


def deliver(redis: Redis, settings: Settings, now: float | None = None) -> int:
    """Send every delivery due now (one attempt each); the number sent."""
    return BOX.deliver(redis, lambda delivery_id: _send(redis, settings, delivery_id), now)


def _send(redis: Redis, settings: Settings, delivery_id: str) -> int:
    """One attempt at a delivery, recorded on its job (or the box's own list) and settled; 1 when it was sent."""
    raw = redis.hget(NOTIFY_DELIVERIES_KEY, delivery_id)
    if raw is None:
        BOX.settle(redis, delivery_id, None)
        return 0
    d = json.loads(raw)
    hook = settings.webhook(d["endpoint"])
    d["attempts"] += 1
    if hook is None:  # the operator removed the endpoint since
        ok, said = False, f"no endpoint {d['endpoint']!r} in GPUDECK_WEBHOOKS any more"
    else:
        ok, said = send(hook, d["event"], d["summary"], settings.public_url or "http://localhost:8686")
    given_up = not ok and (hook is None or outbox.gave_up(d["created_at"]))
    record = {"delivery": delivery_id, "endpoint": d["endpoint"], "event": d["event"], "attempt": d["attempts"],
              "at": time.time(), "delivered": ok, "answer": said}  # fmt: skip
    if given_up:
        record["gave_up"] = True
    kept = notifications_key(d["job"]) if d["job"] is not None else ADMIN_NOTIFICATIONS_KEY
    with redis.pipeline(transaction=True) as pipe:
        pipe.rpush(kept, json.dumps(record))
        pipe.ltrim(kept, -KEEP_ATTEMPTS, -1)
        if ok or given_up:
            pipe.hdel(NOTIFY_DELIVERIES_KEY, delivery_id)
            BOX.settle(pipe, delivery_id, None)
        else:
            pipe.hset(NOTIFY_DELIVERIES_KEY, delivery_id, json.dumps(d))
            BOX.settle(pipe, delivery_id, time.time() + outbox.backoff(d["attempts"], settings.webhook_retry_s))
        pipe.execute()
    if not ok:
        log.info("notification of job %s to %s: %s (attempt %s)", d["job"], d["endpoint"], said, d["attempts"])
    return int(hook is not None)


class Notifier(outbox.Outbox):
    """Sends due notifications, in one process at a time (a lock held for the round)."""

    what, every_s, box = "notifier", NOTIFY_EVERY_S, BOX

    def __init__(self, settings: Settings):
        super().__init__(settings.redis_url or "", "gpudeck-notifier")
        self.settings = settings

    def wanted(self) -> bool:
        return bool(self.settings.webhooks)

    def deliver(self) -> int:
        return deliver(self.redis, self.settings)
