"""Bearer-token auth: with GPUDECK_TOKENS set, every route but /healthz needs one of those tokens."""

from __future__ import annotations

import hmac

from flask import Flask, request

from api import deps
from api.errors import error_response

OPEN_PATHS = ("/healthz",)


def register(app: Flask) -> None:
    """Install the check as a before_request hook (a no-op when no tokens are configured)."""

    @app.before_request
    def require_token():
        tokens = deps.settings().tokens
        if not tokens or request.path in OPEN_PATHS:
            return None
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        # Compare against every token in constant time, so timing says nothing about which is close.
        ok = False
        for token in tokens:
            ok |= hmac.compare_digest(given.strip().encode(), token.encode())
        if scheme.lower() == "bearer" and ok:
            return None
        resp, status = error_response(401, "unauthorized", "a valid 'Authorization: Bearer <token>' header is required")
        resp.headers["WWW-Authenticate"] = 'Bearer realm="gpudeck"'
        return resp, status
