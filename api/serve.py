"""`gpudeck api`: the Flask app under gunicorn, a production WSGI server."""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from gunicorn.app.base import BaseApplication

from jobs.errors import ConfigError
from jobs.settings import Settings

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Gunicorn(BaseApplication):
    def __init__(self, app: Any, options: dict[str, Any]):
        self.application = app
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self.application


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8686, workers: int = 2, threads: int = 8) -> None:
    """Serve the API until SIGTERM/SIGINT; refuses a non-loopback address unless tokens are set."""
    if not settings.redis_url:
        raise ConfigError("REDIS_URL is not set: point the API at the Redis the workers use (gpudeck up sets it)")
    if not is_loopback(host) and not settings.tokens:
        raise ConfigError(f"refusing to bind {host}: set GPUDECK_TOKENS before serving beyond this machine")
    from api import create_app

    app = create_app({"SETTINGS": settings, "START_REAPER": True})
    options = {
        "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "workers": workers,
        "worker_class": "gthread",  # threads keep long-polling (wait, log follow) from blocking others
        "threads": threads,
        "timeout": 60,
        "graceful_timeout": 5,
        "accesslog": "-",
        "errorlog": "-",
        "loglevel": "info",
        "proc_name": "gpudeck-api",
    }
    _Gunicorn(app, options).run()
