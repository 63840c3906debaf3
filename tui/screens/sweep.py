"""One sweep, grid or search, live: its trials ranked by the metric (stopped ones marked with their rung, the
best highlighted), the swept values as columns, the budget used, and the curves of the best and the running
trials overlaid (each run a colour, its JOB cell in that colour). Enter opens a job."""

from __future__ import annotations

import json
import math
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from tui.screens.job import JobScreen
from tui.widgets.chrome import chrome
from tui.widgets.fmt import ENDED, RICH_COLOR, axis_ticks, bar, duration, num, one_line, status
from tui.widgets.panes import Chart

REFRESH_S = 3.0
CURVES_SHOWN = 8
"""Runs whose curves are drawn: the best ranked, then the ones still running."""
COLORS = ("cyan", "orange", "green", "magenta", "red", "blue", "yellow", "white")


def sweep_of(job: dict[str, Any]) -> int | None:
    """The sweep a job belongs to (the API's `sweep_id`), or None."""
    return job.get("sweep_id")


def swept(grid: dict[str, Any]) -> list[str]:
    return list(grid)


def label(row: dict[str, Any], grid: dict[str, Any]) -> str:
    """A run's swept values: `lr=0.1 model=lenet`."""
    return " ".join(f"{k.rpartition('.')[2]}={value_text(row.get(k))}" for k in grid)


def value_text(v: Any) -> str:
    """A swept value as the job's name writes it: strings as they are, floats short, the rest as JSON."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return format(v, ".4g")
    return v if isinstance(v, str) else json.dumps(v)


KEYS = [
    ("Move", [("↑ ↓  j k", "move"), ("enter", "open the job")]),
    ("View", [("l", "loss on a log10 or linear scale")]),
    ("Back", [("esc  backspace  q", "where you came from")]),
]


class SweepScreen(Screen):
    BINDINGS = [
        Binding("escape,backspace,q", "app.pop_screen", "Back"),
        Binding("enter", "open", "Open job", priority=True),
        Binding("l", "toggle_log_scale", "Log scale"),
        Binding("j", "move(1)", "Down", show=False),
        Binding("k", "move(-1)", "Up", show=False),
    ]

    def __init__(self, sweep_id: int):
        super().__init__()
        self.sweep_id = sweep_id
        self.summary: dict[str, Any] | None = None
        self.points: dict[int, list[dict[str, Any]]] = {}  # job id -> its metric points (ended: read once)
        self.log_scale = True
        self.shown_rows: Any = None
        self.drawn: Any = None
        self.charted: dict[str, str] = {}
        """Each chart's metric as drawn last (`loss`, `val_accuracy`, …)."""

    def compose(self) -> ComposeResult:
        yield from chrome()
        yield Static(f"sweep {self.sweep_id} …", id="sweep-summary")
        yield DataTable(id="sweep-jobs", cursor_type="row", zebra_stripes=True, fixed_columns=2)
        with Horizontal(id="sweep-plots"):
            yield Chart(id="sweep-loss")
            yield Chart(id="sweep-acc")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(REFRESH_S, self.poll)  # (the first read: on_screen_resume)

    def on_screen_resume(self) -> None:
        self.poll()

    def poll(self) -> None:
        if not self.is_active or not self.app.api_ready():
            return
        have = {i for i, pts in self.points.items() if pts}
        ended_before = {r["job_id"] for r in (self.summary or {}).get("jobs", []) if r["status"] in ENDED}

        def fetch(client) -> tuple[dict[str, Any], dict[int, list[dict[str, Any]]]]:
            summary = client.request("GET", f"/api/v1/sweeps/{self.sweep_id}").json()
            points = {}
            for row in _drawn(summary["jobs"]):
                job_id = row["job_id"]
                if job_id in have and job_id in ended_before:
                    continue  # an ended run's curve does not change
                m = client.metrics(job_id)
                points[job_id] = m["train"] + m["validation"]
            return summary, points

        def failed(exc) -> None:
            self.query_one("#sweep-summary", Static).update(Text(exc.message, style="bold red"))

        self.app.call_api(fetch, lambda got: self.apply(*got), failed, group="sweep", exclusive=True)

    def apply(self, summary: dict[str, Any], points: dict[int, list[dict[str, Any]]]) -> None:
        self.summary = summary
        self.points.update(points)
        fields = summary.get("space") or summary["grid"]
        best = summary.get("best")
        metric = summary.get("metric", "test_accuracy")
        budget = summary.get("budget") or {}
        if summary.get("search", "grid") == "grid":
            what = "  grid: " + " × ".join(f"{k} {len(v)}" for k, v in summary["grid"].items())
        else:
            rule = f" + {summary['stopping']['kind']}" if summary.get("stopping") else ""
            left = f", {duration(budget['time_left_s'])} left" if budget.get("time_left_s") is not None else ""
            what = (
                f"  {summary['search']}{rule} search, {metric} {summary['mode']}: {budget.get('trials')} of "
                f"{summary.get('max_trials')} trials, {budget.get('steps')} steps{left}"
            )
        state = summary.get("state", "")
        head = Text.assemble(
            (f"sweep {summary['id']}", "bold"),
            f"  {state}" if state else "",
            f"  {summary['ended']} of {summary['total']} ended",
            what,
            (f"  best: job {best['job_id']} {label(best['values'], fields)} {metric} {num(best['metric'])}", "green")
            if best
            else "",
        )
        self.query_one("#sweep-summary", Static).update(head)
        self._table(summary["jobs"], fields, metric, best["job_id"] if best else None)
        self._draw(summary["jobs"], metric)

    def _table(self, rows: list[dict[str, Any]], grid: dict[str, Any], metric: str, best: int | None) -> None:
        table = self.query_one("#sweep-jobs", DataTable)
        key = [(r["job_id"], r["status"], r.get("fraction"), r.get("rank"), r.get("metric")) for r in rows]
        key.append(tuple(r.get("last_loss") for r in rows))  # type: ignore[arg-type]
        if key == self.shown_rows:
            return  # nothing moved: nothing to send
        self.shown_rows = key
        current = self._cursor_job()
        if not table.columns:
            table.add_column("RANK", key="rank")
            table.add_column("JOB", key="job")
            for k in swept(grid):
                table.add_column(k.rpartition(".")[2].upper(), key=f"p:{k}")
            columns = [("status", "STATUS"), ("progress", "PROGRESS"), ("metric", metric.upper())]
            if metric != "test_accuracy":
                columns.append(("acc", "TEST ACC"))
            if metric != "loss":  # (a search that ranks on loss: that column is its last loss already)
                columns.append(("loss", "LAST LOSS"))
            for k, title in columns:
                table.add_column(title, key=k)
        table.clear()
        drawn = {r["job_id"]: COLORS[n % len(COLORS)] for n, r in enumerate(_drawn(rows))}
        for r in rows:
            color = drawn.get(r["job_id"])
            state = status(r["status"], r.get("reason"))
            if r.get("stopped_early") and r.get("rung") is not None:
                state.append(f" @rung {r['rung']}")
            cells = [
                Text(str(r["rank"] or "-"), justify="right", style="bold green" if r["job_id"] == best else ""),
                Text(
                    ("━ " if color else "") + str(r["job_id"]),
                    justify="right",
                    style=RICH_COLOR.get(color, color or ""),
                ),
                *(one_line(value_text(r.get(k)), 16) for k in swept(grid)),
                state,
                bar(r.get("fraction"), 8),
                Text(num(r.get("metric")), style="bold green" if r["job_id"] == best else ""),
            ]
            if metric != "test_accuracy":
                cells.append(num(r.get("test_accuracy")))
            if metric != "loss":
                cells.append(num(r.get("last_loss")))
            table.add_row(*cells, key=str(r["job_id"]))
        if current is not None and str(current) in table.rows:
            table.move_cursor(row=table.get_row_index(str(current)), animate=False)

    def _draw(self, rows: list[dict[str, Any]], ranked_by: str) -> None:
        """Loss (log10 unless `l`) and accuracy of the drawn runs by step: what the sweep ranks on where it is one
        of them (a search on train `loss` draws train loss, at every point a trial reported), else validation
        where some run has validation points, training until then."""
        runs = [(r, self.points.get(r["job_id"]) or []) for r in _drawn(rows)]
        key = (self.log_scale, [(r["job_id"], len(p), p[-1] if p else None) for r, p in runs])
        if key == self.drawn:
            return
        self.drawn = key
        for widget_id, title, metric in (("sweep-loss", "loss", "loss"), ("sweep-acc", "accuracy", "accuracy")):
            plt = self.query_one(f"#{widget_id}", Chart).plt
            plt.clear_data()
            log_scale = metric == "loss" and self.log_scale
            if ranked_by in (metric, f"val_{metric}"):  # what the trials are ranked on
                key = ranked_by
            else:  # validation curves where a run has them; training curves until any run has
                has_val = any(_series(p, f"val_{metric}", log_scale) for _, p in runs)
                key = f"val_{metric}" if has_val else metric
            kind = "validation" if key.startswith("val_") else "train"
            self.charted[widget_id] = key
            for n, (_, points) in enumerate(runs):
                xy = _series(points, key, log_scale)
                if xy:
                    # (no legend over the curves: the table's JOB column carries each run's colour)
                    plt.plot([x for x, _ in xy], [y for _, y in xy], color=COLORS[n % len(COLORS)], marker="braille")
            ys_all = [y for _, p in runs for _, y in _series(p, key, log_scale)]
            if ys_all:
                plt.yticks(*axis_ticks(min(ys_all), max(ys_all), log_scale))
            plt.title(f"{'log10 ' if log_scale else ''}{kind} {title}")
            plt.xlabel("step")
            self.query_one(f"#{widget_id}", Chart).refresh()

    def _cursor_job(self) -> int | None:
        table = self.query_one("#sweep-jobs", DataTable)
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return int(row_key.value)

    def action_open(self) -> None:
        job_id = self._cursor_job()
        if job_id is not None:
            self.app.push_screen(JobScreen(job_id))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def action_move(self, rows: int) -> None:
        table = self.query_one("#sweep-jobs", DataTable)
        table.move_cursor(row=max(0, min(table.row_count - 1, table.cursor_row + rows)))

    def action_toggle_log_scale(self) -> None:
        self.log_scale = not self.log_scale
        if self.summary:
            self._draw(self.summary["jobs"], self.summary.get("space") or self.summary["grid"])


def _drawn(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs whose curves are drawn: ranked ones best first, then running ones, CURVES_SHOWN at most."""
    ranked = [r for r in rows if r.get("rank")]
    running = [r for r in rows if not r.get("rank") and r["status"] in ("running", "succeeded")]
    return (ranked + running)[:CURVES_SHOWN]


def _series(points: list[dict[str, Any]], key: str, log_scale: bool) -> list[tuple[float, float]]:
    return [
        (p["step"], math.log10(p[key]) if log_scale else p[key])
        for p in points
        if isinstance(p.get(key), (int, float)) and (p[key] > 0 or not log_scale)
    ]
