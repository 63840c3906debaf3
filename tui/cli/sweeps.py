"""`gpudeck sweep FILE` (submit a sweep) and `gpudeck sweep show ID` (rank its jobs)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from models.common import EXIT_OK, EXIT_USAGE
from tui.cli.base import client, connection_options, echo_json, fmt, json_option, print_table
from tui.widgets.fmt import num


class SweepGroup(click.Group):
    """A group whose first word may be a file instead of a sub-command: `sweep FILE` means `sweep submit FILE`."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args.insert(0, "submit")
        return super().resolve_command(ctx, args)


@click.group(cls=SweepGroup)
def sweep() -> None:
    """Submit a sweep (sweep FILE) or rank one (sweep show ID).

    FILE is JSON: {"base": spec, "grid": {field: [values]}}, one job per combination."""


@sweep.command(name="submit")
@connection_options
@click.argument("file", type=click.Path(dir_okay=False))
@json_option
def sweep_submit(file, as_json) -> int:
    """Submit the sweep FILE describes: one job per combination of its grid (`gpudeck sweep FILE` does the same)."""
    try:
        body = json.loads(Path(file).read_text())
    except (OSError, ValueError) as exc:
        click.echo(f"gpudeck sweep: cannot read {file}: {exc}", err=True)
        return EXIT_USAGE
    made = client().sweep(body)
    if as_json:
        echo_json(made)
    else:
        jobs = ", ".join(str(i) for i in made["job_ids"])
        click.echo(f"sweep {made['id']}: jobs {jobs} (gpudeck sweep show {made['id']} ranks them)")
    return EXIT_OK


@sweep.command(name="show")
@connection_options
@click.argument("sweep_id", metavar="ID", type=int)
@json_option
def sweep_show(sweep_id, as_json) -> int:
    """The sweep's jobs best first, a column per swept field."""
    shown = client().request("GET", f"/api/v1/sweeps/{sweep_id}").json()
    if as_json:
        echo_json(shown)
        return EXIT_OK
    grid = list(shown["grid"])
    head = ["RANK", "JOB", *(k.rpartition(".")[2].upper() for k in grid), "STATUS"]
    head += ["TEST_ACC", "TEST_LOSS", "LAST_LOSS"]
    rows = [
        [
            str(r["rank"] or "-"),
            str(r["job_id"]),
            *(fmt(r.get(k)) for k in grid),
            r["status"] + (f" ({r['reason']})" if r.get("reason") else ""),
            *(num(r.get(k)) or "-" for k in ("test_accuracy", "test_loss", "last_loss")),  # (aligned: 4 decimals)
        ]
        for r in shown["jobs"]
    ]
    click.echo(f"sweep {shown['id']}: {shown['ended']} of {shown['total']} ended")
    print_table(head, rows)
    best = shown.get("best")
    if best:
        swept = " ".join(f"{k}={fmt(best.get(k))}" for k in grid)
        click.echo(f"best: job {best['job_id']} ({swept}) test accuracy {num(best['test_accuracy'])}")
    return EXIT_OK


COMMANDS = (sweep,)
