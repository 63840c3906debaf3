"""`gpudeck`: one console script on click. The client commands (one module a family: `jobs`, `data`, `sweeps`,
`admin`…) talk to the API over HTTP and import nothing of the server; the server commands (`up`, `worker`, `token`
in jobs.cli, `api` in api.serve) are loaded only when one of them runs, and then without the client's families
(their HTTP client, YAML, tables: ~0.1 CPU-s of imports at each start of an API or a stack).

Every command returns its exit code (models.common); the group turns the API's refusals, an unreachable API and
usage errors into one line on stderr and that code, in `main()` and under click's CliRunner alike."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from models.common import EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from tui.cli.base import connection_options

FAMILIES = ("jobs", "compare", "export", "session", "data", "sweeps", "schedules", "admin", "doctor", "agent")
"""The client's command modules (tui.cli.NAME, each with its COMMANDS), in the order their commands are added."""

SERVER_COMMANDS = {
    "up": ("jobs.cli", "up", "Start Redis, the API and one worker per GPU; Ctrl-C stops all."),
    "worker": ("jobs.cli", "worker", "Run one worker pinned to GPUs (or the CPU)."),
    "token": ("jobs.cli", "token", "Named tokens, on the server: create, ls, revoke."),
    "project": ("jobs.cli", "project", "Projects, on the server: create, add, rm, ls."),
    "api": ("api.serve", "api", "Serve the REST API (gunicorn)."),
    "service": ("jobs.cli", "service", "gpudeck up as a systemd service: install, status."),
    "bundle": ("jobs.cli", "bundle", "A wheelhouse for a box with no package index."),
}
"""name -> (module, attribute, short help): imported when the command runs, so `gpudeck ls` loads no server."""


def report(exc: BaseException) -> int | None:
    """The exit code for an error a command let through, after one line (or a few) on stderr; None: not ours."""
    from tui.client import ApiError, Unreachable

    if isinstance(exc, ApiError):
        click.echo(f"gpudeck: {exc.message}", err=True)
        if exc.status == 401:  # (the API speaks of headers; a person gives the CLI a token)
            click.echo("gpudeck: give your token with GPUDECK_TOKEN=… (or --token …); an admin makes one: "
                       "gpudeck token create NAME", err=True)  # fmt: skip
        for field, problem in (exc.details.get("fields") or {}).items():
            if f"{field}: {problem}" not in exc.message:  # each problem once
                click.echo(f"  {field}: {problem}", err=True)
        return EXIT_USAGE if exc.status < 500 else EXIT_JOB_FAILED
    if isinstance(exc, Unreachable):
        click.echo(f"gpudeck: {exc}", err=True)
        return EXIT_UNREACHABLE
    return None  # (a server command's refusal is a click exception of its own: jobs.cli.Refusal)


class Gpudeck(click.Group):
    """The `gpudeck` group: lazy server commands, one-line bad-parameter errors, exit codes from return values."""

    families_added = False

    def add_families(self) -> None:
        """Add the client's commands (FAMILIES), once: what any command but a server command needs first."""
        if not self.families_added:
            self.families_added = True
            for family in FAMILIES:
                for command in importlib.import_module(f"tui.cli.{family}").COMMANDS:
                    self.add_command(command)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self.add_families()
        return sorted([*super().list_commands(ctx), *SERVER_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in SERVER_COMMANDS:
            if name not in self.commands:
                module, attr, _ = SERVER_COMMANDS[name]
                self.add_command(getattr(importlib.import_module(module), attr), name)
        else:
            self.add_families()
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list with the server commands' help from SERVER_COMMANDS (`--help` imports no server)."""
        self.add_families()
        rows = [(name, cmd.get_short_help_str(80)) for name, cmd in sorted(self.commands.items())]
        rows += [(name, text) for name, (_, _, text) in SERVER_COMMANDS.items() if name not in self.commands]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            code = super().invoke(ctx)
        except click.MissingParameter:
            raise  # (click's own message and the usage line)
        except click.BadParameter as exc:  # `gpudeck logs: --tail: must be a whole number …`, exit 2
            where = exc.param.get_error_hint(exc.ctx) if exc.param is not None and exc.ctx else "value"
            click.echo(f"{(exc.ctx or ctx).command_path}: {where.strip(chr(39))}: {exc.message}", err=True)
            ctx.exit(EXIT_USAGE)
        except KeyboardInterrupt:
            ctx.exit(EXIT_INTERRUPTED)
        except click.exceptions.Exit:
            raise
        except Exception as exc:  # noqa: BLE001 (only ours is handled; the rest goes on)
            code = report(exc)
            if code is None:
                raise
            ctx.exit(code)
        if isinstance(code, int) and code != EXIT_OK:
            ctx.exit(code)
        return code


def version() -> str:
    """gpudeck's version: the installed distribution's, else (a checkout on PYTHONPATH) its pyproject.toml's."""
    from importlib import metadata
    from pathlib import Path

    try:
        return metadata.version("gpudeck")
    except metadata.PackageNotFoundError:
        root = Path(__file__).resolve().parents[2]
        try:
            import tomllib

            found = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
        except (OSError, KeyError, ValueError):
            found = "unknown"
        return f"{found} (not installed: the checkout at {root})"


def show_version(ctx: click.Context, wanted: bool) -> None:
    if wanted and not ctx.resilient_parsing:
        click.echo(f"gpudeck, version {version()}")
        ctx.exit(EXIT_OK)


@click.group(name="gpudeck", cls=Gpudeck, context_settings={"help_option_names": ["-h", "--help"]})
@connection_options
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=lambda c, _, v: show_version(c, v),
              help="Show the version and exit.")  # fmt: skip
def cli() -> None:
    """Self-hosted training jobs on GPU machines.

    Exit status: 0 ok, 1 a job failed (or fell below --min-accuracy), 2 usage or input error, 3 API unreachable,
    4 `wait --timeout` ran out."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gpudeck` console script; returns the exit code (tests call it in-process)."""
    try:
        return int(cli.main(args=argv, prog_name="gpudeck", standalone_mode=False) or 0)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:  # usage errors: click's message and the command's usage line
        exc.show()
        return EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except click.exceptions.Abort:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
