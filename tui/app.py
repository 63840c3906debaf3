"""`gpudeck tui`: a Textual app that watches and steers jobs through the REST API only.

Every HTTP call runs in a worker thread (`App.call_api`); the UI thread only applies results. When the API is
down or refuses the token, a banner says so and calls back off (2, 4, 8 … 30 s) instead of raising."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.widget import Widget
from textual.worker import Worker, get_current_worker

from models.sourcetree import human
from tui.client import ApiError, Client, Unreachable
from tui.palette import GpudeckCommands
from tui.screens.compare import KEYS as COMPARE_KEYS
from tui.screens.compare import CompareScreen
from tui.screens.dialogs import KeysHelp
from tui.screens.gpus import GpusScreen, gpu_history
from tui.screens.job import KEYS as JOB_KEYS
from tui.screens.job import JobScreen
from tui.screens.jobs import KEYS as JOBS_KEYS
from tui.screens.jobs import JobsScreen
from tui.screens.schedules import SchedulesScreen
from tui.screens.share import ShareScreen
from tui.screens.submit import SubmitScreen
from tui.screens.sweep import KEYS as SWEEP_KEYS
from tui.screens.sweep import SweepScreen
from tui.widgets.chrome import Banner
from tui.widgets.fmt import box_summary

STATUS_EVERY_S = 5.0
"""How often the title bar's line is read: the box's GPUs busy, the jobs queued, yours, the free disk space."""
BACKOFF_S = (2, 4, 8, 16, 30)


class GpudeckApp(App):
    """The terminal UI; screens live in tui/screens/."""

    CSS_PATH = Path(__file__).parent / "app.tcss"  # absolute: subclasses elsewhere find it too
    TITLE = "gpudeck"
    COMMANDS = {GpudeckCommands}  # (it lists Textual's own commands after gpudeck's)
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "toggle_help", "Help", key_display="?"),
        Binding("n", "submit", "New"),  # (a new job: "New job" ran under the palette key at 80 columns)
        Binding("g", "gpus", "GPUs", show=False),  # (in `?` and the palette: the footer fits 80 columns)
        Binding("u", "share", "Share", show=False),
        Binding("o", "schedules", "Schedules", show=False),
    ]

    def __init__(self, api_url: str, token: str | None = None, job: int | None = None):
        super().__init__()
        self.first_job = job
        self.api_url, self.token = api_url.rstrip("/"), token
        self._local = threading.local()
        self.failures = 0
        self.retry_at = 0.0
        self.sub_title = self.api_url
        self.me: dict[str, Any] | None = None
        """Who the token is (GET /api/v1/whoami), read once: the title bar says what is yours."""
        self.gpu_history = gpu_history()
        """Each GPU's utilization samples, for the GPUs screen's sparkline: kept while the app runs, not per visit."""

    # -- HTTP off the UI thread ----------------------------------------------------------------
    def client(self) -> Client:
        """A Client for the calling thread (a requests session is not shared between threads)."""
        if getattr(self._local, "key", None) != (self.api_url, self.token):
            self._local.client = Client(self.api_url, self.token, timeout=10)
            self._local.key = (self.api_url, self.token)
        return self._local.client

    def api_ready(self) -> bool:
        """False while backing off after a failure (periodic refreshes skip their turn)."""
        return time.monotonic() >= self.retry_at

    def call_api(
        self,
        call: Callable[[Client], Any],
        on_ok: Callable[[Any], None],
        on_error: Callable[[ApiError], None] | None = None,
        group: str = "api",
        exclusive: bool = False,
    ) -> Worker:
        """Run `call(client)` in a thread (the worker it runs in is returned); `on_ok(result)` on the UI thread.
        Unreachable and 401 go to the banner; other API errors to `on_error` (or a notification). A call whose
        worker was cancelled meanwhile (a newer one of its `exclusive` group began) delivers nothing: its answer is
        older than the newer one's."""

        def work() -> None:
            worker = get_current_worker()
            try:
                result = call(self.client())
            except Unreachable as exc:
                if not worker.is_cancelled:
                    self.call_from_thread(
                        self._failed, f"Cannot reach the gpudeck API at {self.api_url} ({_short(exc)})"
                    )
            except ApiError as exc:
                if worker.is_cancelled:
                    return
                if exc.status == 401:
                    self.call_from_thread(
                        self._failed, f"The API refused the token (401): set GPUDECK_TOKEN or --token. {exc.message}"
                    )
                else:
                    self.call_from_thread(self._ok_then, on_error or self._notify_error, exc)
            else:
                if not worker.is_cancelled:
                    self.call_from_thread(self._ok_then, on_ok, result)

        return self.run_worker(work, thread=True, group=group, exclusive=exclusive, exit_on_error=False)

    def _notify_error(self, exc: ApiError) -> None:
        self.notify(exc.message, title=f"HTTP {exc.status}", severity="error")

    def _ok_then(self, handler: Callable[[Any], None], value: Any) -> None:
        if self.failures:
            self.failures = 0
            self.retry_at = 0.0
            for banner in self._banners():
                banner.clear()
        owner = getattr(handler, "__self__", None)
        if isinstance(owner, Widget) and not owner.is_attached:
            return  # its screen was closed while the call was in flight
        handler(value)

    def _failed(self, text: str) -> None:
        delay = BACKOFF_S[min(self.failures, len(BACKOFF_S) - 1)]
        self.failures += 1
        self.retry_at = time.monotonic() + delay
        for banner in self._banners():
            banner.show(f"{text} — retrying in {delay} s")

    def _banners(self) -> list[Banner]:
        return [b for screen in self.screen_stack for b in screen.query(Banner)]

    # -- screens -------------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.read_title()
        self.set_interval(STATUS_EVERY_S, self.read_title)
        self.push_screen(JobsScreen())
        if self.first_job is not None:
            self.push_screen(JobScreen(self.first_job))

    def read_title(self) -> None:
        """The title bar's line: the box (`3/4 GPUs busy · 5 queued · you: 2/2 GPUs`), then the free space under
        the server's GPUDECK_HOME (`LOW`: below GPUDECK_MIN_FREE, where new jobs are refused), then the API."""
        if not self.api_ready():
            return

        def read(c: Client) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
            me = self.me if self.me is not None else c.whoami()
            health = c.request("GET", "/healthz").json()
            return health, c.share(), c.request("GET", "/api/v1/workers").json()["workers"], me

        self.call_api(read, self._show_title, group="title", exclusive=True)

    def _show_title(self, answer: tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]], dict[str, Any]]) -> None:
        health, share, workers, self.me = answer
        parts = [box_summary(share, workers, self.me)]
        if space := health.get("disk"):
            parts.append(
                f"{human(space['free_bytes'])} free" + (" — LOW: new jobs refused" if space.get("low") else "")
            )
        self.sub_title = " · ".join([*parts, self.api_url])

    def action_toggle_help(self) -> None:
        """gpudeck's keys for the current screen (a screen without its own list gets Textual's help panel)."""
        screen = self.screen
        if isinstance(screen, KeysHelp):
            self.pop_screen()
        elif isinstance(screen, JobsScreen):
            self.push_screen(KeysHelp("jobs", JOBS_KEYS))
        elif isinstance(screen, JobScreen):
            self.push_screen(KeysHelp(f"job {screen.job_id}", JOB_KEYS))
        elif isinstance(screen, SweepScreen):
            self.push_screen(KeysHelp(f"sweep {screen.sweep_id}", SWEEP_KEYS))
        elif isinstance(screen, CompareScreen):
            self.push_screen(KeysHelp(f"jobs {', '.join(map(str, screen.job_ids))}", COMPARE_KEYS))
        elif screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    def open_job(self, job_id: int) -> None:
        self.push_screen(JobScreen(job_id))

    def open_sweep(self, sweep_id: int) -> None:
        self.push_screen(SweepScreen(sweep_id))

    def show_jobs(self, facet: str) -> None:
        """Back to the jobs table, showing the jobs of one status (`all`: every one)."""
        while not isinstance(self.screen, JobsScreen) and len(self.screen_stack) > 2:
            self.pop_screen()
        if isinstance(self.screen, JobsScreen):
            self.screen.show_status(None if facet == "all" else facet)

    def action_tensorboard(self) -> None:
        if isinstance(self.screen, (JobsScreen, JobScreen)):
            self.screen.action_tensorboard()
        else:
            self.notify("TensorBoard: open a job (or the jobs table) first", severity="warning")

    def action_gpus(self) -> None:
        if not isinstance(self.screen, GpusScreen):
            self.push_screen(GpusScreen(self.gpu_history))

    def action_share(self) -> None:
        if not isinstance(self.screen, ShareScreen):
            self.push_screen(ShareScreen())

    def action_schedules(self) -> None:
        if not isinstance(self.screen, SchedulesScreen):
            self.push_screen(SchedulesScreen())

    def action_submit(self) -> None:
        def opened(job: dict | None) -> None:
            if job:
                self.push_screen(JobScreen(job["id"]))

        self.push_screen(SubmitScreen(), opened)


def _short(exc: Exception) -> str:
    text = str(exc)
    return text.split(": ", 1)[-1][:120]
