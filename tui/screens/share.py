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
from tui.widgets.fmt import SHARE_COLUMNS, share_rows, share_rule

REFRESH_S = 5.0


def share_view(doc: dict[str, Any]) -> Group:
    table = Table(box=None, padding=(0, 1), header_style="bold")
    for n, col in enumerate(SHARE_COLUMNS):
        table.add_column(col, no_wrap=True, justify="right" if n else "left")
    for row in share_rows(doc):
        table.add_row(*(str(v) for v in row))
    if not doc["owners"]:
        return Group(Text("Fair share: nobody has run or queued a job yet.", style="dim"))
    return Group(Text("Fair share: who uses the box", style="bold"), table, Text(""), Text(share_rule(doc), "dim"))


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
