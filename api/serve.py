"""`gpudeck api` (also `python -m api.serve`, as `gpudeck up` starts it): the Flask app under gunicorn."""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import Any

import click
from gunicorn.app.base import BaseApplication
from redis.exceptions import RedisError

from api.longpoll import RESERVED_THREADS, THREADS
from jobs import tokens
from jobs.cli import ServerCommand, settings_from_env, setup_logging
from jobs.errors import ConfigError
from jobs.settings import DEFAULT_PORT, Settings
from models.common import EXIT_OK

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


def _named_tokens(settings: Settings) -> bool:
    """Whether the stack's Redis holds a named token (a Redis that cannot be read holds none: refuse)."""
    try:
        return tokens.any_named(settings.redis())
    except RedisError as exc:
        log.warning("could not read the named tokens (%s)", exc)
        return False


def serve(
    settings: Settings, host: str = "127.0.0.1", port: int = DEFAULT_PORT, workers: int = 2, threads: int = THREADS
) -> None:
    """Serve the API until SIGTERM/SIGINT; refuses a non-loopback address unless tokens are set or named."""
    if not settings.redis_url:
        raise ConfigError("REDIS_URL is not set: point the API at the Redis the workers use (gpudeck up sets it)")
    public = not is_loopback(host)
    if public and not settings.tokens and not _named_tokens(settings):
        raise ConfigError(
            f"refusing to bind {host}: set GPUDECK_TOKENS or create a named token (gpudeck token create NAME --admin) "
            "before serving beyond this machine"
        )
    from api import create_app

    # (served beyond this machine, every request needs a token even if the named ones are all revoked later)
    app = create_app({"SETTINGS": settings, "START_REAPER": True, "API_THREADS": threads, "REQUIRE_TOKENS": public})
    options = {
        "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "workers": workers,
        # A thread per request: long polls (wait, log follow) wait in theirs; api.longpoll keeps a reserve of
        # threads they never take and ends the ones whose client has gone.
        # (gthread's, with request heads gathered by its event loop and slow readers timed out: api.guard)
        "worker_class": "api.guard.GuardedThreadWorker",
        "threads": threads,
        "timeout": 60,
        "graceful_timeout": 5,
        "accesslog": "-",
        "errorlog": "-",
        "loglevel": "info",
        "proc_name": "gpudeck-api",
    }
    _Gunicorn(app, options).run()


@click.command(cls=ServerCommand)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="port to bind")
@click.option("--workers", type=int, default=2, show_default=True, help="gunicorn worker processes")
@click.option(
    "--threads",
    type=int,
    default=THREADS,
    show_default=True,
    help=f"threads per process (long polls take at most all but {RESERVED_THREADS})",
)
def api(host, port, workers, threads) -> int:
    """Serve the REST API (gunicorn)."""
    setup_logging()
    if threads <= RESERVED_THREADS:
        raise ConfigError(f"--threads must be more than {RESERVED_THREADS} (the threads long polls never take)")
    serve(settings_from_env(), host=host, port=port, workers=workers, threads=threads)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """`python -m api.serve [--host] [--port] [--workers] [--threads]` (how `gpudeck up` starts the API)."""
    try:
        return int(api.main(args=argv, prog_name="python -m api.serve", standalone_mode=False) or 0)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
