"""`gpudeck compare ID ID…`: runs side by side (GET /api/v1/compare): the configuration fields that differ, the
results with each column's best marked, and one metric's curve of each run as a sparkline."""

from __future__ import annotations

from typing import Any

import click

from models.common import EXIT_OK
from tui.cli.base import client, connection_options, echo_json, fmt, json_option, print_table
from tui.widgets.fmt import sparkline

CURVE_WIDTH = 24
"""Characters of a curve's sparkline (its points thinned evenly to that many)."""


def curve_text(points: list[list[float]], lo: float, hi: float) -> str:
    """`▇▆▅▃▂▁  2.30 → 0.39`: the curve over [lo, hi] (the runs' common range), from its first value to its last."""
    ys = [y for _, y in points]
    if not ys:
        return "-"
    picked = (
        [ys[round(i * (len(ys) - 1) / (CURVE_WIDTH - 1))] for i in range(CURVE_WIDTH)] if len(ys) > CURVE_WIDTH else ys
    )
    span = hi - lo or 1.0
    return f"{sparkline([y - lo for y in picked], CURVE_WIDTH, span)}  {fmt(ys[0])} → {fmt(ys[-1])}"


def lines(doc: dict[str, Any]) -> list[tuple[list[str], list[list[Any]], tuple[int, ...]]]:
    """The comparison's tables (head, rows, right-aligned columns): what differs, the results, the curves."""
    ids = [str(j["id"]) for j in doc["jobs"]]
    tables = []
    rows: list[list[Any]] = [["name", *(j["name"] or "-" for j in doc["jobs"])]]
    rows.append(["status", *(j["status"] + (f" ({j['reason']})" if j.get("reason") else "") for j in doc["jobs"])])
    rows += [[r["field"], *map(fmt, r["values"])] for r in doc["differs"]]
    tables.append((["JOB", *ids], rows, ()))
    results = []
    for column in doc["result_columns"]:
        cells = [fmt(r.get(column)) for r in doc["results"]]
        if column in doc["best"]:
            at = [r["job_id"] for r in doc["results"]].index(doc["best"][column])
            cells[at] += " *"
        if any(c != "-" for c in cells):
            results.append([column, *cells])
    tables.append((["RESULT", *ids], results, tuple(range(1, len(ids) + 1))))
    ys = [y for c in doc["curves"] for _, y in c["points"]]
    curves = [
        [str(c["job_id"]) + (f" {c['run']}" if c["run"] else ""), curve_text(c["points"], min(ys), max(ys))]
        for c in doc["curves"]
    ]
    tables.append(([f"{doc['metric'].upper()} BY {doc['x'].upper()}", ""], curves, ()))
    return tables


@click.command()
@connection_options
@click.argument("ids", nargs=-1, type=int, required=True, metavar="ID ID...")
@click.option("--metric", help="the metric whose curves to show (default: loss, else the first the runs report)")
@click.option(
    "--x",
    "x",
    type=click.Choice(["step", "epoch", "time"]),
    default="step",
    show_default=True,
    help="the curves' x (time: seconds since each run's first point)",
)
@click.option("--csv", "as_csv", is_flag=True, help="a row a job: id, name, status, the fields that differ, results")
@json_option
def compare(ids, metric, x, as_csv, as_json) -> int:
    """Runs side by side: what differs, results (* the best), curves."""
    if len(set(ids)) < 2:  # (said in the CLI's words, not the API's query arguments: issue 67 #7)
        raise click.UsageError("name at least two jobs to compare, e.g. gpudeck compare 12 15")
    api = client()
    if as_csv:
        click.echo(api.compare(list(ids), metric, x, "csv"), nl=False)
        return EXIT_OK
    doc = api.compare(list(ids), metric, x)
    if as_json:
        echo_json(doc)
        return EXIT_OK
    for n, (head, rows, right) in enumerate(lines(doc)):
        if n:
            click.echo()
        print_table(head, rows, right)
    click.echo(
        f"\n{doc['same']} fields the same; * marks the best of a row; metrics: {', '.join(doc['metrics']) or '-'}"
    )
    return EXIT_OK


COMMANDS = (compare,)
