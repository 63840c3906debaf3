"""Who a request is. With GPUDECK_TOKENS set or named tokens stored (`gpudeck token create`), every route but
/healthz needs a bearer token: a GPUDECK_TOKENS one is an anonymous admin, a named one is its user. With neither,
nobody is asked (a single-user machine: today's behaviour) and every request may do anything.

Bad tokens are logged, and past AUTH_FAILURES_MAX a minute from one address answered 429 with Retry-After."""

from __future__ import annotations

import hmac
import logging
from dataclasses import replace
from typing import Any

from flask import Flask, current_app, g, request
from redis.exceptions import RedisError

from api import deps
from api.errors import error_response
from jobs import projects, tokens
from jobs.errors import BadRequest, Forbidden
from jobs.keys import auth_failures_key
from jobs.run import sandbox
from jobs.settings import Settings
from jobs.spec import MAX_TIMEOUT_S, is_command
from jobs.tokens import User

log = logging.getLogger(__name__)

OPEN_PATHS = ("/healthz",)
AUTH_FAILURES_MAX = 10
AUTH_FAILURES_TOTAL_MAX = 100
"""Bad tokens a minute from all addresses together before every further one is answered 429."""
TOKEN_PREFIX = 12
"""Characters of a bad token that count it with others alike (`gpd_` and 8 more)."""
"""Bad tokens one address may send a minute before it is answered 429."""


def user() -> User | None:
    """This request's user (None: no tokens are configured, and everybody may do anything)."""
    return g.get("user")


def owner_name() -> str | None:
    """The owner of what this request creates: its named token's name (None: no name, or nobody is asked)."""
    who = user()
    return who.name if who is not None and who.named else None


def owned() -> dict[str, str] | None:
    """The record fields that make this request's user the owner of what it creates (None: no user)."""
    name = owner_name()
    return {"owner": name} if name else None


def owner_arg() -> str | None:
    """`?owner=NAME`, with `me` for this request's user."""
    owner = request.args.get("owner") or None
    if owner == "me":
        who = user()
        if who is None or not who.named:
            raise BadRequest(
                "owner=me needs a named token (gpudeck token create NAME); this request's has no name",
                {"field": "owner"},
            )
        return who.name
    return owner


def with_defaults(spec: Any) -> Any:
    """A spec with what the user's token gives a job that says nothing of it: its endpoints to notify, where it is
    exported."""
    who = user()
    if not isinstance(spec, dict) or who is None:
        return spec
    for field, given in (("notify", who.notify), ("export", who.export)):
        if given and field not in spec:
            spec = {**spec, field: list(given)}
    return spec


def settings_for_submit(spec: Any) -> Settings:
    """The settings a submission is validated with: where tokens name their users, a user may submit command
    jobs (tokens are required, as with GPUDECK_TOKENS) unless their token was made with --no-commands."""
    settings, who = deps.settings(), user()
    refused = tokens.refusal(who, spec, isinstance(spec, dict) and is_command(spec))
    if refused is not None:
        raise Forbidden(*refused)
    if who is None or who.admin:  # (GPUDECK_SESSION_MAX bounds users' sessions; an admin's may last longer)
        settings = replace(settings, session_max_s=MAX_TIMEOUT_S)
    if who is None or not who.named:
        return settings
    why = sandbox.command_refusal(settings.sandbox, settings.command_jobs_trusted)
    if isinstance(spec, dict) and is_command(spec) and why is not None:
        raise Forbidden(
            f"command jobs of named users need a sandbox, and this gpudeck cannot make one ({why}): without it a "
            "user who may run commands can act as the service. The operator can install bubblewrap, or accept that "
            "risk with GPUDECK_COMMAND_JOBS=trusted",
            {"rule": "no_sandbox", "user": who.name},
        )
    return replace(settings, command_jobs=True)


def may_priority(priority: str) -> None:
    """Forbidden when this request's token may not give a job `priority` (gpudeck token create --max-priority)."""
    refused = tokens.refusal(user(), {"priority": priority}, False)
    if refused is not None:
        raise Forbidden(*refused)


def may(owner: str | None, action: str, what: str, project: str | None = None) -> None:
    """Forbidden unless this request may `action` `what`, owned by `owner`: its owner or an admin (or anybody
    where no tokens are configured); given its `project`, an admin of that project too (steering its jobs)."""
    who = user()
    if who is None or who.admin or (owner is not None and owner == who.name):
        return
    if project is not None and who.named and projects.steers(deps.redis(), project, who.name):
        return
    whose = f"belongs to {owner}" if owner else "has no owner (it was made before tokens had names)"
    raise Forbidden(
        f"{what} {whose}: a user may {action} only their own; an admin token may {action} any",
        {"rule": "owner_or_admin", "owner": owner, "user": who.name},
    )


def names_only(owner: str | None) -> bool:
    """Whether this request sees only the names of a job's (or a sweep's) env, not its values: a user who is not
    its owner nor an admin (values of secret-looking names and `secret_env` are hidden from everybody)."""
    who = user()
    return not (who is None or who.admin or (owner is not None and owner == who.name))


def admin_only(action: str) -> None:
    who = user()
    if who is not None and not who.admin:
        raise Forbidden(
            f"only an admin may {action} (token {who.name!r} is a user's; gpudeck token create NAME --admin "
            "makes an admin's)",
            {"rule": "admin_only", "user": who.name},
        )


def register(app: Flask) -> None:
    """Install the check as a before_request hook."""

    @app.before_request
    def identify():
        g.user = None
        shared = deps.settings().tokens
        if request.path in OPEN_PATHS:
            return None
        named = tokens.any_named(deps.redis())
        if not shared and not named and not current_app.config.get("REQUIRE_TOKENS"):
            return None
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        given = given.strip()
        # Against every shared token in constant time, so timing says nothing about which is close.
        ok = False
        for token in shared:
            ok |= hmac.compare_digest(given.encode(), token.encode())
        if scheme.lower() == "bearer" and ok:
            g.user = tokens.SHARED
            return None
        if scheme.lower() != "bearer" or not given:
            return _unauthorized("no bearer token")
        found, why = tokens.identify(deps.redis(), given) if named else (None, "unknown token")
        if found is None:
            return _refuse(why, given)
        g.user = found
        return None


def _refuse(why: str, given: str = ""):
    """A wrong token: a guess, counted per address, per token prefix (guesses spread over many addresses) and in
    all; 429 past AUTH_FAILURES_MAX a minute for one address or prefix, or AUTH_FAILURES_TOTAL_MAX in all."""
    address = request.remote_addr or "?"
    redis = deps.redis()
    scopes = {
        f"address {address}": (auth_failures_key(f"address:{address}"), AUTH_FAILURES_MAX),
        "tokens starting like this one": (auth_failures_key(f"prefix:{given[:TOKEN_PREFIX]}"), AUTH_FAILURES_MAX),
        "all addresses": (auth_failures_key("total"), AUTH_FAILURES_TOTAL_MAX),
    }
    with redis.pipeline() as pipe:
        for key, _ in scopes.values():
            pipe.set(key, 0, ex=60, nx=True)  # a minute from the first
            pipe.incr(key)
            pipe.ttl(key)
        answers = pipe.execute()
    counts = {
        scope: (answers[3 * i + 1], answers[3 * i + 2], limit) for i, (scope, (_, limit)) in enumerate(scopes.items())
    }
    over = [(scope, ttl) for scope, (n, ttl, limit) in counts.items() if n > limit]
    failures, ttl = counts[f"address {address}"][:2]
    log.warning(
        "refused a request from %s to %s %s: %s (%d in the last minute)",
        address,
        request.method,
        request.path,
        why,
        failures,
    )
    if over:
        scope, ttl = over[0]
        where = f"from {address}" if scope.startswith("address") else f"for {scope}"
        resp, status = error_response(
            429,
            "too_many_requests",
            f"too many bad tokens {where} in a minute: try again in {max(ttl, 1)} s",
            {"retry_after_s": max(ttl, 1), "scope": scope.split()[0]},
        )
        resp.headers["Retry-After"] = str(max(ttl, 1))
        return resp, status
    return _unauthorized(why)


def _unauthorized(why: str):
    resp, status = error_response(
        401, "unauthorized", f"a valid 'Authorization: Bearer <token>' header is required ({why})"
    )
    resp.headers["WWW-Authenticate"] = 'Bearer realm="gpudeck"'
    return resp, status


AUDITED = ("POST", "PUT", "PATCH", "DELETE")


def register_audit(app: Flask) -> None:
    @app.after_request
    def record(response):
        who = user()
        # (where no tokens are configured there is nobody to tell apart: nothing is recorded, as before)
        if who is not None and request.method in AUDITED and request.path.startswith("/api/"):
            try:
                tokens.audit(
                    deps.redis(),
                    who.name,
                    request.remote_addr or "?",
                    request.method,
                    request.full_path.rstrip("?"),
                    response.status_code,
                )
            except RedisError as exc:  # (a Redis that refuses writes refused the request itself too)
                log.warning("audit: not recorded (%s): %s %s %s", exc, request.method, request.path, response.status)
        return response
