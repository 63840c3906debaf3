"""The server commands of `gpudeck`: `up` (the whole stack), `worker` and `token`, on click. The `gpudeck` console
script (tui.cli) loads this module only when one of them runs; `python -m jobs.cli worker …` is how `gpudeck up`
starts its workers."""

from __future__ import annotations

import getpass
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from jobs.backends import base as backends
from jobs.errors import ConfigError, GpudeckError
from jobs.settings import DEFAULT_PORT, Settings
from models.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, parse_age, parse_size
from models.protocol import DEFAULT_GRACE_S


def settings_from_env(home: Path | None = None) -> Settings:
    """This process's Settings, with --home (when given) in place of GPUDECK_HOME."""
    env = dict(os.environ)
    if home is not None:
        env["GPUDECK_HOME"] = str(home)
    return Settings.from_env(env)


def setup_logging() -> None:
    """Logging of a server process, configured once at its entry point."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


class Parsed(click.ParamType):
    """A value read by one of models.common's parsers (sizes, ages), its ValueError a usage error."""

    def __init__(self, name: str, parse, example: str):
        self.name, self.parse, self.example = name, parse, example

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return self.parse(value)
        except ValueError:
            self.fail(f"expected {self.example}, got {value!r}", param, ctx)


class Refusal(click.ClickException):
    """A server command's refusal (ConfigError and the other GpudeckErrors): one line, `gpudeck: …`, exit 2, the
    same wherever the command runs (`gpudeck`, `python -m jobs.cli`, click's CliRunner)."""

    exit_code = EXIT_USAGE

    def show(self, file=None) -> None:
        click.echo(f"gpudeck: {self.message}", err=True, file=file)


class ServerCommand(click.Command):
    """A click command whose GpudeckError is a Refusal."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except GpudeckError as exc:
            raise Refusal(exc.message) from None


home_option = click.option(
    "--home", type=click.Path(path_type=Path), help="data root (default $GPUDECK_HOME or ~/.local/share/gpudeck)"
)


@click.command(cls=ServerCommand)
@click.option("--host", default="127.0.0.1", show_default=True, help="address the API binds")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="API port")
@home_option
@click.option("--gpus", help="GPU indices to start workers for, e.g. 0,1 (default: nvidia-smi -L)")
@click.option("--cpu-workers", type=int, help="CPU workers (default: 1 when there is no GPU)")
@click.option(
    "--backend",
    type=click.Choice(["local", "slurm"]),
    help="where jobs run: gpudeck's own workers (local), or the lab's Slurm (default $GPUDECK_BACKEND, else local)",
)
def up(host, port, home, gpus, cpu_workers, backend) -> int:
    """Start Redis, the API and one worker per GPU (or, with --backend slurm, the agent that runs jobs on Slurm);
    Ctrl-C stops all."""
    from jobs.supervisor import up as run_stack

    setup_logging()
    if backend is not None:
        os.environ["GPUDECK_BACKEND"] = backend
    settings = settings_from_env(home)
    backends.of(settings).check_up(gpus, cpu_workers)
    chosen = None if gpus is None else [g for g in gpus.split(",") if g != ""]
    return run_stack(settings, host=host, port=port, gpus=chosen, cpu_workers=cpu_workers)


@click.command(cls=ServerCommand)
@click.option("--gpus", help="GPU indices this worker owns, e.g. 0 or 2,3")
@click.option("--cpu", is_flag=True, help="a CPU-only worker")
@click.option("--name", help="worker name (default host.gpuN.pid)")
@click.option("--burst", is_flag=True, help="exit when the queues are empty")
@click.option(
    "--idle-exit",
    type=click.FloatRange(min=1),
    metavar="SECONDS",
    help="exit after this long without a job (gpudeck up's extra job slots, started for shares that waited)",
)
@click.option(
    "--stop-grace",
    type=float,
    default=DEFAULT_GRACE_S,
    help=f"seconds between SIGTERM and SIGKILL on cancel ({DEFAULT_GRACE_S:g}); the trainer gets a little less",
)
@click.option(
    "--max-memory",
    type=Parsed("SIZE", parse_size, "a size like 8G or 512M"),
    help="cap each trainer's memory (RLIMIT_DATA), e.g. 16G",
)
def worker(gpus, cpu, name, burst, idle_exit, stop_grace, max_memory) -> int:
    """Run one worker pinned to GPUs (or the CPU); `gpudeck drain NAME` asks one to finish its job and exit."""
    if cpu and gpus:
        click.echo("gpudeck worker: --gpus and --cpu exclude each other: give one", err=True)
        return EXIT_USAGE
    if not cpu and not gpus:
        click.echo("gpudeck worker: give --gpus LIST or --cpu", err=True)
        return EXIT_USAGE
    from jobs import worker as rq_worker

    setup_logging()
    rq_worker.run(
        settings_from_env(),
        [] if cpu else [g.strip() for g in gpus.split(",") if g.strip()],
        name=name,
        burst=burst,
        idle_exit_s=idle_exit,
        stop_grace_s=stop_grace,
        max_memory=max_memory,
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


def _token_store(home: Path | None):
    """(the stack's Redis, checked reachable, and who this is in the audit)."""
    from redis.exceptions import RedisError

    settings = settings_from_env(home)
    redis = _server_redis(settings)
    try:
        redis.ping()
    except RedisError as exc:
        raise ConfigError(f"cannot reach the stack's Redis ({settings.redis_url or 'embedded'}): {exc}") from None
    return redis, f"server:{getpass.getuser()}"


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


@click.group()
def token() -> None:
    """Named tokens, on the server against its Redis: create (printed once), ls, revoke."""


@token.command(name="create", cls=ServerCommand)
@click.argument("name", required=False)
@click.option("--admin", is_flag=True, help="may do anything: others' jobs, draining workers, the audit")
@click.option("--max-gpus", type=int, metavar="N", help="the most GPUs this user's running jobs hold at once")
@click.option("--no-commands", is_flag=True, help="may not submit command jobs (your own code)")
@click.option(
    "--max-priority",
    type=click.Choice(["high", "normal", "low"]),
    help="the highest priority this user may give a job (high jobs preempt lower ones)",
)
@click.option("--expires", type=Parsed("AGE", parse_age, "an age such as 90d, 12h or 2w"), help="refused after this")
@click.option(
    "--notify",
    multiple=True,
    metavar="NAME[:EVENTS]",
    help="the operator's endpoint told of this user's jobs that name none (repeatable; GPUDECK_WEBHOOKS)",
)
@click.option(
    "--export",
    multiple=True,
    type=click.Choice(["mlflow"]),
    help="export this user's jobs that say nothing of it to the operator's MLflow when they end (GPUDECK_MLFLOW_URI)",
)
@click.option(
    "--slurm-account",
    metavar="ACCOUNT",
    help="on Slurm (GPUDECK_BACKEND=slurm): the Slurm account this user's jobs are charged to (default "
    "GPUDECK_SLURM_ACCOUNT), so Slurm's fair share sees people, not the service",
)
@home_option
def token_create(name, admin, max_gpus, no_commands, max_priority, expires, notify, export, slurm_account, home) -> int:
    """Create the token NAME and print it (only its hash is kept: it is shown this once)."""
    from jobs import tokens

    if not name:
        click.echo("gpudeck token create NAME", err=True)
        return EXIT_USAGE
    redis, who = _token_store(home)
    made = tokens.create(
        redis,
        name,
        admin=admin,
        max_gpus=max_gpus,
        commands=not no_commands,
        expires_s=expires,
        max_priority=max_priority,
        notify=tuple(notify),
        webhooks=tuple(w.name for w in settings_from_env(home).webhooks),
        export=tuple(export),
        slurm_account=slurm_account,
    )
    role = "admin" if admin else "user"
    tokens.audit(redis, who, "local", "TOKEN", f"create {name}", 0, detail=role)
    click.echo(made)
    click.echo(
        f"(the token of {name}, {'an' if role == 'admin' else 'a'} {role}: shown this once; clients send it as "
        "GPUDECK_TOKEN or 'Authorization: "
        "Bearer …')",
        err=True,
    )
    return EXIT_OK


@token.command(name="ls", cls=ServerCommand)
@home_option
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
def token_ls(home, as_json) -> int:
    """Every named token: role, limits, created, last used, expiry (never the token)."""
    from jobs import tokens
    from tui.cli.base import print_table

    redis, _ = _token_store(home)
    listed = tokens.list_all(redis)
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return EXIT_OK
    rows = [
        (
            t["name"],
            t["role"],
            "-" if t["max_gpus"] is None else t["max_gpus"],
            "yes" if t["commands"] else "no",
            t.get("max_priority") or "-",
            _when(t["created_at"]),
            _when(t["last_used_at"]),
            _when(t["expires_at"]),
        )
        for t in listed
    ]
    print_table(
        ("NAME", "ROLE", "MAX GPUS", "COMMANDS", "MAX PRIORITY", "CREATED", "LAST USED", "EXPIRES"), rows, right=[2]
    )
    return EXIT_OK


@token.command(name="revoke", cls=ServerCommand)
@click.argument("name", required=False)
@home_option
def token_revoke(name, home) -> int:
    """Revoke the token NAME: its very next request is refused."""
    from jobs import tokens

    if not name:
        click.echo("gpudeck token revoke NAME", err=True)
        return EXIT_USAGE
    redis, who = _token_store(home)
    tokens.revoke(redis, name)
    tokens.audit(redis, who, "local", "TOKEN", f"revoke {name}", 0)
    click.echo(f"revoked {name}: its next request is refused")
    return EXIT_OK


@click.group()
def project() -> None:
    """Projects, on the server against its Redis: create, add (a named token), rm, ls."""


@project.command(name="create", cls=ServerCommand)
@click.argument("name")
@click.option("--max-gpus", type=int, metavar="N", help="the most GPUs the project's running jobs hold at once")
@click.option("--max-queued", type=int, metavar="N", help="the most queued jobs it may have: more are refused")
@click.option("--share", type=float, default=1.0, show_default=True, help="its weight (kept for fair share)")
@click.option(
    "--max-gpu-hours",
    metavar="N/PERIOD",
    help="its GPU-hours a day, week or month (500/month: its jobs that ended this calendar month, UTC, and those "
    "running), past which its jobs wait (or are refused: --over-budget refuse)",
)
@click.option(
    "--over-budget",
    type=click.Choice(["wait", "refuse"]),
    default="wait",
    show_default=True,
    help="past --max-gpu-hours: its queued jobs wait for the next period, or new ones are refused",
)
@home_option
def project_create(name, max_gpus, max_queued, share, max_gpu_hours, over_budget, home) -> int:
    """Create the project NAME."""
    from jobs import projects, tokens

    redis, who = _token_store(home)
    made = projects.create(
        redis, name, max_gpus=max_gpus, max_queued=max_queued, share=share, max_gpu_hours=max_gpu_hours,
        over_budget=over_budget,
    )  # fmt: skip
    tokens.audit(redis, who, "local", "PROJECT", f"create {name}", 0)
    said = {**made, "max_gpu_hours": max_gpu_hours}
    caps = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in said.items() if k.startswith("max_") and v) or "no caps"
    click.echo(f"project {name}: {caps}; gpudeck project add {name} USER puts a named token in it")
    return EXIT_OK


@project.command(name="add", cls=ServerCommand)
@click.argument("name")
@click.argument("users", nargs=-1, required=True)
@click.option("--default", "as_default", is_flag=True, help="make it their default project")
@click.option("--admin", is_flag=True, help="they may steer the project's jobs: cancel, priority, place in line")
@home_option
def project_add(name, users, as_default, admin, home) -> int:
    """Put named tokens in the project NAME (it becomes their default when they have none, or with --default)."""
    from jobs import projects, tokens

    redis, who = _token_store(home)
    for user in users:
        projects.add(redis, name, user, default=as_default, admin=admin)
        tokens.audit(redis, who, "local", "PROJECT", f"add {user} to {name}", 0, detail="admin" if admin else "")
        role = "an admin of" if admin else "in"
        click.echo(f"{user} is {role} project {name} (their default: {projects.default_of(redis, user)})")
    return EXIT_OK


@project.command(name="rm", cls=ServerCommand)
@click.argument("name")
@click.argument("user", required=False)
@home_option
def project_rm(name, user, home) -> int:
    """Take USER out of the project NAME, or (no USER) delete it; its jobs keep its name."""
    from jobs import projects, tokens

    redis, who = _token_store(home)
    projects.remove(redis, name, user)
    tokens.audit(redis, who, "local", "PROJECT", f"remove {user} from {name}" if user else f"delete {name}", 0)
    click.echo(f"{user} is no longer in project {name}" if user else f"project {name} deleted")
    return EXIT_OK


@project.command(name="ls", cls=ServerCommand)
@home_option
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
def project_ls(home, as_json) -> int:
    """Every project: its caps and its members."""
    from jobs import projects
    from tui.cli.base import print_table

    redis, _ = _token_store(home)
    listed = projects.listing(redis)
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return EXIT_OK

    def cap(value: Any) -> Any:
        return "-" if value is None else value

    def members(p: dict[str, Any]) -> str:  # (its admins marked: alice*)
        return ", ".join(f"{m}*" if m in p.get("admins", []) else m for m in p["members"]) or "-"

    def budget(p: dict[str, Any]) -> str:
        return f"{p['max_gpu_hours']:g}/{p['budget_period']} ({p['over_budget']})" if p.get("max_gpu_hours") else "-"

    rows = [
        (p["name"], cap(p["max_gpus"]), cap(p["max_queued"]), budget(p), f"{p['share']:g}", members(p)) for p in listed
    ]
    print_table(("NAME", "MAX GPUS", "MAX QUEUED", "GPU-HOURS", "SHARE", "MEMBERS"), rows, right=[1, 2])
    return EXIT_OK


@click.group(name="service")
def service() -> None:
    """`gpudeck up` as a systemd service: started at boot, restarted on failure, logs in the journal."""


@service.command(name="install", cls=ServerCommand)
@click.option("--user", default="root", show_default=True, help="the user `gpudeck up` runs as")
@home_option
@click.option("--port", type=int, help=f"the API's port (default {DEFAULT_PORT})")
@click.option("--unit-dir", type=click.Path(path_type=Path), help="where the unit goes (default /etc/systemd/system)")
@click.option("--env-file", type=click.Path(path_type=Path), help="its settings (default /etc/gpudeck/gpudeck.env)")
@click.option("--no-enable", is_flag=True, help="write the unit only: do not enable and start it")
def service_install(user, home, port, unit_dir, env_file, no_enable) -> int:
    """Write a systemd unit for `gpudeck up` of this environment (and an environment file to edit) and `enable
    --now` it where systemd runs; print what to run elsewhere."""
    from jobs import service as svc

    unit = svc.Unit(svc.gpudeck_command(), home or svc.DEFAULT_HOME, user, port, env_file or svc.ENV_FILE)
    try:
        said = svc.install(unit, unit_dir or svc.UNIT_DIR, enable=not no_enable)
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"service install: {exc}") from None
    for line in said:
        click.echo(line)
    return EXIT_OK


@service.command(name="status", cls=ServerCommand)
@click.option("--unit-dir", type=click.Path(path_type=Path), help="where the unit is (default /etc/systemd/system)")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
def service_status(unit_dir, as_json) -> int:
    """Whether gpudeck is installed as a systemd service, enabled and running."""
    from jobs import service as svc

    state = svc.status(unit_dir or svc.UNIT_DIR)
    if as_json:
        click.echo(json.dumps(state, indent=2))
    else:
        click.echo(f"unit      {state['unit']} ({'installed' if state['installed'] else 'not installed'})")
        click.echo(f"enabled   {state['enabled'] if state['enabled'] is not None else '-'}")
        click.echo(f"active    {state['active'] if state['active'] is not None else '-'}")
        if state.get("said"):
            click.echo(str(state["said"]))
    return EXIT_OK


@click.command(cls=ServerCommand)
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--extras", default="", help="gpudeck's extras to include, comma-separated (tensorflow, mcp, envs…)")
@click.option("--from-env", is_flag=True, help="repack this environment's installed packages: no network")
@click.option("--python-version", help="the target's Python, e.g. 3.12 (downloads only)")
@click.option("--platform", "platforms", multiple=True, help="the target's platform tag (repeatable; downloads only)")
def bundle(folder, extras, from_env, python_version, platforms) -> int:
    """Every wheel `pip install --no-index --find-links FOLDER 'gpudeck[EXTRAS]'` needs, for a box with no package
    index: downloaded for the target's Python and platform, or (--from-env) this environment's, repacked."""
    from jobs import bundle as bundling

    wanted = {e.strip() for e in extras.split(",") if e.strip()}
    try:
        if from_env:
            if python_version or platforms:
                raise ConfigError("--python-version and --platform are for downloads: --from-env repacks this Python's")
            made = bundling.from_env(folder, wanted)
        else:
            made = bundling.download(folder, wanted, python_version, list(platforms))
    except (LookupError, OSError, subprocess.CalledProcessError) as exc:
        raise ConfigError(f"bundle: {exc}") from None
    target = f"gpudeck[{','.join(sorted(wanted))}]" if wanted else "gpudeck"
    click.echo(f"{len(made)} wheels in {folder}: pip install --no-index --find-links {folder} '{target}'")
    return EXIT_OK


@click.group()
def server() -> None:
    """`python -m jobs.cli up|worker|token …`: the server commands alone."""


for command in (up, worker, token, project):
    server.add_command(command)


def main(argv: list[str] | None = None) -> int:
    """`python -m jobs.cli up|worker|token …`: the exit code of the command."""
    try:
        code = server.main(args=argv, prog_name="python -m jobs.cli", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (KeyboardInterrupt, click.exceptions.Abort):
        return EXIT_INTERRUPTED
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
