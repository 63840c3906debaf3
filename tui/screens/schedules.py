"""The schedules (like `gpudeck schedule ls`): each one's cron and zone, its next firing, its rules and what its
last firing made; p pauses or resumes the one under the cursor, D deletes it (after one confirmation), and its last
firings show below the table, each with what it made or why it made nothing."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from tui.screens.dialogs import Confirm
from tui.widgets.chrome import chrome

REFRESH_S = 5.0
COLUMNS = ("NAME", "CRON", "TZ", "NEXT", "OVERLAP", "FIRED", "LAST MADE", "OWNER")


def made(what: dict[str, Any] | None) -> str:
    return "-" if what is None else f"{what['kind']} {what['id']}"


def row(schedule: dict[str, Any]) -> tuple[str, ...]:
    return (
        schedule["name"],
        schedule["cron"],
        schedule["tz"],
        "paused" if schedule["paused"] else (schedule["next_at"] or "-").replace("T", " ")[:16],
        schedule["overlap"],
        str(schedule["fired"]),
        made(schedule["last_made"]),
        schedule.get("owner") or "-",
    )


def firings_view(schedule: dict[str, Any] | None) -> Any:
    if schedule is None:
        return Text("No schedule yet: gpudeck schedule create NAME --cron '0 2 * * *' -- job.yaml", style="dim")
    table = Table(box=None, padding=(0, 1), header_style="bold", title_justify="left")
    table.title = f"{schedule['name']}: its last firings"
    for col in ("FIRING", "MADE", "WHY"):
        table.add_column(col, no_wrap=col != "WHY")
    for f in reversed(schedule["firings"]):
        table.add_row(f["firing"].replace("T", " ")[:19], made(f["made"]), f["why"] or "")
    if not schedule["firings"]:
        table.add_row("-", "-", "it has not fired yet")
    return table


class SchedulesScreen(Screen):
    BINDINGS = [
        Binding("escape,backspace,q", "app.pop_screen", "Back"),
        Binding("p", "pause", "Pause/resume"),
        Binding("D", "delete", "Delete"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.schedules: dict[str, dict[str, Any]] = {}

    def compose(self) -> ComposeResult:
        yield from chrome()
        yield DataTable(id="schedules", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="firings-box"):
            yield Static("reading …", id="firings")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#schedules", DataTable)
        for col in COLUMNS:
            table.add_column(col, key=col.lower())
        self.poll()
        self.set_interval(REFRESH_S, self.poll)

    def poll(self) -> None:
        if self.is_active and self.app.api_ready():
            self.app.call_api(lambda c: c.schedules(), self.apply, group="schedules", exclusive=True)

    def apply(self, listed: list[dict[str, Any]]) -> None:
        table = self.query_one("#schedules", DataTable)
        current = self.current()
        self.schedules = {s["name"]: s for s in listed}
        for key in [k.value for k in table.rows if k.value not in self.schedules]:
            table.remove_row(key)
        for name, schedule in self.schedules.items():
            cells = row(schedule)
            if name not in table.rows:
                table.add_row(*cells, key=name)
                continue
            for col, cell in zip(COLUMNS, cells):
                if str(table.get_cell(name, col.lower())) != cell:
                    table.update_cell(name, col.lower(), cell)
        if current in self.schedules:
            table.move_cursor(row=table.get_row_index(current), animate=False)
        self.show_firings()

    def current(self) -> str | None:
        table = self.query_one("#schedules", DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate)[0].value)

    def show_firings(self) -> None:
        name = self.current()
        self.query_one("#firings", Static).update(firings_view(self.schedules.get(name) if name else None))

    def on_data_table_row_highlighted(self, _: DataTable.RowHighlighted) -> None:
        self.show_firings()

    def action_pause(self) -> None:
        name = self.current()
        if name is None:
            return
        action = "resume" if self.schedules[name]["paused"] else "pause"
        self.app.call_api(lambda c: c.schedule(name, action), lambda _: self.poll())

    def action_delete(self) -> None:
        name = self.current()
        if name is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.app.call_api(lambda c: c.delete_schedule(name), lambda _: self.poll())

        self.app.push_screen(Confirm(f"Delete schedule {name}? (the jobs it made stay)"), answered)
