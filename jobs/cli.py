"""The server commands of `gpudeck`: `up` (the whole stack) and `worker`. `python -m jobs.cli worker …` is how
`gpudeck up` starts its workers; the `gpudeck` console script (tui.cli) dispatches here too."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from jobs.errors import ConfigError, GpudeckError
from jobs.settings import DEFAULT_PORT, Settings, parse_age, parse_size
from models.protocol import DEFAULT_GRACE_S

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
"""Exit codes of every gpudeck command: success, a job failed (or fell below --min-accuracy), usage or input
error, API unreachable."""


def settings_from_env(home: Path | None = None) -> Settings:
    """This process's Settings, with --home (when given) in place of GPUDECK_HOME."""
    env = dict(os.environ)
    if home is not None:
        env["GPUDECK_HOME"] = str(home)
    return Settings.from_env(env)


def setup_logging() -> None:
    """Logging of a server process, configured once at its entry point."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def cmd_up(args: argparse.Namespace) -> int:
    from jobs.supervisor import up

    setup_logging()
    gpus = None if args.gpus is None else [g for g in args.gpus.split(",") if g != ""]
    return up(settings_from_env(args.home), host=args.host, port=args.port, gpus=gpus, cpu_workers=args.cpu_workers)


def _bytes(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size like 8G or 512M, got {text!r}") from None


def cmd_worker(args: argparse.Namespace) -> int:
    if args.drain:
        return args.drain_over_api(args.drain)
    if not args.cpu and not args.gpus:
        print("gpudeck worker: give --gpus LIST or --cpu (or --drain NAME)", file=sys.stderr)
        return EXIT_USAGE
    from jobs import worker

    setup_logging()
    gpus = [] if args.cpu else [g.strip() for g in args.gpus.split(",") if g.strip()]
    worker.run(
        settings_from_env(),
        gpus,
        name=args.name,
        burst=args.burst,
        stop_grace_s=args.stop_grace,
        max_memory=args.max_memory,
    )
    return EXIT_OK


def _server_redis(settings: Settings):
    """The stack's Redis, from this host: REDIS_URL, else the embedded one `gpudeck up` runs under the home."""
    from redis import Redis

    if settings.redis_url:
        return settings.redis()
    from jobs.redis_server import EmbeddedRedis

    sock = EmbeddedRedis.running_socket(settings.home / "redis")  # (where `gpudeck up` runs it: jobs.supervisor)
    if sock is not None:
        return Redis(unix_socket_path=str(sock))
    raise ConfigError(
        f"no Redis to keep tokens in: run this on the server, where `gpudeck up` runs with "
        f"GPUDECK_HOME={settings.home} (its Redis is not there now), or set REDIS_URL to the stack's Redis"
    )


def cmd_token(args: argparse.Namespace) -> int:
    """Named tokens, on the server against its Redis: create (printed once), ls, revoke."""
    import getpass
    import json

    from redis.exceptions import RedisError

    from jobs import tokens

    settings = settings_from_env(args.home)
    redis = _server_redis(settings)
    try:
        redis.ping()
    except RedisError as exc:
        raise ConfigError(f"cannot reach the stack's Redis ({settings.redis_url or 'embedded'}): {exc}") from None
    who = f"server:{getpass.getuser()}"
    if args.action == "ls":
        listed = tokens.list_all(redis)
        if args.json:
            print(json.dumps(listed, indent=2))
            return EXIT_OK
        print(f"{'NAME':<20} {'ROLE':<6} {'MAX GPUS':>8} {'COMMANDS':<8} {'CREATED':<17} {'LAST USED':<17} EXPIRES")
        for t in listed:
            print(
                f"{t['name']:<20} {t['role']:<6} {_or_dash(t['max_gpus']):>8} {'yes' if t['commands'] else 'no':<8} "
                f"{_when(t['created_at']):<17} {_when(t['last_used_at']):<17} {_when(t['expires_at'])}"
            )
        return EXIT_OK
    if not args.name:
        print(f"gpudeck token {args.action} NAME", file=sys.stderr)
        return EXIT_USAGE
    if args.action == "revoke":
        tokens.revoke(redis, args.name)
        tokens.audit(redis, who, "local", "TOKEN", f"revoke {args.name}", 0)
        print(f"revoked {args.name}: its next request is refused")
        return EXIT_OK
    token = tokens.create(
        redis,
        args.name,
        admin=args.admin,
        max_gpus=args.max_gpus,
        commands=not args.no_commands,
        expires_s=args.expires,
    )
    role = "admin" if args.admin else "user"
    tokens.audit(redis, who, "local", "TOKEN", f"create {args.name}", 0, detail=role)
    print(token)
    print(
        f"(the token of {args.name}, a {role}: shown this once; clients send it as GPUDECK_TOKEN or "
        "'Authorization: Bearer …')",
        file=sys.stderr,
    )
    return EXIT_OK


def _or_dash(value) -> str:
    return "-" if value is None else str(value)


def _when(ts: float | None) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def _age_s(text: str) -> int:
    try:
        return parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _no_api(name: str) -> int:
    print("gpudeck worker --drain: run it through the `gpudeck` command (it asks the API)", file=sys.stderr)
    return EXIT_USAGE


def add_commands(sub: argparse._SubParsersAction, drain_over_api: Callable[[str], int] = _no_api) -> None:
    """Register `up` and `worker` on a `gpudeck` parser; `drain_over_api(name)` serves `worker --drain NAME`
    (a request to the API, which the client side of the CLI makes)."""
    p = sub.add_parser("up", help="start Redis, the API and one worker per GPU; Ctrl-C stops all")
    p.add_argument("--host", default="127.0.0.1", help="address the API binds (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"API port (default {DEFAULT_PORT})")
    p.add_argument("--home", type=Path, help="data root (default $GPUDECK_HOME or ~/.local/share/gpudeck)")
    p.add_argument("--gpus", help="GPU indices to start workers for, e.g. 0,1 (default: nvidia-smi -L)")
    p.add_argument("--cpu-workers", type=int, help="CPU workers (default: 1 when there is no GPU)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("worker", help="run one worker pinned to GPUs (or the CPU), or drain one")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--gpus", help="GPU indices this worker owns, e.g. 0 or 2,3")
    g.add_argument("--cpu", action="store_true", help="a CPU-only worker")
    g.add_argument(
        "--drain", metavar="NAME", help="ask worker NAME (see GET /api/v1/workers) to finish its job and exit"
    )
    p.add_argument("--name", help="worker name (default host.gpuN.pid)")
    p.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    p.add_argument(
        "--stop-grace",
        type=float,
        default=DEFAULT_GRACE_S,
        help=f"seconds between SIGTERM and SIGKILL on cancel ({DEFAULT_GRACE_S:g}); the trainer gets a little less",
    )
    p.add_argument("--max-memory", type=_bytes, help="cap each trainer's memory (RLIMIT_DATA), e.g. 16G")
    p.set_defaults(func=cmd_worker, drain_over_api=drain_over_api)

    p = sub.add_parser(
        "token", help="named tokens, on the server: token create NAME [--admin], token ls, token revoke NAME"
    )
    p.add_argument("action", choices=("create", "ls", "revoke"))
    p.add_argument("name", nargs="?", help="the token's name: who it is (create, revoke)")
    p.add_argument("--admin", action="store_true", help="may do anything: others' jobs, draining workers, the audit")
    p.add_argument("--max-gpus", type=int, metavar="N", help="the most GPUs this user's running jobs hold at once")
    p.add_argument("--no-commands", action="store_true", help="may not submit command jobs (your own code)")
    p.add_argument("--expires", type=_age_s, metavar="AGE", help="refused after this long: 90d, 12h, 2w")
    p.add_argument("--home", type=Path, help="data root of the stack (default $GPUDECK_HOME)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_token)


def main(argv: list[str] | None = None) -> int:
    """`python -m jobs.cli up|worker …`."""
    parser = argparse.ArgumentParser(prog="python -m jobs.cli", description=__doc__)
    add_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except GpudeckError as exc:
        print(f"gpudeck: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
