"""`gpudeck sweep FILE` (a grid or a search), `gpudeck sweep show ID` (its trials ranked), `gpudeck sweep stop ID`
and `gpudeck sweep ls`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import yaml

from models.common import EXIT_OK, EXIT_USAGE
from tui.cli.base import client, connection_options, echo_json, fmt, json_option, print_table
from tui.widgets.fmt import duration, num


class SweepGroup(click.Group):
    """A group whose first word may be a file instead of a sub-command: `sweep FILE` means `sweep submit FILE`."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args.insert(0, "submit")
        return super().resolve_command(ctx, args)


@click.group(cls=SweepGroup)
def sweep() -> None:
    """Submit a sweep (sweep FILE), rank one (sweep show ID), stop one (sweep stop ID), list them (sweep ls).

    FILE is YAML or JSON: a grid, {"base": spec, "grid": {field: [values]}}, one job per combination; or a search,
    {"search": "random"|"tpe", "base": spec, "space": {field: {"loguniform": [lo, hi]}, …}, "metric": …,
    "stopping": {"kind": "asha", "min_steps": N}, "max_trials": N, "max_concurrent": N} (README: "Searching
    hyperparameters")."""


@sweep.command(name="submit")
@connection_options
@click.argument("file", type=click.Path(dir_okay=False))
@json_option
def sweep_submit(file, as_json) -> int:
    """Submit the sweep FILE describes (`gpudeck sweep FILE` does the same)."""
    try:
        body = yaml.safe_load(Path(file).read_text())  # (JSON is YAML)
    except (OSError, yaml.YAMLError) as exc:
        click.echo(f"gpudeck sweep: cannot read {file}: {exc}", err=True)
        return EXIT_USAGE
    made = client().sweep(body)
    if as_json:
        echo_json(made)
    elif made.get("search", "grid") != "grid":
        jobs = ", ".join(str(i) for i in made["job_ids"])
        click.echo(
            f"sweep {made['id']}: a {made['search']} search of {made['max_trials']} trials, {made['max_concurrent']} at"
            f" once; first trials: jobs {jobs} (gpudeck sweep show {made['id']} ranks them)"
        )
    else:
        jobs = ", ".join(str(i) for i in made["job_ids"])
        click.echo(f"sweep {made['id']}: jobs {jobs} (gpudeck sweep show {made['id']} ranks them)")
    return EXIT_OK


def _status(trial: dict[str, Any]) -> str:
    if trial["stopped_early"]:
        return "stopped" + (f" @rung {trial['rung']}" if trial.get("rung") is not None else "")
    return trial["status"] + (f" ({trial['reason']})" if trial.get("reason") else "")


@sweep.command(name="show")
@connection_options
@click.argument("sweep_id", metavar="ID", type=int)
@json_option
def sweep_show(sweep_id, as_json) -> int:
    """The sweep's trials best first, a column per swept field, the best, the rungs and the budget left."""
    shown = client().sweep_summary(sweep_id)
    if as_json:
        echo_json(shown)
        return EXIT_OK
    fields = list(shown.get("space") or shown["grid"])
    metric = shown["metric"]
    head = ["RANK", "JOB", *(k.rpartition(".")[2].upper() for k in fields), "STATUS", "STEP", metric.upper()]
    rows, rank = [], 0
    for t in shown["trials"]:
        ranked = t["metric"] is not None and t["status"] == "succeeded"  # (stopped early too: jobs.sweeps ranks so)
        rank += ranked
        rows.append(
            [
                str(rank) if ranked else "-",
                str(t["job"] if t["job"] is not None else "-"),
                *(fmt((t["values"] or {}).get(k)) for k in fields),
                _status(t),
                fmt(t.get("step")),
                num(t["metric"]) or "-",
            ]
        )
    budget = shown["budget"]
    what = shown["search"] + (f" + {shown['stopping']['kind']}" if shown.get("stopping") else "")
    left = f", {duration(budget['time_left_s'])} left" if budget.get("time_left_s") is not None else ""
    click.echo(
        f"sweep {shown['id']} ({what}, {metric} {shown['mode']}): {shown['state']}"
        + (f" — {shown['stopped']}" if shown.get("stopped") and shown["state"] != "done" else "")
        + f"; {budget['trials']} of {shown['max_trials']} trials, {budget['steps']} steps{left}"
    )
    print_table(head, rows)
    for rung in shown.get("rungs") or []:
        went = sum(e["passed"] for e in rung["trials"])
        click.echo(f"rung {rung['rung']} (step {rung['step']}): {len(rung['trials'])} reached it, {went} went on")
    best = shown.get("best")
    if best:
        values = " ".join(f"{k.rpartition('.')[2]}={fmt(v)}" for k, v in best["values"].items())
        click.echo(f"best: job {best['job']} ({values}) {metric} {num(best['metric'])}")
    return EXIT_OK


@sweep.command(name="stop")
@connection_options
@click.argument("sweep_id", metavar="ID", type=int)
@json_option
def sweep_stop(sweep_id, as_json) -> int:
    """Launch no more trials; running ones finish (a grid's queued jobs are canceled)."""
    shown = client().stop_sweep(sweep_id)
    if as_json:
        echo_json(shown)
    else:
        running = sum(t["status"] in ("queued", "starting", "running") for t in shown["trials"])
        click.echo(f"sweep {sweep_id}: no more trials; {running} still running finish")
    return EXIT_OK


@sweep.command(name="ls")
@connection_options
@click.option("--limit", type=int, default=20, show_default=True, help="the newest this many")
@json_option
def sweep_ls(limit, as_json) -> int:
    """The newest sweeps."""
    listed = client().sweeps(limit)
    if as_json:
        echo_json(listed)
        return EXIT_OK
    rows = [
        [str(s["id"]), s["search"], fmt(s.get("name")), s["metric"], f"{s['trials']}/{s['max_trials']}",
         s.get("state") or "ended", fmt(s.get("owner"))]
        for s in listed
    ]  # fmt: skip
    print_table(["ID", "SEARCH", "NAME", "METRIC", "TRIALS", "STATE", "OWNER"], rows, right=(0,))
    return EXIT_OK


COMMANDS = (sweep,)
