"""One job: a following log tail, loss and accuracy curves, the config, the result or the failure reason;
cancel and retry behind a confirmation, enabled only where they make sense."""

from __future__ import annotations

import math
import textwrap
import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer, Input, Log, Static, TabbedContent, TabPane
from textual_plotext import PlotextPlot

from tui.attach import local_host
from tui.client import split_live
from tui.logtext import ERROR_LINE, Folder, explain
from tui.screens.dialogs import Confirm, notebook_dialog, open_tensorboard, session_text
from tui.widgets.chrome import chrome
from tui.widgets.fmt import (
    ENDED,
    UNENDED,
    axis_ticks,
)
from tui.widgets.jobtext import curves_text, fields_text, header_text, result_text
from tui.widgets.panes import Chart, FollowLog, _rows

LOG_ACTIONS = frozenset(
    {"toggle_follow", "toggle_wrap", "toggle_fold", "next_match", "next_error", "log_end", "log_start"}
)
"""The log tab's own keys: the footer offers them there only."""


KEEP_LINES = 200_000
"""Log lines the screen keeps (the job dir's log.txt has them all)."""
REFRESH_S = 1.0
ENDED_REFRESH_S = 5.0
"""An ended job changes no more (its log is whole): read it again this seldom."""
STUCK_S = 10.0
POINTS_REFRESH_S = 10.0
"""A running job's points are read again at least this often (validation points do not move its record)."""


KEYS = [
    ("Tabs", [("1 2 3 4", "log, curves, config, result")]),
    (
        "Log",
        [
            ("f", "follow the newest line on/off"),
            ("w", "wrap long lines on/off"),
            ("/  n  N", "search; next and previous match"),
            ("e", "next error or traceback"),
            ("home  G end", "start; end (and follow again)  (g: the GPUs, as on every screen)"),
            ("j  k", "scroll down and up"),
            ("b", "show or fold TensorFlow's start-up lines"),
        ],
    ),
    ("Curves", [("l", "loss on a log10 or linear scale"), ("R", "the next run of a script that trained twice")]),
    (
        "Act",
        [
            ("c", "cancel (queued or running)"),
            ("r", "retry as a new job (ended)"),
            ("t", "TensorBoard"),
            ("a", "a session: attach to its shell here (Ctrl-] comes back), or its notebook's URL and tunnel"),
        ],
    ),
    ("Back", [("esc  backspace  q", "the jobs table")]),
]


class JobScreen(Screen):
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("backspace,q", "app.pop_screen", "Back", show=False),
        Binding("j", "scroll_log(1)", "Down", show=False),
        Binding("k", "scroll_log(-1)", "Up", show=False),
        Binding("f", "toggle_follow", "Follow"),
        Binding("w", "toggle_wrap", "Wrap", show=False),
        Binding("slash", "search", "Search", key_display="/", show=False),
        Binding("n", "next_match(1)", "Next match", show=False),
        Binding("N", "next_match(-1)", "Previous match", show=False),
        Binding("e", "next_error", "Error"),
        Binding("G,end", "log_end", "End", show=False),
        Binding("home", "log_start", "Start", show=False),  # (not g: g is the GPUs on every screen)
        Binding("b", "toggle_fold", "Banner", show=False),
        Binding("l", "toggle_log_scale", "Log scale", show=False),
        Binding("R", "next_run", "Next run", show=False),
        Binding("1", "tab('tab-log')", "Log", show=False),
        Binding("2", "tab('tab-curves')", "Curves", show=False),
        Binding("3", "tab('tab-config')", "Config", show=False),
        Binding("4", "tab('tab-result')", "Result", show=False),
        Binding("c", "cancel", "Cancel"),
        Binding("r", "retry", "Retry"),
        Binding("t", "tensorboard", "TensorBoard"),
        Binding("a", "attach", "Attach", show=False),
    ]

    def __init__(self, job_id: int):
        super().__init__()
        self.job_id = job_id
        self.job: dict[str, Any] | None = None
        self.lines: list[str] = []
        self.log_offset = 0
        self.follow, self.wrap, self.fold = True, False, True
        self.log_scale = True
        self.folder = Folder()
        self.query_text = ""
        self.points: list[dict[str, Any]] = []
        self.run: str | None = None
        """The run whose curves are drawn (a script that trained several times); None: the newest."""
        self.points_mark: Any = None  # (newest point, result, status) when the points were last read
        self.points_read_at = 0.0
        self._busy, self.polled_at = False, 0.0
        self.shown: dict[str, str | Text] = {}
        """What each Static shows (by id), so an unchanged value is not sent to the terminal again."""
        self.bound_status: str | None = None

    def compose(self) -> ComposeResult:
        yield from chrome()
        yield Static(f"job {self.job_id} …", id="job-summary")
        with TabbedContent(id="job-tabs"):
            with TabPane("Log", id="tab-log"):
                yield Static("", id="log-state")
                yield FollowLog(id="log", max_lines=KEEP_LINES, auto_scroll=False)  # following is ours: _write_log
                yield Static("", id="log-live")  # the line the job is drawing (a progress bar before its newline)
                yield Input(placeholder="search the log (enter finds, n/N next/previous, esc closes)", id="log-search")
            with TabPane("Curves", id="tab-curves"):
                yield Static("no metric points yet", id="curves")
                with Horizontal(id="plots"):
                    yield Chart(id="plot-loss")
                    yield Chart(id="plot-acc")
            with TabPane("Config", id="tab-config"), VerticalScroll():
                yield Static("", id="config")
            with TabPane("Result", id="tab-result"), VerticalScroll():
                yield Static("", id="result")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#log-search", Input).display = False
        self.query_one("#log-live", Static).display = False
        self._log_state()
        self.set_interval(REFRESH_S, self.poll)  # (the first read: on_screen_resume)

    def on_screen_resume(self) -> None:
        self.poll(now=True)  # shown (first, or again): read it now

    # -- data ----------------------------------------------------------------------------------
    def poll(self, now: bool = False) -> None:
        """Read the job, its new log lines and (when they moved) its points; `now`: even an ended job's."""
        soon, now = now, time.monotonic()
        if self._busy and now - self.polled_at < STUCK_S:
            return  # (a call that went to the banner never calls back: after STUCK_S the next tick tries again)
        if not self.is_active or not self.app.api_ready():
            return  # (under another screen: nothing read, nothing drawn)
        if not soon and self.job and self.job["status"] in ENDED and now - self.polled_at < ENDED_REFRESH_S:
            return
        self._busy, self.polled_at = True, now
        job_id, offset = self.job_id, self.log_offset
        stale = now - self.points_read_at > POINTS_REFRESH_S

        def fetch(client) -> tuple[dict, list[str], int, list[dict] | None, str | None]:
            job = client.job(job_id)
            chunks, at, drawn = [], offset, None
            while True:  # catch up on a long log in pages of 10,000 lines
                text, nxt = client.logs(job_id, at, live=job["status"] not in ENDED)
                text, drawn = split_live(text)
                if nxt == at:
                    break
                chunks.append(text)
                at = nxt
            points = None
            # Every point is read again only when the record's newest point, result or status moved (or now and
            # then while it runs: validation points): a long run has 100,000 of them.
            mark = (job.get("metrics"), job.get("result"), job["status"])
            if mark != self.points_mark or (stale and job["status"] not in ENDED):
                m = client.metrics(job_id)
                points = m["train"] + m["validation"]
                self.points_mark, self.points_read_at = mark, time.monotonic()
            return job, "".join(chunks).splitlines(), at, points, drawn

        def done(result) -> None:
            self._busy = False
            self.apply(*result)

        def failed(exc) -> None:
            self._busy = False
            self._put("job-summary", Text(exc.message, style="bold red"))

        self.app.call_api(fetch, done, failed, group=f"job-{job_id}", exclusive=True)

    def apply(
        self, job: dict[str, Any], new_lines: list[str], offset: int, points: list[dict] | None, drawn: str | None
    ) -> None:
        self.job, self.log_offset = job, offset
        self._summary(job)
        live = self.query_one("#log-live", Static)
        if live.display != (drawn is not None):
            live.display = drawn is not None
        if drawn is not None:
            self._put("log-live", Text(drawn, no_wrap=True, overflow="ellipsis"))
        if new_lines:
            self.lines.extend(new_lines)
            if len(self.lines) > KEEP_LINES:
                del self.lines[: len(self.lines) - KEEP_LINES]
            self._write_log(self._shown(self.folder.feed(new_lines) if self.fold else new_lines))
        if job["status"] in ENDED and self.folder.run:  # a log that ends in start-up lines: show them now
            self._write_log(self._shown(self.folder.flush()))
        if points is not None and points != self.points:  # redraw only when a point arrived
            self.points = points
            self._draw()
        config = {"spec": job["spec"], "source": job.get("source"), "environment": job.get("environment")}
        shown = {k: v for k, v in config.items() if v} if job["spec"].get("command") is not None else job["spec"]
        self._put("config", fields_text(shown))
        self._put("result", result_text(job))
        if job["status"] != self.bound_status:  # cancel and retry follow the status (the footer is redrawn)
            self.bound_status = job["status"]
            self.refresh_bindings()

    def _put(self, widget_id: str, content: str | Text) -> None:
        """Show `content` in a Static unless it already shows that (on a slow link each update repaints it), and
        lay the screen out again only when it takes another number of rows (a layout costs ~50 ms of CPU)."""
        if self.shown.get(widget_id) == content:
            return
        widget = self.query_one(f"#{widget_id}", Static)
        rows = _rows(content, widget.content_region.width or self.app.size.width)
        before = self.shown.get(widget_id)
        self.shown[widget_id] = content
        widget.update(content, layout=before is None or rows != _rows(before, widget.content_region.width))

    def _write_log(self, lines: list[str]) -> None:
        """Add lines to the log pane; while following, show its end. (Log's own auto_scroll only scrolls when the
        view is at the end already, which it is not once the first page was written before the pane had its size:
        the view then stayed where it opened.)"""
        log = self.query_one("#log", Log)
        log.write_lines(lines, scroll_end=self.follow)  # at the end already: only the new lines are repainted
        if self.follow:
            self._follow_end()

    def _follow_end(self) -> None:
        log = self.query_one("#log", Log)
        log.scroll_end(animate=False, immediate=True, x_axis=False)
        self.call_after_refresh(log.scroll_end, animate=False, x_axis=False)  # once the new size is laid out

    def _shown(self, lines: list[str]) -> list[str]:
        if not self.wrap:
            return lines
        width = max(20, self.query_one("#log", Log).size.width - 2)
        return [part for line in lines for part in (textwrap.wrap(line, width) or [""])]

    def _summary(self, job: dict[str, Any]) -> None:
        text = header_text(job, max(20, (self.size.width or self.app.size.width) - 2))
        if way_in := session_text(job):
            text.append(f"\n{way_in}", style="bold")
        if job["status"] == "failed":  # why, on the first screen: the lines that explain it
            for line in explain(job.get("log_tail") or [], most=4):
                text.append("\n  " + line[: max(20, self.size.width - 4)], style="red")
        self._put("job-summary", text)

    CURVES = (
        ("plot-loss", "loss", (("loss", "train", "cyan"), ("val_loss", "validation", "orange"))),
        ("plot-acc", "accuracy", (("accuracy", "train", "green"), ("val_accuracy", "validation", "magenta"))),
    )
    """Each chart: its widget, title, and (metric, legend, colour) of its lines."""

    def _draw(self) -> None:
        """Loss and accuracy over the whole run, training and validation, by step, at the pane's size (loss on a
        log scale unless `l` turned it off); above them the numbers of what is drawn."""
        self.query_one("#curves", Static).update(self._curves())
        for widget_id, title, lines in self.CURVES:
            widget = self.query_one(f"#{widget_id}", PlotextPlot)
            log_scale = title == "loss" and self.log_scale
            series = []
            for key, label, color in lines:
                xy = [
                    (p["step"], math.log10(p[key]) if log_scale else p[key])
                    for p in self.run_points()
                    if isinstance(p.get(key), (int, float)) and (p[key] > 0 or not log_scale)
                ]
                if xy:
                    series.append(([x for x, _ in xy], [y for _, y in xy], label, color))
            plt = widget.plt
            plt.clear_data()
            for xs, ys, _label, color in series:  # (no legend over the curves: the lines above name the colours)
                plt.plot(xs, ys, color=color, marker="braille")
            ys_all = [y for _, ys, _, _ in series for y in ys]
            if ys_all:
                plt.yticks(*axis_ticks(min(ys_all), max(ys_all), log_scale))
            # log10 of the values on a linear axis: plotext's own log scale fails on a single point or a set ylim
            plt.title(f"{'log10 ' if log_scale else ''}{title}" if series else f"{title}: -")
            plt.xlabel("step")
            widget.refresh()

    def shown_run(self) -> str | None:
        runs = (self.job or {}).get("runs") or []
        return self.run if self.run in runs else (runs[-1] if runs else None)

    def run_points(self) -> list[dict[str, Any]]:
        """The points of the run shown (every point when the job has one run or none)."""
        runs = (self.job or {}).get("runs") or []
        if len(runs) < 2:
            return self.points
        run = self.shown_run()
        return [p for p in self.points if p.get("run") == run]

    def action_next_run(self) -> None:
        runs = (self.job or {}).get("runs") or []
        if len(runs) > 1:
            self.run = runs[(runs.index(self.shown_run()) + 1) % len(runs)]
            self._draw()

    def action_toggle_log_scale(self) -> None:
        self.log_scale = not self.log_scale
        self._draw()

    def _curves(self) -> Text:
        colors = {key: color for _, _, lines in self.CURVES for key, _, color in lines}
        return curves_text(self.run_points(), (self.job or {}).get("runs") or [], self.shown_run(), colors)

    # -- actions -------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        status_now = self.job["status"] if self.job else None
        if action == "cancel":
            return status_now in UNENDED
        if action == "retry":
            return status_now in ENDED
        if action in LOG_ACTIONS:  # the log's keys, where the log is shown
            return self._active_tab() == "tab-log"
        if action == "toggle_log_scale":
            return self._active_tab() == "tab-curves"
        return True

    def _active_tab(self) -> str:
        try:
            return self.query_one("#job-tabs", TabbedContent).active
        except NoMatches:
            return "tab-log"

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """The shown tab takes the keys: ↓, PgDn and j scroll the config or the result at once (no Tab first),
        and the footer offers what works there."""
        pane = event.pane.id
        if pane in ("tab-config", "tab-result"):
            event.pane.query_one(VerticalScroll).focus()
        elif pane == "tab-log":
            self.query_one("#log", Log).focus()
        self.refresh_bindings()

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        if self.follow:
            self._follow_end()
        self._log_state()

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        self._relayout()

    def action_toggle_fold(self) -> None:
        self.fold = not self.fold
        self._relayout()

    def _relayout(self) -> None:
        """Write every line again (wrapped or not, folded or not), keeping the view about where it was."""
        log = self.query_one("#log", Log)
        where = log.scroll_y / log.max_scroll_y if log.max_scroll_y else 1.0
        log.clear()
        self.folder = Folder()
        shown = self.folder.feed(self.lines) if self.fold else list(self.lines)
        if self.job and self.job["status"] in ENDED:
            shown += self.folder.flush()
        self._write_log(self._shown(shown))
        if not self.follow:  # about the same place in the re-laid lines, not the top
            self.call_after_refresh(lambda: log.scroll_to(y=round(where * log.max_scroll_y), animate=False))
        self._log_state()

    def _log_state(self, note: str = "") -> None:
        """The line above the log: follow, wrap, folding, and what the last search or jump found."""
        state = (
            f"follow {'on' if self.follow else 'off'} (f) · wrap {'on' if self.wrap else 'off'} (w) · "
            f"start-up lines {'folded' if self.fold else 'shown'} (b) · / search · e next error · g/G start/end"
        )
        self.query_one("#log-state", Static).update(Text(f"{note}  {state}" if note else state, style="dim"))

    # -- moving around the log -----------------------------------------------------------------
    def _show_line(self, index: int, note: str) -> None:
        """Scroll so that log line `index` is in view (follow goes off: the user is reading)."""
        self.follow = False
        log = self.query_one("#log", Log)
        log.scroll_to(y=max(0, index - log.size.height // 3), animate=False)
        self._log_state(note)

    def action_log_end(self) -> None:
        self.follow = True
        self._follow_end()
        self._log_state()

    def action_log_start(self) -> None:
        self._show_line(0, "")

    def action_search(self) -> None:
        self.query_one("#job-tabs", TabbedContent).active = "tab-log"
        box = self.query_one("#log-search", Input)
        box.display = True
        box.value = self.query_text
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "log-search":
            return
        event.input.display = False
        self.query_one("#log", Log).focus()
        self.query_text = event.value.strip()
        if self.query_text:
            self._find(lambda line: self.query_text.lower() in line.lower(), 1, f"/{self.query_text}", first=True)

    def action_back(self) -> None:
        """Esc closes the search box when it is open, else goes back to the jobs."""
        box = self.query_one("#log-search", Input)
        if box.display:
            box.display = False
            self.query_one("#log", Log).focus()
        else:
            self.app.pop_screen()

    def action_next_match(self, direction: int) -> None:
        if self.query_text:
            self._find(lambda line: self.query_text.lower() in line.lower(), direction, f"/{self.query_text}")

    def action_next_error(self) -> None:
        self._find(lambda line: bool(ERROR_LINE.search(line)), 1, "error")

    def _find(self, match, direction: int, what: str, first: bool = False) -> None:
        """Go to the next line (after the one a third down the view; before it for -1) that `match`es."""
        log = self.query_one("#log", Log)
        lines = log.lines
        hits = [i for i, line in enumerate(lines) if match(line)]
        if not hits:
            self._log_state(f"{what}: not found")
            return
        here = log.scroll_y + log.size.height // 3
        if direction > 0:
            after = [i for i in hits if i > here or (first and i >= here)]
            index = after[0] if after else hits[0]
        else:
            before = [i for i in hits if i < here]
            index = before[-1] if before else hits[-1]
        self._show_line(index, f"{what}: {hits.index(index) + 1} of {len(hits)} (line {index + 1})")

    def action_scroll_log(self, lines: int) -> None:
        if self._active_tab() in ("tab-config", "tab-result"):  # j and k scroll what is shown
            pane = self.query_one(f"#{self._active_tab()}", TabPane)
            pane.query_one(VerticalScroll).scroll_relative(y=lines, animate=False)
            return
        log = self.query_one("#log", Log)
        if lines < 0:
            self.follow = False
            self._log_state()
        log.scroll_relative(y=lines, animate=False)

    def action_tab(self, pane: str) -> None:
        self.query_one("#job-tabs", TabbedContent).active = pane

    def action_cancel(self) -> None:
        def confirmed(yes: bool | None) -> None:
            if yes:
                self.app.call_api(lambda c: c.cancel(self.job_id), lambda job: self.notify(f"job {job['id']}: cancel"))

        self.app.push_screen(Confirm(f"Cancel job {self.job_id}?"), confirmed)

    def action_retry(self) -> None:
        def confirmed(yes: bool | None) -> None:
            if yes:
                self.app.call_api(lambda c: c.retry(self.job_id), self._retried)

        self.app.push_screen(Confirm(f"Submit job {self.job_id} again as a new job?"), confirmed)

    def _retried(self, job: dict[str, Any]) -> None:
        self.notify(f"job {self.job_id} resubmitted as job {job['id']}")
        self.app.switch_screen(JobScreen(job["id"]))

    def action_tensorboard(self) -> None:
        if (self.job or {}).get("url"):  # a notebook session: its notebook, as TensorBoard's dialog shows one
            self.action_attach()
            return
        open_tensorboard(self.app, [self.job_id])

    def action_attach(self) -> None:
        """A shell session: this terminal attached to it (the TUI suspended until Ctrl-] or its end), or the ssh
        line where it runs on another host; a notebook: its URL and tunnel line."""
        job = self.job or {}
        if job.get("kind") != "session":
            self.notify(f"job {self.job_id} is not a session", severity="warning")
            return
        if job.get("url"):
            self.app.push_screen(notebook_dialog(job))
            return
        where = job.get("attach")
        if not where:
            self.notify(f"session {self.job_id} is {job['status']}: nothing to attach to", severity="warning")
            return
        if not local_host(where["host"]) or not where.get("secret"):
            self.notify(f"session {self.job_id} runs on {where['host']}: {where['ssh']}", timeout=15)
            return
        from tui.attach import AttachError, attach

        try:
            with self.app.suspend():
                print(f"attached to session {self.job_id} (Ctrl-] comes back to gpudeck)", flush=True)
                attach(where["port"], where["secret"])
        except AttachError as exc:
            self.notify(str(exc), severity="error")
