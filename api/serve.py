"""`gpudeck api` (also `python -m api.serve`, as `gpudeck up` starts it): the Flask app under gunicorn."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
from typing import Any

from gunicorn.app.base import BaseApplication
from redis.exceptions import RedisError

from api.longpoll import RESERVED_THREADS, THREADS
from jobs import tokens
from jobs.cli import EXIT_OK, EXIT_USAGE, settings_from_env, setup_logging
from jobs.errors import ConfigError, GpudeckError
from jobs.settings import DEFAULT_PORT, Settings

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
        "worker_class": "gthread",
        "threads": threads,
        "timeout": 60,
        "graceful_timeout": 5,
        "accesslog": "-",
        "errorlog": "-",
        "loglevel": "info",
        "proc_name": "gpudeck-api",
    }
    _Gunicorn(app, options).run()


def cmd_api(args: argparse.Namespace) -> int:
    setup_logging()
    if args.threads <= RESERVED_THREADS:
        raise ConfigError(f"--threads must be more than {RESERVED_THREADS} (the threads long polls never take)")
    serve(settings_from_env(), host=args.host, port=args.port, workers=args.workers, threads=args.threads)
    return EXIT_OK


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register `api` on a `gpudeck` parser."""
    p = sub.add_parser("api", help="serve the REST API (gunicorn)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    p.add_argument(
        "--threads",
        type=int,
        default=THREADS,
        help=f"threads per process (long polls take at most all but {RESERVED_THREADS})",
    )
    p.set_defaults(func=cmd_api)


def main(argv: list[str] | None = None) -> int:
    """`python -m api.serve [--host] [--port] [--workers] [--threads]`."""
    parser = argparse.ArgumentParser(prog="python -m api.serve", description=__doc__)
    add_command(parser.add_subparsers(dest="command", required=True))
    try:
        return cmd_api(parser.parse_args(["api", *(sys.argv[1:] if argv is None else argv)]))
    except GpudeckError as exc:
        print(f"gpudeck: {exc.message}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
