"""gpudeck's commands in the command palette (ctrl+p): open job N or sweep N by typing its number, the GPUs and
workers, a new job, TensorBoard, the jobs table filtered by a status."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from models.states import ENDED

NUMBER = re.compile(r"\d+")


class GpudeckCommands(Provider):
    def commands(self) -> list[tuple[str, str, Callable[[], object]]]:
        """(title, help, callback) of the commands that need no number."""
        app = self.app
        out: list[tuple[str, str, Callable[[], object]]] = [
            ("GPUs and workers", "GPUs, workers, what their jobs use, the queued jobs in line", app.action_gpus),
            (
                "Fair share",
                "who uses the box: GPUs held, decayed GPU-hours, running and queued, per person",
                app.action_share,
            ),
            ("Schedules", "jobs made on a cron: next firings, what each made; pause, delete", app.action_schedules),
            ("New job", "the form to submit a job", app.action_submit),
            ("TensorBoard", "TensorBoard on the current job (or the selected ones)", app.action_tensorboard),
            ("Keys", "gpudeck's keys on this screen", app.action_toggle_help),
        ]
        from tui.screens.jobs import JobsScreen

        if isinstance(self.screen, JobsScreen):  # (what + - T do there, found by name)
            out += [
                ("Priority up", "raise the priority of the selected queued jobs (or this one): +", partial(
                    self.screen.action_priority, -1)),
                ("Priority down", "lower the priority of the selected queued jobs (or this one): -", partial(
                    self.screen.action_priority, 1)),
                ("Top of line", "move the selected queued jobs (or this one) to the top of their line: T",
                 self.screen.action_top),
                ("Compare", "the selected jobs side by side (two or more: space selects): C",
                 self.screen.action_compare),
            ]  # fmt: skip
        for facet in ("all", "running", "starting", "queued", *ENDED):
            out.append((f"Show {facet} jobs", f"the jobs table, status: {facet}", partial(app.show_jobs, facet)))
        # Textual's own (theme, quit, screenshot, …) after gpudeck's: this provider is the palette's only one, so
        # an empty palette lists gpudeck's first
        out += [(c.title, c.help, c.callback) for c in app.get_system_commands(self.screen)]
        return out

    def undiscovered(self) -> set[str]:
        """Textual's commands that it shows only when searched for."""
        return {c.title for c in self.app.get_system_commands(self.screen) if not c.discover}

    def known_sweeps(self) -> set[int]:
        """The sweeps of the jobs the jobs table holds (the palette offers only those, unless `sweep` is typed)."""
        from tui.screens.jobs import JobsScreen

        tables = [s for s in self.app.screen_stack if isinstance(s, JobsScreen)]
        return {j["sweep_id"] for s in tables for j in s.jobs.values() if j.get("sweep_id") is not None}

    async def discover(self) -> Hits:
        hidden = self.undiscovered()
        for title, help_text, callback in self.commands():
            if title not in hidden:
                yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        number = NUMBER.search(query)
        if number:  # `12`, `job 12`, `sweep 3`
            n = int(number.group())
            sweep_first = "sweep" in query.lower()
            yield Hit(
                1.0 if not sweep_first else 0.9,
                f"Open job {n}",
                partial(self.app.open_job, n),
                help="its log, curves, config and result",
            )
            if sweep_first or n in self.known_sweeps():
                yield Hit(
                    1.0 if sweep_first else 0.9,
                    f"Open sweep {n}",
                    partial(self.app.open_sweep, n),
                    help="its runs ranked, their curves overlaid",
                )
        matcher = self.matcher(query)
        for title, help_text, callback in self.commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)
