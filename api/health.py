"""/healthz: is the job store reachable, and which workers are alive."""

from __future__ import annotations

from flask import Blueprint
from redis.exceptions import RedisError
from rq import Worker

from api import deps

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    try:
        deps.redis().ping()
        workers = Worker.all(connection=deps.redis())
    except RedisError as exc:
        return {"status": "unavailable", "redis": f"unreachable: {exc}", "workers": 0}, 503
    return {"status": "ok", "redis": "ok", "workers": len(workers)}
