"""GPUs and workers: per host and GPU, utilization and memory bars, temperature, power, a utilization sparkline
and the jobs on it; every worker with its state, queues and current job (CPU and memory its job uses); the
queued jobs in line. On a box without GPUs the workers and the line are the whole screen."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from models.common import size_text
from tui.widgets.chrome import chrome
from tui.widgets.fmt import NA, bar, cordon_cause, human, na, one_line, sparkline

REFRESH_S = 2.0
HISTORY = 30
WIDE = 120
"""From this many columns the GPUs table shows host, name, bars, temperature, power and history too; below it,
what nvitop shows: which GPU, its utilization and memory as numbers, and which job (and owner) holds it."""
STATE_STYLES = {"busy": "cyan", "idle": "green", "lost": "red", "draining": "yellow"}
"""A worker's state's colour (an idle worker of a GPU held whole: dim)."""
LINE_SHOWN = 5
"""Queued jobs listed, the first in the scheduler's order (the rest are counted)."""


def gpu_history() -> dict[str, deque]:
    """Utilization samples per GPU uuid, the last HISTORY of each."""
    return defaultdict(lambda: deque(maxlen=HISTORY))


def _table(*columns: str, widths: dict[str, int] | None = None) -> Table:
    """A table of `columns` over the screen's width; `widths`: each column's, set (the wide GPUs table: what
    identifies a GPU and its numbers are never cut, the name and history give way first; the holders wrap)."""
    table = Table(expand=widths is None, box=None, padding=(0, 1), header_style="bold")
    for col in columns:
        wraps = col == "HELD BY"  # (every holder and foreign process read whole, on more lines: issue 64)
        overflow = "fold" if wraps else "ellipsis"
        table.add_column(col, no_wrap=not wraps, overflow=overflow, width=(widths or {}).get(col))
    return table


SHRINKS = {"HISTORY": 7, "NAME": 8, "HELD BY": 10}
"""The wide table's columns that give way when it is narrow, and the least each keeps."""
GIVING_WAY = (("HISTORY", 7), ("HELD BY", 24), ("NAME", 14), ("HELD BY", 10), ("NAME", 8))
"""In which order they give way, and down to what: the history, the holder's long tail, the name's, then both."""


def _wide_cells(host: str, g: dict[str, Any], history: list[Any]) -> list[Any]:
    used, total = g.get("memory_used_mib"), g.get("memory_total_mib")
    mem = bar(used / total, 8) if used is not None and total else NA
    power = f"{na(g.get('power_draw_w'), digits=0)}/{na(g.get('power_limit_w'), 'W', 0)}"
    return [
        host,
        str(g["index"]),
        g["name"],
        bar(g["utilization"] / 100, 8) if g.get("utilization") is not None else NA,
        f"{mem} {na(used)}/{na(total, ' MiB')}",
        na(g.get("temperature_c"), "°C"),
        power,
        Text(sparkline(history, 12), style="cyan"),
    ]


def _holders(g: dict[str, Any]) -> str:
    """Who holds a GPU: the job pinned to it (and its owner), else the jobs nvidia-smi sees on it; and what no
    gpudeck job runs there (a notebook started by hand keeps the GPU from jobs)."""
    procs = g.get("processes") or []
    held = g.get("holders") or ([g["held_by"]] if g.get("held_by") else [])
    jobs = (
        ", ".join(
            f"{h.get('kind') or 'job'} {h['job_id']}"
            + (f" · {h['owner']}" if h.get("owner") else "")
            + (f" · {size_text(h['gpu_memory'])}" if h.get("gpu_memory") else "")
            for h in held
        )
        if held
        else ", ".join(sorted({f"job {p['job_id']}" for p in procs if p.get("job_id")}))
    )
    foreign = [
        (f"pid {p['pid']} of ended job {p['left_by']}, not released" if p.get("left_by") else f"foreign pid {p['pid']}")
        + (f" ({p['user']})" if p.get("user") else "")
        + (f" {p['used_memory_mib'] / 1024:.1f} GiB" if p.get("used_memory_mib") else "")
        for p in procs
        if not p.get("job_id")
    ]
    cordon = g.get("cordoned")
    out = f"CORDONED ({cordon_cause(cordon)}: gpudeck gpu uncordon)" if cordon else ""
    return ", ".join(x for x in (out, jobs, *foreign) if x) or "-"


WIDE_COLUMNS = ("HOST", "GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER", "HISTORY", "HELD BY")


def _kept_widths(hosts: list[dict[str, Any]]) -> dict[str, int]:
    """The width each column that is never cut needs: its header or its widest cell."""
    widths = {c: len(c) for c in WIDE_COLUMNS if c not in SHRINKS}
    for host in hosts:
        for g in host["gpus"]:
            for col, cell in zip(WIDE_COLUMNS, _wide_cells(host["host"], g, [])):
                if col not in SHRINKS:
                    widths[col] = max(widths[col], len(str(cell)))
    return widths


def fits_wide(hosts: list[dict[str, Any]], width: int) -> bool:
    """Whether the wide GPUs table fits `width` columns with nothing that identifies a GPU or reads a number cut:
    else the compact one (nvitop's) is shown."""
    need = sum(_kept_widths(hosts).values()) + sum(SHRINKS.values()) + 2 * len(WIDE_COLUMNS)
    return need <= width


def wide_widths(hosts: list[dict[str, Any]], natural: dict[str, int], width: int) -> dict[str, int]:
    """Each wide column's width within `width`: the kept ones their content's; the others their `natural` width
    while there is room, giving way in SHRINKS order down to their least; the holder takes what is left."""
    out = _kept_widths(hosts)
    room = width - 2 * len(WIDE_COLUMNS) - sum(out.values())
    wants = {c: max(least, natural.get(c, least)) for c, least in SHRINKS.items()}
    over = sum(wants.values()) - room
    for col, floor in GIVING_WAY:
        give = min(max(0, over), max(0, wants[col] - max(floor, SHRINKS[col])))
        wants[col] -= give
        over -= give
    out.update(wants)
    out["HELD BY"] = max(SHRINKS["HELD BY"], room - wants["HISTORY"] - wants["NAME"])
    return out


def _job_of(g: dict[str, Any]) -> int | None:
    """The gpudeck job on a GPU: the one pinned to it, else the first nvidia-smi sees there."""
    held = g.get("held_by")
    if held:
        return int(held["job_id"])
    return next((int(p["job_id"]) for p in g.get("processes") or [] if p.get("job_id")), None)


class GpusScreen(Screen):
    BINDINGS = [
        Binding("escape,backspace,q", "app.pop_screen", "Back"),
        Binding("enter", "open", "Open its job", priority=True),
        Binding("down,j", "move(1)", "Down", show=False, priority=True),  # (PgUp, PgDn scroll the page)
        Binding("up,k", "move(-1)", "Up", show=False, priority=True),
    ]

    def __init__(self, history: dict[str, deque] | None = None) -> None:
        """`history`: the utilization samples per GPU, kept by the app so the sparkline goes on where it was."""
        super().__init__()
        self.history: dict[str, deque] = history if history is not None else gpu_history()
        self.shown: Any = None
        self.state: dict[str, Any] | None = None
        self.cursor = 0
        """The GPU (in the order shown) that ↑/↓ are on; enter opens the job that holds it."""

    def compose(self) -> ComposeResult:
        yield from chrome()
        with VerticalScroll():
            yield Static("waiting for the first sample …", id="gpus")
        yield Footer()

    def on_mount(self) -> None:
        self.poll()
        self.set_interval(REFRESH_S, self.poll)

    def poll(self) -> None:
        def fetch(client) -> dict[str, Any]:
            running = client.jobs(limit=500, status="starting,running")["jobs"]
            return {
                "hosts": client.request("GET", "/api/v1/gpus").json()["hosts"],
                "workers": client.request("GET", "/api/v1/workers").json()["workers"],
                "running": {j["id"]: j for j in running},
                "line": client.request("GET", "/api/v1/line", params={"limit": LINE_SHOWN}).json(),
            }

        if self.is_active and self.app.api_ready():
            self.app.call_api(fetch, self.apply, group="gpus", exclusive=True)

    def on_resize(self) -> None:
        if self.state is not None:
            self.apply(self.state, sample=False)  # the other set of columns

    def apply(self, state: dict[str, Any], sample: bool = True) -> None:
        if bool(self._gpus_shown()) != bool(state.get("hosts")):
            self.state = state
            self.refresh_bindings()  # (enter is offered once there are GPUs)
        self.state = state
        width = self.app.size.width
        wide = width >= WIDE and fits_wide(state["hosts"], width - 2)  # (the scroll bar's columns)
        if sample:
            for host in state["hosts"]:
                for g in host["gpus"]:
                    self.history[g["uuid"]].append(g.get("utilization"))
        # what is drawn, less the heartbeat times: a box where nothing changes sends nothing to the terminal
        key = (
            wide,
            self.cursor,
            state["hosts"],
            [{k: v for k, v in w.items() if k != "last_heartbeat"} for w in state["workers"]],
            {i: (j.get("name"), j.get("usage")) for i, j in state["running"].items()},
            (state["line"]["queued"], state["line"]["waiting_for_dependencies"]),
            [(j["id"], j.get("name"), j.get("queue_position")) for j in state["line"]["jobs"]],
        )
        if key == self.shown and not (state["hosts"] and sample):
            return
        self.shown = key
        parts = [
            self._gpus(state["hosts"], wide, width - 2),
            Text(""),
            self._workers(state["workers"], state["running"], wide, state["hosts"]),
        ]
        self.query_one("#gpus", Static).update(Group(*parts, Text(""), self._line(state["line"])))

    def _gpus(self, hosts: list[dict[str, Any]], wide: bool = True, width: int = 200) -> Table | Text:
        if not hosts:
            return Text("GPUs: none reports (no worker sees nvidia-smi): CPU workers only.", style="dim")
        held = {g["uuid"]: _holders(g) for h in hosts for g in h["gpus"]}
        if wide:
            natural = {
                "NAME": max(len(g["name"]) for h in hosts for g in h["gpus"]),
                "HISTORY": 12,
                "HELD BY": max(len(j) for j in held.values()),
            }
            table = _table(*WIDE_COLUMNS, widths=wide_widths(hosts, natural, width))
        else:
            table = _table("GPU", "UTIL", "MEMORY", "HELD BY")
            table.columns[-1].no_wrap = False  # (the one column that may take two lines)
        n = -1
        for host in hosts:
            for g in host["gpus"]:
                n += 1
                jobs = held[g["uuid"]]
                style = "reverse" if n == self.cursor else None  # (the GPU enter opens the job of)
                if not wide:
                    used, total = g.get("memory_used_mib"), g.get("memory_total_mib")
                    where = f"{one_line(host['host'], 20)}:{g['index']}" if len(hosts) > 1 else str(g["index"])
                    util = g.get("utilization")
                    memory = f"{used / 1024:.1f}/{total / 1024:.0f}G" if used is not None and total else NA
                    table.add_row(where, f"{util}%" if util is not None else NA, memory, jobs, style=style)
                    continue
                table.add_row(*_wide_cells(host["host"], g, list(self.history[g["uuid"]])), jobs, style=style)
        return table

    @staticmethod
    def _workers(
        workers: list[dict[str, Any]],
        running: dict[int, dict[str, Any]],
        wide: bool = True,
        hosts: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> Table | Text:
        """Each worker, its state, GPUs and job (at WIDE columns its host and what its job uses too). (No queues:
        each serves its own, where the scheduler places its jobs.) An idle worker of a GPU another worker's job holds
        whole says so: it takes nothing until that job ends (it read plain `idle`, issue 64)."""
        whole = {
            (h["host"], str(g.get("index"))): g["holders"][0]["job_id"]
            for h in hosts
            for g in h.get("gpus") or []
            if g.get("holders") and g["holders"][0].get("gpu_memory") is None
        }
        if not workers:
            return Text("Workers: none registered (start one: gpudeck worker, or gpudeck up)", style="yellow")
        table = (
            _table("WORKER", "HOST", "STATE", "GPUS", "JOB", "CPU", "RSS")
            if wide
            else _table("WORKER", "STATE", "GPUS", "JOB")
        )
        for w in workers:
            state = "lost" if not w["alive"] else ("draining" if w["draining"] else w["state"])
            held = sorted({whole[(w["host"], g)] for g in w["gpus"] if (w["host"], g) in whole})
            if state == "idle" and held and w.get("job_id") is None:
                state = f"held: job {held[0]}"
            job = running.get(w["job_id"]) if w.get("job_id") else None
            usage = (job or {}).get("usage") or {}
            cpu = usage.get("cpu_percent")
            cells = [
                w["name"],
                w["host"],
                Text(
                    state,
                    style={"busy": "cyan", "idle": "green", "lost": "red", "draining": "yellow"}.get(state, "dim"),
                ),
                ",".join(w["gpus"]) or "cpu",
                f"{w['job_id']} {one_line((job or {}).get('name') or '', 16)}".strip() if w.get("job_id") else "-",
                f"{cpu:.0f}%" if cpu is not None else "",
                human(usage["rss_bytes"]) if usage.get("rss_bytes") else "",
            ]
            table.add_row(*(cells if wide else [cells[0], *cells[2:5]]))
        return table

    @staticmethod
    def _line(line: dict[str, Any]) -> Text:
        """The line as the scheduler reads it (GET /api/v1/line): how many wait, and the first LINE_SHOWN in its
        order, with their places."""
        queued, waiting = line["queued"], line["waiting_for_dependencies"]
        if not queued and not waiting:
            return Text("Queued: none", style="dim")
        out = Text(f"Queued: {queued} job{'s' if queued != 1 else ''} in line", style="bold")
        if waiting:
            out.append(f", {waiting} waiting for their dependencies", style="dim")
        for j in line["jobs"]:
            place = f"#{j['queue_position']}" if j.get("queue_position") else "next"
            out.append(f"\n  {place:>6} job {j['id']} {one_line(j.get('name') or '', 30)}".rstrip())
            out.append(f"  ({j.get('queue') or '?'})", style="dim")
        if queued > len(line["jobs"]):
            out.append(f"\n  … {queued - len(line['jobs'])} more", style="dim")
        return out

    # -- a GPU and its job ---------------------------------------------------------------------------
    def _gpus_shown(self) -> list[dict[str, Any]]:
        return [g for h in (self.state or {}).get("hosts") or [] for g in h["gpus"]]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("open", "move"):  # (offered where there is a GPU to choose)
            return bool(self._gpus_shown())
        return True

    def action_move(self, step: int) -> None:
        gpus = self._gpus_shown()
        if gpus:
            self.cursor = max(0, min(len(gpus) - 1, self.cursor + step))
            self.apply(self.state or {}, sample=False)

    def action_open(self) -> None:
        """Open the job that holds the GPU under the cursor (as nvitop and k9s open a row)."""
        gpus = self._gpus_shown()
        if not gpus:
            self.notify("no GPU to open: this box reports none", severity="warning")
            return
        g = gpus[min(self.cursor, len(gpus) - 1)]
        job_id = _job_of(g)
        if job_id is None:
            self.notify(f"GPU {g['index']}: no gpudeck job holds it", severity="warning")
            return
        self.app.open_job(job_id)  # type: ignore[attr-defined]
