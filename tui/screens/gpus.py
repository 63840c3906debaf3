"""GPUs per host: utilization and memory bars, temperature, power, a utilization sparkline, processes -> jobs."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from tui.widgets.chrome import chrome
from tui.widgets.fmt import NA, bar, na, sparkline

REFRESH_S = 2.0
HISTORY = 30


class GpusScreen(Screen):
    BINDINGS = [Binding("escape,backspace,q", "app.pop_screen", "Back")]

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[str, deque] = defaultdict(lambda: deque(maxlen=HISTORY))

    def compose(self) -> ComposeResult:
        yield from chrome()
        with VerticalScroll():
            yield Static("waiting for the first sample …", id="gpus")
        yield Footer()

    def on_mount(self) -> None:
        self.poll()
        self.set_interval(REFRESH_S, self.poll)

    def poll(self) -> None:
        if self.app.api_ready():
            self.app.call_api(
                lambda c: c.request("GET", "/api/v1/gpus").json(), self.apply, group="gpus", exclusive=True
            )

    def apply(self, body: dict[str, Any]) -> None:
        hosts = body["hosts"]
        if not hosts:
            self.query_one("#gpus", Static).update("No GPU host reports: no worker sees nvidia-smi (CPU only).")
            return
        table = Table(expand=True, box=None, padding=(0, 1))
        for col in ("HOST", "GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER", "HISTORY", "JOBS"):
            table.add_column(col, no_wrap=True)
        for host in hosts:
            for g in host["gpus"]:
                self.history[g["uuid"]].append(g.get("utilization"))
                used, total = g.get("memory_used_mib"), g.get("memory_total_mib")
                mem = bar(used / total, 8) if used is not None and total else NA
                procs = g.get("processes") or []
                jobs = ", ".join(f"job {p['job_id']}" if p.get("job_id") else f"pid {p['pid']}" for p in procs)
                power = f"{na(g.get('power_draw_w'), digits=0)}/{na(g.get('power_limit_w'), 'W', 0)}"
                table.add_row(
                    host["host"],
                    str(g["index"]),
                    g["name"],
                    bar(g["utilization"] / 100, 8) if g.get("utilization") is not None else NA,
                    f"{mem} {na(used)}/{na(total, ' MiB')}",
                    na(g.get("temperature_c"), "°C"),
                    power,
                    Text(sparkline(list(self.history[g["uuid"]]), 12), style="cyan"),
                    jobs or "-",
                )
        self.query_one("#gpus", Static).update(table)
