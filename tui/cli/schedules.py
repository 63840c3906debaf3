"""`gpudeck schedule create NAME --cron … -- FILE` (a job spec or a sweep made at each firing), `schedule ls`,
`schedule show NAME`, `schedule pause|resume|rm NAME`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import yaml

from models.common import EXIT_OK, EXIT_USAGE
from tui.cli.base import client, connection_options, echo_json, fmt, json_option, print_table


@click.group()
def schedule() -> None:
    """Jobs (or sweeps) made on a cron: create, ls, show, pause, resume, rm.

    A firing submits the job spec (or makes the sweep) FILE describes, as the user whose token made the schedule;
    each job it makes says which schedule and firing made it (its `schedule` field, a schedule:NAME tag). README:
    "Schedules"."""


def _made(made: dict[str, Any] | None) -> str:
    return "-" if made is None else f"{made['kind']} {made['id']}"


@schedule.command(name="create")
@connection_options
@click.argument("name")
@click.option("--cron", required=True, help="when it fires: '0 2 * * *' (minute hour day month weekday), '@daily'")
@click.option("--tz", default="UTC", show_default=True, help="the time zone the cron is read in: Europe/Berlin")
@click.option(
    "--overlap",
    type=click.Choice(["skip", "queue", "cancel-previous"]),
    default="skip",
    show_default=True,
    help="a firing while its last job (or sweep) has not ended: make nothing, make it anyway, or cancel the last",
)
@click.option(
    "--catch-up",
    "catch_up",
    type=click.Choice(["none", "one"]),
    default="none",
    show_default=True,
    help="firings missed while the service was down: none made, or one for them all",
)
@click.option("--paused", is_flag=True, help="made paused: it fires once resumed")
@click.argument("file", metavar="-- FILE", type=click.Path(dir_okay=False, allow_dash=True))
@json_option
def schedule_create(name, cron, tz, overlap, catch_up, paused, file, as_json) -> int:
    """Make a schedule: FILE (YAML or JSON; - reads stdin) is a job spec, or a sweep ({"base": …, "grid": …} or a
    search), made at each firing of --cron in --tz."""
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
        body = yaml.safe_load(text)  # (JSON is YAML)
    except (OSError, yaml.YAMLError) as exc:
        click.echo(f"gpudeck schedule create: cannot read {file}: {exc}", err=True)
        return EXIT_USAGE
    if not isinstance(body, dict):
        click.echo(f"gpudeck schedule create: {file} holds no job spec nor sweep (a mapping)", err=True)
        return EXIT_USAGE
    what = "sweep" if "base" in body else "job"
    made = client().create_schedule(
        {"name": name, "cron": cron, "tz": tz, "overlap": overlap, "catch_up": catch_up, "paused": paused, what: body}
    )
    if as_json:
        echo_json(made)
    else:
        fires = f"a {what} at each firing of {made['cron']!r} ({made['tz']})"
        click.echo(f"schedule {made['name']}: {fires}; {_state(made)}")
    return EXIT_OK


@schedule.command(name="ls")
@connection_options
@json_option
def schedule_ls(as_json) -> int:
    """Every schedule: its cron, next firing, rules and what its last firing made."""
    listed = client().schedules()
    if as_json:
        echo_json(listed)
        return EXIT_OK
    rows = [
        [s["name"], s["cron"], s["tz"], "paused" if s["paused"] else s["next_at"], s["overlap"], str(s["fired"]),
         _made(s["last_made"]), fmt(s.get("owner"))]
        for s in listed
    ]  # fmt: skip
    print_table(["NAME", "CRON", "TZ", "NEXT", "OVERLAP", "FIRED", "LAST MADE", "OWNER"], rows, right=(5,))
    return EXIT_OK


@schedule.command(name="show")
@connection_options
@click.argument("name")
@json_option
def schedule_show(name, as_json) -> int:
    """A schedule and its last firings: what each made, or why it made nothing."""
    shown = client().schedule(name)
    if as_json:
        echo_json(shown)
        return EXIT_OK
    what = "job" if "job" in shown else "sweep"
    click.echo(f"schedule {shown['name']}: a {what} at each firing of {shown['cron']!r} ({shown['tz']})")
    click.echo(f"  overlap {shown['overlap']}, catch-up {shown['catch_up']}, owner {fmt(shown.get('owner'))}")
    click.echo(f"  next firing: {'paused' if shown['paused'] else shown['next_at']}; fired {shown['fired']} times")
    rows = [[f["firing"], _made(f["made"]), f["why"] or ""] for f in shown["firings"]]
    if rows:
        print_table(["FIRING", "MADE", "WHY"], rows)
    return EXIT_OK


def _state(shown: dict) -> str:
    """A schedule's state in a line: `paused`, or its next firing."""
    return "paused" if shown["paused"] else f"next firing {shown['next_at']}"


def _action(action: str, says: str) -> click.Command:
    """`gpudeck schedule pause|resume NAME`: the schedule after `action`, as its state."""

    @schedule.command(name=action, help=says)
    @connection_options
    @click.argument("name")
    @json_option
    def act(name, as_json) -> int:
        shown = client().schedule(name, action)
        if as_json:
            echo_json(shown)
        else:
            click.echo(f"schedule {shown['name']}: {_state(shown)}")
        return EXIT_OK

    return act


schedule_pause = _action("pause", "No firing until resumed.")
schedule_resume = _action("resume", "Firing again, from its next time after now (what it missed paused is not made).")


@schedule.command(name="rm")
@connection_options
@click.argument("name")
def schedule_rm(name) -> int:
    """Delete a schedule (the jobs it made stay)."""
    client().delete_schedule(name)
    click.echo(f"schedule {name} deleted")
    return EXIT_OK


COMMANDS = (schedule,)
