"""/api/v1/whoami (who this token is) and /api/v1/audit (the state changes of the stack; admins)."""

from __future__ import annotations

import time

from flask import Blueprint, request

from api import auth, deps
from jobs.errors import BadRequest
from jobs.keys import AUDIT_KEY
from jobs.settings import parse_age
from jobs.store import iso

bp = Blueprint("users", __name__)

MAX_AUDIT = 1000


@bp.get("/whoami")
def whoami():
    who = auth.user()
    if who is None:
        return {"name": None, "role": "admin", "auth": "none", "max_gpus": None, "commands": None, "max_priority": None}
    return {
        "name": who.name if who.named else None,
        "role": who.role,
        "auth": "named" if who.named else "shared",
        "max_gpus": who.max_gpus,
        "commands": who.commands if who.named else None,
        "max_priority": who.max_priority,
    }


@bp.get("/audit")
def audit():
    """Newest first: `?user=NAME`, `?since=1d` (an age) and `?limit=N` (100, at most MAX_AUDIT)."""
    auth.admin_only("read the audit trail")
    deps.only_args(request.args, ("user", "since", "limit"))
    limit = deps.int_arg("limit", 100, 1, MAX_AUDIT)
    who = request.args.get("user") or None
    low = "-"
    if request.args.get("since"):
        try:
            age = parse_age(request.args["since"])
        except ValueError as exc:
            raise BadRequest(f"since: {exc}", {"field": "since"}) from None
        if age >= time.time():
            raise BadRequest(f"since: {request.args['since']} goes back before 1970", {"field": "since"})
        low = str(int((time.time() - age) * 1000))
    entries = []
    high = "+"
    while len(entries) < limit:
        batch = deps.redis().xrevrange(AUDIT_KEY, high, low, count=500)
        for entry_id, fields in batch:
            entry = {k.decode(): v.decode() for k, v in fields.items()}
            if who is None or entry["user"] == who:
                ms = int(entry_id.decode().split("-")[0])
                entries.append({"time": iso(ms / 1000), **entry, "status": int(entry["status"])})
        if len(batch) < 500:
            break
        high = "(" + batch[-1][0].decode()
    return {"entries": entries[:limit], "next_cursor": None}
