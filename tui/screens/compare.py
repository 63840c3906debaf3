"""Runs side by side (GET /api/v1/compare): the configuration fields that differ and the results, a column a job
(its id in its curve's colour; each row's best in bold green), and one metric's curves overlaid on one chart.
`m` cycles the metric, `x` the x axis (step, epoch, time), `l` log or linear; read again while a job runs."""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from tui.screens.sweep import COLORS, value_text
from tui.widgets.chrome import chrome
from tui.widgets.fmt import ENDED, RICH_COLOR, axis_ticks, one_line
from tui.widgets.panes import Chart

REFRESH_S = 3.0
X_AXES = ("step", "epoch", "time")

KEYS = [
    ("View", [("m", "the next metric"), ("x", "the next x axis: step, epoch, time"), ("l", "log10 or linear")]),
    ("Back", [("esc  backspace  q", "where you came from")]),
]


def colour_of(ids: list[int]) -> dict[int, str]:
    """Each job's curve colour (plotext's name), in the order compared."""
    return {job_id: COLORS[n % len(COLORS)] for n, job_id in enumerate(ids)}


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _cell(value: Any, width: int = 24) -> str:
    return one_line(value_text(value), width)


CELL_MAX, CELL_MIN, FIELD_MIN = 24, 8, 10
"""A job's column: at most 24 characters, at least 8; the field names' at least 10."""


def fitted(width: int, jobs: int, longest_field: int) -> tuple[int, int]:
    """(the field column's width, each job's) so that the table's columns fit `width` cells (each column takes two
    more, its padding; and a scrollbar): the third job of three is not pushed off an 80-column screen (issue 67 #7)."""
    room = max(40, width) - 2 - 2 * (jobs + 1)
    field = min(longest_field, CELL_MAX)
    cell = max(CELL_MIN, min(CELL_MAX, (room - field) // max(1, jobs)))
    field = max(FIELD_MIN, min(field, room - cell * jobs))
    return field, cell


class CompareScreen(Screen):
    BINDINGS = [
        Binding("escape,backspace,q", "app.pop_screen", "Back"),
        Binding("m", "next_metric", "Metric"),
        Binding("x", "next_x", "X axis"),
        Binding("l", "toggle_log_scale", "Log scale"),
    ]

    def __init__(self, job_ids: list[int]):
        super().__init__()
        self.job_ids = job_ids
        self.doc: dict[str, Any] | None = None
        self.metric: str | None = None
        self.x = "step"
        self.log_scale = False

    def compose(self) -> ComposeResult:
        yield from chrome()
        yield Static(f"comparing jobs {', '.join(map(str, self.job_ids))} …", id="compare-summary")
        yield DataTable(id="compare-config", cursor_type="row", zebra_stripes=True, fixed_columns=1)
        yield DataTable(id="compare-results", cursor_type="row", zebra_stripes=True, fixed_columns=1)
        yield Chart(id="compare-chart")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(REFRESH_S, self.poll_live)

    def on_screen_resume(self) -> None:
        self.poll()

    def poll_live(self) -> None:
        if self.doc is not None and any(j["status"] not in ENDED for j in self.doc["jobs"]):
            self.poll()

    def poll(self) -> None:
        if not self.is_active or not self.app.api_ready():
            return

        def failed(exc) -> None:
            self.query_one("#compare-summary", Static).update(Text(exc.message, style="bold red"))

        self.app.call_api(
            lambda client: client.compare(self.job_ids, self.metric, self.x),
            self.apply,
            failed,
            group="compare",
            exclusive=True,
        )

    def apply(self, doc: dict[str, Any]) -> None:
        self.doc, self.metric = doc, doc["metric"]
        colours = colour_of(self.job_ids)
        heads = [
            Text(f"━ {j['id']}", style=RICH_COLOR.get(colours[j["id"]], colours[j["id"]]), justify="right")
            for j in doc["jobs"]
        ]
        names = ["name", "status", *(r["field"] for r in doc["differs"]), *doc["result_columns"]]
        field_w, cell_w = fitted(self.size.width or 80, len(doc["jobs"]), max(map(len, names)))
        config = [
            ["name", *(_cell(j["name"] or "-", cell_w) for j in doc["jobs"])],
            ["status", *(_cell(j["status"], cell_w) for j in doc["jobs"])],
        ]
        config += [[one_line(r["field"], field_w), *(_cell(v, cell_w) for v in r["values"])] for r in doc["differs"]]
        self._fill("#compare-config", "DIFFERS", heads, [(row, None) for row in config])
        results = []
        ids = [r["job_id"] for r in doc["results"]]
        for column in doc["result_columns"]:
            cells = [r.get(column) for r in doc["results"]]
            if any(c is not None for c in cells):
                best = ids.index(doc["best"][column]) if column in doc["best"] else None
                marked = cell_w - 2  # (room for the best's ` *`)
                results.append(([one_line(column, field_w), *(_cell(c, marked) for c in cells)], best))
        self._fill("#compare-results", "RESULT", heads, results)
        scale = "log10 " if self.log_scale else ""
        self.query_one("#compare-summary", Static).update(
            Text.assemble(
                (f"comparing {len(ids)} jobs", "bold"),
                f"  {_count(len(doc['differs']), 'field differs', 'fields differ')}, {doc['same']} the same",
                f"  curves: {scale}{doc['metric']} by {doc['x']}",
            )
        )
        self._draw(doc, colours)

    def _fill(self, selector: str, first: str, heads: list[Text], rows: list[tuple[list[Any], int | None]]) -> None:
        table = self.query_one(selector, DataTable)
        table.clear(columns=True)
        table.add_column(first, key="field")
        for n, head in enumerate(heads):
            table.add_column(head, key=str(n))
        for cells, best in rows:
            row: list[Any] = [cells[0]]
            for n, cell in enumerate(cells[1:]):
                text = Text(str(cell), justify="right")
                if n == best:
                    text.stylize("bold green")
                    text.append(" *")
                row.append(text)
            table.add_row(*row)

    def _draw(self, doc: dict[str, Any], colours: dict[int, str]) -> None:
        chart = self.query_one("#compare-chart", Chart)
        plt = chart.plt
        plt.clear_data()
        ys_all: list[float] = []
        for curve in doc["curves"]:
            xy = [
                (x, math.log10(y) if self.log_scale else y) for x, y in curve["points"] if y > 0 or not self.log_scale
            ]
            if xy:
                ys_all.extend(y for _, y in xy)
                plt.plot([x for x, _ in xy], [y for _, y in xy], color=colours[curve["job_id"]], marker="braille")
        if ys_all:
            plt.yticks(*axis_ticks(min(ys_all), max(ys_all), self.log_scale))
        plt.title(f"{'log10 ' if self.log_scale else ''}{doc['metric']}")
        plt.xlabel(doc["x"] + (" (s)" if doc["x"] == "time" else ""))
        chart.refresh()

    def action_next_metric(self) -> None:
        if self.doc and self.doc["metrics"]:
            names = self.doc["metrics"]
            self.metric = names[(names.index(self.metric) + 1) % len(names)] if self.metric in names else names[0]
            self.poll()

    def action_next_x(self) -> None:
        self.x = X_AXES[(X_AXES.index(self.x) + 1) % len(X_AXES)]
        self.poll()

    def action_toggle_log_scale(self) -> None:
        self.log_scale = not self.log_scale
        if self.doc:
            self.apply(self.doc)
