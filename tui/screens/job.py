"""One job: a following log tail, loss and accuracy curves, the config, the result or the failure reason;
cancel and retry behind a confirmation, enabled only where they make sense."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Log, Static, TabbedContent, TabPane

from tui.screens.dialogs import Confirm, open_tensorboard
from tui.widgets.chrome import chrome
from tui.widgets.fmt import ACTIVE, ENDED, bar, duration, num, sparkline, status, what

KEEP_LINES = 200_000
"""Log lines the screen keeps (the job dir's log.txt has them all)."""
REFRESH_S = 1.0


class JobScreen(Screen):
    BINDINGS = [
        Binding("escape,backspace", "app.pop_screen", "Back"),
        Binding("f", "toggle_follow", "Follow"),
        Binding("w", "toggle_wrap", "Wrap"),
        Binding("c", "cancel", "Cancel job"),
        Binding("r", "retry", "Retry job"),
        Binding("t", "tensorboard", "TensorBoard"),
    ]

    def __init__(self, job_id: int):
        super().__init__()
        self.job_id = job_id
        self.job: dict[str, Any] | None = None
        self.lines: list[str] = []
        self.log_offset = 0
        self.follow, self.wrap = True, False
        self.points: list[dict[str, Any]] = []
        self._busy = False

    def compose(self) -> ComposeResult:
        yield from chrome()
        yield Static(f"job {self.job_id} …", id="job-summary")
        with TabbedContent(id="job-tabs"):
            with TabPane("Log", id="tab-log"):
                yield Log(id="log", max_lines=KEEP_LINES)
            with TabPane("Curves", id="tab-curves"):
                yield Static("no metric points yet", id="curves")
            with TabPane("Config", id="tab-config"):
                yield Static("", id="config")
            with TabPane("Result", id="tab-result"):
                yield Static("", id="result")
        yield Footer()

    def on_mount(self) -> None:
        self.poll()
        self.set_interval(REFRESH_S, self.poll)

    # -- data ----------------------------------------------------------------------------------
    def poll(self) -> None:
        if self._busy or not self.app.api_ready():
            return
        self._busy = True
        job_id, offset, want_points = self.job_id, self.log_offset, self.job is None or self.job["status"] not in ENDED

        def fetch(client) -> tuple[dict, list[str], int, list[dict] | None]:
            job = client.job(job_id)
            chunks, at = [], offset
            while True:  # catch up on a long log in pages of 10,000 lines
                text, nxt = client.logs(job_id, at)
                if nxt == at:
                    break
                chunks.append(text)
                at = nxt
            points = None
            if want_points or not self.points:
                m = client.metrics(job_id)
                points = m["train"] + m["validation"]
            return job, "".join(chunks).splitlines(), at, points

        def done(result) -> None:
            self._busy = False
            self.apply(*result)

        def failed(exc) -> None:
            self._busy = False
            self.query_one("#job-summary", Static).update(Text(exc.message, style="bold red"))

        self.app.call_api(fetch, done, failed, group=f"job-{job_id}", exclusive=True)
        self.set_timer(10, self._unstick)

    def _unstick(self) -> None:
        self._busy = False  # a call that went to the banner never calls back: try again next tick

    def apply(self, job: dict[str, Any], new_lines: list[str], offset: int, points: list[dict] | None) -> None:
        self.job, self.log_offset = job, offset
        self._summary(job)
        if new_lines:
            self.lines.extend(new_lines)
            if len(self.lines) > KEEP_LINES:
                del self.lines[: len(self.lines) - KEEP_LINES]
            self.query_one("#log", Log).write_lines(self._shown(new_lines))
        if points is not None:
            self.points = points
            self.query_one("#curves", Static).update(self._curves())
        config = {"spec": job["spec"], "source": job.get("source"), "environment": job.get("environment")}
        shown = {k: v for k, v in config.items() if v} if job["spec"].get("command") is not None else job["spec"]
        self.query_one("#config", Static).update(json.dumps(shown, indent=2))
        self.query_one("#result", Static).update(self._result(job))
        self.refresh_bindings()

    def _shown(self, lines: list[str]) -> list[str]:
        if not self.wrap:
            return lines
        width = max(20, self.query_one("#log", Log).size.width - 2)
        return [part for line in lines for part in (textwrap.wrap(line, width) or [""])]

    def _summary(self, job: dict[str, Any]) -> None:
        p = job.get("progress") or {}
        tasks = "".join(
            f"\n  {t['type']}:{t['task_index']} {t['status']} on {t['worker']}" for t in job.get("tasks") or []
        )
        text = Text.assemble(
            (f"job {job['id']}  {job.get('name')}  ", "bold"),
            status(job["status"]),
            (f" ({job['reason']})" if job.get("reason") else "", "red"),
            f"  {what(job['spec'])} on {job['spec'].get('dataset') or '-'}",
            f"  worker {job.get('worker') or '-'} gpus {','.join(job.get('gpu_ids') or []) or job['spec']['gpus']}",
            tasks,
            "\n",
            f"{bar(p.get('fraction'), 20)}  step {p.get('step') or 0}/{p.get('total_steps') or '?'}",
            f"  elapsed {duration(job.get('elapsed_s')) or '-'}",
            f"  eta {duration(job.get('eta_s')) or '-'}" if job["status"] == "running" else "",
            f"  loss {num((job.get('metrics') or {}).get('loss'))}",
            f"\n{job['message']}" if job.get("message") else "",
            f"  follow {'on' if self.follow else 'off'}, wrap {'on' if self.wrap else 'off'}",
        )
        self.query_one("#job-summary", Static).update(text)

    def _curves(self) -> Text:
        """Loss and accuracy, training and validation, as sparklines scaled to their own range."""
        out = Text()
        for key, label in (
            ("loss", "train loss"),
            ("val_loss", "val loss"),
            ("accuracy", "train acc"),
            ("val_accuracy", "val acc"),
        ):
            values = [p[key] for p in self.points if p.get(key) is not None]
            if not values:
                continue
            lo, hi = min(values), max(values)
            scaled = [(v - lo) / (hi - lo) * 100 if hi > lo else 50.0 for v in values]
            width = max(10, min(100, self.size.width - 40))
            step = max(1, len(scaled) // width)
            out.append(f"{label:>11} ", style="bold")
            out.append(sparkline(scaled[::step], width), style="cyan" if "loss" in key else "green")
            out.append(f"  {values[0]:.4f} → {values[-1]:.4f} (min {lo:.4f}, max {hi:.4f}, {len(values)} points)\n")
        return out or Text("no metric points yet")

    def _result(self, job: dict[str, Any]) -> Text:
        if job.get("result"):
            return Text("\n".join(f"{k:>15}  {num(v)}" for k, v in job["result"].items()))
        if job["status"] in ("failed", "canceled"):
            tail = "\n".join(job.get("log_tail") or [])
            return Text(f"{job['status']}: {job.get('reason')}\n{job.get('message') or ''}\n\n{tail}", style="red")
        return Text("no result yet")

    # -- actions -------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        status_now = self.job["status"] if self.job else None
        if action == "cancel":
            return status_now in ACTIVE
        if action == "retry":
            return status_now in ENDED
        return True

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        log = self.query_one("#log", Log)
        log.auto_scroll = self.follow
        if self.follow:
            log.scroll_end(animate=False)
        if self.job:
            self._summary(self.job)

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        log = self.query_one("#log", Log)
        log.clear()
        log.write_lines(self._shown(self.lines))
        if self.job:
            self._summary(self.job)

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
        open_tensorboard(self.app, [self.job_id])
