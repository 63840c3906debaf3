"""Who uses the box (like `gpudeck share` and Slurm's sshare): per person, the GPUs held now, running and queued
jobs, decayed GPU-hours and their share, least used first (the order the scheduler serves people in, within a
priority); and the rule that orders them."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from tui.widgets.chrome import chrome
from tui.widgets.fmt import PROJECT_COLUMNS, SHARE_COLUMNS, project_rows, share_rows, share_rule

REFRESH_S = 5.0


def _table(columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> Table:
    table = Table(box=None, padding=(0, 1), header_style="bold")
    for n, col in enumerate(columns):
        table.add_column(col, no_wrap=True, justify="right" if n else "left")
    for row in rows:
        table.add_row(*(str(v) for v in row))
    return table


def share_view(doc: dict[str, Any]) -> Group:
    if not doc["owners"] and not doc.get("projects"):
        return Group(Text("Fair share: nobody has run or queued a job yet.", style="dim"))
    parts: list[Any] = [Text("Fair share: who uses the box", style="bold")]
    if doc.get("projects"):  # (projects above their people: the scheduler serves the project first)
        parts += [_table(PROJECT_COLUMNS, project_rows(doc)), Text("")]
    parts += [_table(SHARE_COLUMNS, share_rows(doc)), Text(""), Text(share_rule(doc), "dim")]
    return Group(*parts)


class ShareScreen(Screen):
    BINDINGS = [Binding("escape,backspace,q", "app.pop_screen", "Back")]

    def compose(self) -> ComposeResult:
        yield from chrome()
        with VerticalScroll():
            yield Static("reading …", id="share")
        yield Footer()

    def on_mount(self) -> None:
        self.poll()
        self.set_interval(REFRESH_S, self.poll)

    def poll(self) -> None:
        if self.is_active and self.app.api_ready():
            self.app.call_api(lambda c: c.share(), self.apply, group="share", exclusive=True)

    def apply(self, doc: dict[str, Any]) -> None:
        self.query_one("#share", Static).update(share_view(doc))
