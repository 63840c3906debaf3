"""The jobs screen: a live table updated in place every 2 s, with a filter, sorting and status facets."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static
from textual.worker import Worker

from models.common import search_text
from tui.client import ApiError
from tui.screens import jobsread
from tui.screens.compare import CompareScreen
from tui.screens.dialogs import Confirm, open_tensorboard
from tui.screens.job import JobScreen
from tui.screens.jobsread import (  # noqa: F401 (re-exported: their old home)
    FACETS,
    LIVE_FACETS,
    MAX_JOBS,
    SORTED_MAX_JOBS,
    WHOLE_EVERY_S,
)
from tui.screens.sweep import SweepScreen, sweep_of
from tui.widgets.chrome import chrome
from tui.widgets.fmt import (
    ENDED,
    UNENDED,
    EtaSmoother,
    gpus_text,
    human,
    id_list,
    job_cells,
    sweep_kinds,
    uncut,
)
from tui.widgets.jobstable import (  # noqa: F401 (re-exported: their old home)
    COLUMNS,
    COMPACT,
    FILL,
    FLEX,
    FLEX_WIDE,
    GIVE_WAY,
    SORT_VALUES,
    WIDE_COLUMNS,
    JobsTable,
    Widths,
    fit_columns,
    id_of,
)

REFRESH_S = 2.0
FILTER_PAUSE_S = 0.3
"""The filter asks the API (which reaches jobs older than those read) once typing has paused this long."""


KEYS = [
    (
        "Move",
        [
            ("↑ ↓  j k", "move"),
            ("home  end  G", "the first, the last job"),
            ("enter  l", "open the job (on its log)"),
            ("space", "select (✓ beside the id)"),
            ("a  A", "select every job shown; clear the selection"),
        ],
    ),
    (
        "View",
        [
            ("/", "filter by words in name, model, status, tags (esc clears)"),
            ("s", "sort by the next column (or click a header)"),
            ("S", "reverse the order"),
            ("f", "next status: all, running, starting, queued, succeeded, failed, canceled"),
        ],
    ),
    (
        "Act",
        [
            ("c", "cancel the selected jobs (or this one), after one confirmation"),
            ("+  -", "raise or lower the priority of the selected queued jobs (or this one)"),
            ("T", "move the selected queued jobs (or this one) to the top of their line"),
            ("D", "delete the selected ended jobs (or this one) for good: record, log, job dir"),
            ("t", "TensorBoard on the selected jobs (or this one)"),
            ("w", "the sweep of this job: its runs ranked, their curves overlaid"),
            ("C", "compare the selected jobs: what differs, results, curves overlaid"),
            ("n", "new job"),
            ("g", "GPUs and workers"),
            ("u", "who uses the box: fair share per person"),
            ("o", "the schedules (jobs made on a cron): p pauses or resumes one, D deletes it"),
        ],
    ),
    (
        "Sessions",
        [
            ("enter  a", "a session (gpudeck session): open it, then a attaches to its shell or shows its notebook"),
        ],
    ),
]


class JobsScreen(Screen):
    # The footer at 80 columns: open, select, filter, cancel, new job, help, quit; the rest are in `?`. (enter is a
    # priority binding: the table's own enter, which the footer would show instead, never shadows it. So is escape:
    # a priority binding is handled as its key arrives, a plain one once the focused widget passes it on, so esc
    # then enter typed at once would otherwise be handled enter first, in the filter, and open nothing.)
    BINDINGS = [
        Binding("enter", "open", "Open", priority=True),
        Binding("space", "select", "Select"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("c", "cancel", "Cancel"),
        Binding("s", "sort", "Sort", show=False),
        Binding("S", "reverse_sort", "Reverse", show=False),
        Binding("f", "facet", "Status", show=False),
        Binding("j", "move(1)", "Down", show=False),
        Binding("k", "move(-1)", "Up", show=False),
        Binding("t", "tensorboard", "TensorBoard", show=False),
        Binding("w", "sweep", "Sweep", show=False),
        Binding("C", "compare", "Compare", show=False),
        Binding("l", "open", "Log", show=False),  # (as k9s: the job's screen opens on its log)
        Binding("D", "delete", "Delete", show=False),
        Binding("plus", "priority(-1)", "Priority up", show=False),
        Binding("minus", "priority(1)", "Priority down", show=False),
        Binding("T", "top", "Top of line", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False, priority=True),  # (as enter: in the order typed)
        Binding("a", "select_all", "Select all", show=False),
        Binding("A", "select_none", "Clear selection", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[int, dict[str, Any]] = {}
        self.selected: set[int] = set()
        self.filter_text = ""
        self.sort_column, self.sort_reverse = "id", True
        self.facet = 0
        self.eta = EtaSmoother()
        self.refreshed_at = 0.0
        self.written: dict[int, tuple[tuple, dict[str, str], dict[str, int]]] = {}
        self.widths = Widths()
        """Each column's widest cell over the rows written (what _fit fits the columns to)."""
        """Per row: (the answer it was written from, selected, compact, caps), the text of each cell written, and
        the width of its FLEX cells uncut."""
        self.state_line = ""
        self.searched: dict[int, tuple[dict[str, Any], str]] = {}
        """Per job: the answer its search text was made from, and the text (made again only when it changes)."""
        self.typed_at: Any = None
        """The timer that reads the API once the filter's typing pauses (FILTER_PAUSE_S)."""
        self.caps: dict[str, int] = {}
        """The width each FLEX column's cells are cut to (fit_columns)."""
        self.ordered_by: tuple = ()
        self.owners = False
        self.gpus_alike = False
        """Whether every job listed reads the same in the GPU column (a CPU box: `cpu`): the column is left out."""
        self.total: int | None = None
        self.whole_read: tuple[Any, ...] | None = None
        """(when, facet, filter) of the last read of every job the table holds, sorted by a column but id: between
        two (WHOLE_EVERY_S), a refresh reads only what may have changed."""
        self.reading: Worker | None = None
        """The worker of the last read (the timer starts no other while it runs)."""
        self.more = False
        """Whether the facet and filter match more jobs than the newest MAX_JOBS that were read."""
        """Whether any job listed has an owner (named tokens): the table then has an OWNER column."""

    def compose(self) -> ComposeResult:
        yield from chrome()
        with Horizontal(id="jobs-bar"):
            yield Static("", id="jobs-state")
        table: DataTable = JobsTable(id="jobs", cursor_type="row", zebra_stripes=True, fixed_columns=1)  # ID stays
        self.columns = self._columns_for(self.app.size.width)
        for key, label in self.columns:
            table.add_column(label, key=key)
        yield table
        yield Input(placeholder="filter: text in name, model, status, tags (enter keeps it, esc clears)", id="filter")
        yield Footer()

    def _columns_for(self, width: int) -> list[tuple[str, str]]:
        columns = COLUMNS if width >= WIDE_COLUMNS else COMPACT
        if self.gpus_alike:  # (`cpu` on every row says nothing: its width goes to the others)
            columns = [c for c in columns if c[0] != "gpu"]
        if self.owners:  # (jobs made with named tokens: who owns each, after its id)
            columns = [columns[0], ("owner", "OWNER"), *columns[1:]]
        return columns

    def on_resize(self) -> None:
        """A terminal that crossed WIDE_COLUMNS gets the other set of columns, and every width fits again (the
        rows are written again)."""
        if self.written:  # (once the table has its new size: fitted to the old one, it stayed too wide, issue 64)
            self.call_after_refresh(self._fit)
        else:
            self._set_columns()

    def _fit(self) -> None:
        """The columns and FLEX widths that fit the terminal's width for the rows written (a vertical scroll bar
        takes its columns); where they change, the rows are written again at them."""
        if not self.written:
            return
        table = self.query_one("#jobs", JobsTable)
        natural = self.widths.natural()
        scrollbar = table.styles.scrollbar_size_vertical if table.row_count >= table.size.height - 1 else 0
        width = (table.size.width or self.app.size.width) - scrollbar
        base = self._columns_for(self.app.size.width)
        columns, caps = fit_columns(base, natural, width, FLEX if any(k == "time" for k, _ in base) else FLEX_WIDE)
        if columns != self.columns:
            self.caps = caps
            self._set_columns(columns)  # (which writes every row again)
        elif caps != self.caps:
            self.caps = caps
            self._resort()
            # (the cells are cut to the new caps; a column a wider cell once widened is as wide as its cells now)
            self.query_one("#jobs", JobsTable).fit_widths()

    def _set_columns(self, columns: list[tuple[str, str]] | None = None) -> None:
        columns = self._columns_for(self.app.size.width) if columns is None else columns
        if columns == self.columns:
            return
        self.columns = columns
        table = self.query_one("#jobs", DataTable)
        table.clear(columns=True)
        self.written.clear()
        self.widths.clear()
        for key, label in columns:
            table.add_column(label, key=key)
        if self.sort_column not in {k for k, _ in columns}:
            self.sort_column, self.sort_reverse = "id", True
        self._resort()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.set_interval(REFRESH_S, self._tick)  # (the first read: on_screen_resume)

    def on_screen_resume(self) -> None:
        self.refresh_jobs()

    # -- data ----------------------------------------------------------------------------------
    def _tick(self) -> None:
        """The timer's refresh, unless the last read is still on its way (every job read, sorted by a column, can
        take longer than REFRESH_S: a second one beside it would only double the API's work)."""
        if self.reading is None or self.reading.is_finished:
            self.refresh_jobs()

    def refresh_jobs(self) -> None:
        if not self.is_active or not self.app.api_ready():
            # Under another screen (or a dialog) nothing is read or drawn: Textual composes the screen below the
            # top one with it, so a cell changed there repaints the whole terminal. It reads again when it shows.
            return
        status, words = FACETS[self.facet], self.filter_text or None
        most = MAX_JOBS if self.sort_column == "id" else SORTED_MAX_JOBS
        now, sorted_by_id = time.monotonic(), self.sort_column == "id"
        if sorted_by_id:
            self.whole_read = None  # (the newest MAX_JOBS are held: not every job)
        whole = self.whole_read
        if whole is not None and whole[1:] == (status, words) and now - whole[0] < WHOLE_EVERY_S:
            known, more = dict(self.jobs), self.more  # (the model the table holds: what changed is laid over it)

            def fetch_changed(client) -> tuple[list[dict[str, Any]], int | None, bool, tuple | None]:
                return (*jobsread.changed(client, status, words, known), more, None)

            self.reading = self.app.call_api(fetch_changed, self._read, group="jobs-refresh", exclusive=True)
            return

        def fetch(client) -> tuple[list[dict[str, Any]], int | None, bool, tuple | None]:
            return (*jobsread.window(client, status, words, most), None if sorted_by_id else (now, status, words))

        self.reading = self.app.call_api(fetch, self._read, group="jobs-refresh", exclusive=True)

    def _read(self, answer: tuple[list[dict[str, Any]], int | None, bool, tuple | None]) -> None:
        jobs, self.total, self.more, whole = answer
        if whole is not None:
            self.whole_read = whole
        self.apply(jobs)

    def visible(self, job: dict[str, Any]) -> bool:
        """The facet's status (so a new facet shows its rows at once, before the API's answer) and the filter."""
        status = FACETS[self.facet]
        if status is not None and job["status"] != status:
            return False
        words = self.filter_text.lower().split()
        if not words:
            return True
        made = self.searched.get(job["id"])
        if made is None or made[0] is not job:
            made = self.searched[job["id"]] = (job, search_text(job))
        return all(word in made[1] for word in words)

    def apply(self, jobs: list[dict[str, Any]]) -> None:
        """Update the table in place, touching only what changed (on a slow link every repainted cell costs):
        a job whose answer is the same as last time is skipped, only cells whose text changed are written, the
        rows are re-sorted only when their order changed, the state line only when it reads differently. The
        cursor stays on the job it was on."""
        table = self.query_one("#jobs", JobsTable)
        self.jobs = {j["id"]: j for j in jobs}
        shown = {j["id"]: j for j in jobs if self.visible(j)}
        current = self._cursor_job()
        gone = self.written.keys() - shown.keys()
        table.remove_rows(str(job_id) for job_id in gone)  # (in one pass)
        for job_id in gone:
            del self.written[job_id]
            self.widths.drop(job_id)
        alike = len({gpus_text(j) for j in jobs}) == 1
        owners = any(j.get("owner") or j.get("project") for j in jobs)
        if owners != self.owners or alike != self.gpus_alike:
            self.owners, self.gpus_alike = owners, alike
            self._set_columns()
        compact, now = any(k == "time" for k, _ in self.columns), time.monotonic()
        order_by = (self.sort_column, self.sort_reverse, len(shown))
        moved = order_by != self.ordered_by
        changes: dict[str, dict[str, Any]] = {}
        added: list[tuple[str, list[Any]]] = []
        wrote = False
        kinds = sweep_kinds(list(shown.values()))  # (a search's trials by one kind of accuracy)
        for job_id, job in shown.items():
            seen = (job, job_id in self.selected, compact, self.caps, kinds.get(job_id))
            before = self.written.get(job_id)
            if before is not None and before[0] == seen:
                continue  # the same answer as last time: nothing to write (a running job's elapsed differs)
            moved = True
            job = {**job, "eta_s": self.eta(job_id, job.get("eta_s") if job["status"] == "running" else None, now)}
            cells = job_cells(job, compact, self.caps, kinds.get(job_id))
            mark = cells["mark"] if compact else ""
            cells["id"] = Text(("✓ " if job_id in self.selected else "") + str(job_id) + mark, justify="right")
            texts = {key: str(cells[key]) for key in cells}  # (every one: a column left out may fit later)
            if before is None:
                added.append((str(job_id), [cells[k] for k, _ in self.columns]))
            else:
                changed = {key: cells[key] for key, _ in self.columns if before[1].get(key) != texts[key]}
                if changed:
                    changes[str(job_id)] = changed
            self.written[job_id] = (seen, texts, uncut(job))
            self.widths.set(job_id, texts, self.written[job_id][2])
            wrote = True
        table.append_rows(added)  # (in one pass)
        table.set_cells(changes)
        if wrote:
            self._fit()
        if moved:  # (rows that are all as they were, sorted as they were, are in order)
            self.ordered_by = order_by
            order = sorted(shown, key=self._order_key, reverse=self.sort_reverse)
            if [int(row.key.value) for row in table.ordered_rows] != order:
                table.sort("id", key=self._key_of, reverse=self.sort_reverse)
        if current is not None and str(current) in table.rows and table.get_row_index(str(current)) != table.cursor_row:
            table.move_cursor(row=table.get_row_index(str(current)), animate=False)
        self.refreshed_at = time.monotonic()
        facet = FACETS[self.facet] or "all"
        filt = f"  filter: {self.filter_text!r}" if self.filter_text else ""
        sel = f"  selected: {', '.join(map(str, sorted(self.selected)))}" if self.selected else ""
        arrow = "↓" if self.sort_reverse else "↑"
        newest = min(len(jobs), MAX_JOBS if self.sort_column == "id" else SORTED_MAX_JOBS)
        live = " and every live job" if len(jobs) > newest else ""
        of = f"{len(jobs)}" if not self.more else f"{self.total} (the newest {newest}{live} read: / and f search all)"
        line = f"{len(shown)} of {of} jobs  status: {facet}  sort: {self.sort_column}{arrow}{filt}{sel}"
        if line != self.state_line:
            self.state_line = line
            self.query_one("#jobs-state", Static).update(line)

    def _order_key(self, job_id: int) -> Any:
        job = self.jobs.get(job_id)
        value = SORT_VALUES[self.sort_column](job) if job else None
        # empty values last in both directions: the sort reverses the whole key, so the flag flips with it
        return ((value is None) != self.sort_reverse, value if value is not None else 0, job_id)

    def _key_of(self, id_cell: Any) -> Any:
        return self._order_key(id_of(id_cell))

    def _cursor_job(self) -> int | None:
        table = self.query_one("#jobs", DataTable)
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return int(row_key.value)

    def _resort(self) -> None:
        self.apply(list(self.jobs.values()))

    # -- actions -------------------------------------------------------------------------------
    def action_open(self) -> None:
        # enter in the filter keeps it (a priority binding sees it). The focus as it is now, not the box's has_focus,
        # which follows only once its blur is handled: enter right after esc opened nothing.
        if self.app.focused is self.query_one("#filter", Input):
            self.set_focus(self.query_one("#jobs", DataTable))
            return
        job_id = self._cursor_job()
        if job_id is not None:
            self.app.push_screen(JobScreen(job_id))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        column = str(event.column_key.value)
        self.sort_reverse = not self.sort_reverse if column == self.sort_column else column in ("id", "progress")
        self.sort_column = column
        self._resort()
        self.refresh_jobs()  # (sorted by another column than id, every job is read: the order is over them all)

    def action_sort(self) -> None:
        keys = [k for k, _ in self.columns]
        self.sort_column = keys[(keys.index(self.sort_column) + 1) % len(keys)]
        self.sort_reverse = self.sort_column in ("id", "progress", "acc", "elapsed", "time")
        self._resort()
        self.refresh_jobs()  # (sorted by another column than id, every job is read: the order is over them all)

    def show_status(self, status: str | None) -> None:
        """Show the jobs of one status (None: all)."""
        self.facet = FACETS.index(status)
        self._resort()  # at once, among the jobs read: never an older facet's rows under the new label
        self.refresh_jobs()

    def action_facet(self) -> None:
        self.facet = (self.facet + 1) % len(FACETS)
        self._resort()  # at once, among the jobs read: never an older facet's rows under the new label
        self.refresh_jobs()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self._resort()  # at once, among the jobs read
        # and the API's answer, which reaches older ones, once the typing pauses (a read a key made every key
        # wait for the last one's answer to be applied: 1.4 s for a word at 2,000 jobs, issue 64)
        if self.typed_at is not None:
            self.typed_at.stop()
        self.typed_at = self.set_timer(FILTER_PAUSE_S, self.refresh_jobs)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#jobs", DataTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.display = False
        self.set_focus(self.query_one("#jobs", DataTable))  # (now, not as widget.focus() does, after what is queued)

    def action_move(self, rows: int) -> None:
        table = self.query_one("#jobs", DataTable)
        table.move_cursor(row=max(0, min(table.row_count - 1, table.cursor_row + rows)))

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._resort()

    def _chosen(self, statuses: tuple[str, ...] | None = None) -> list[int]:
        """The selected jobs (or the one under the cursor), those of `statuses` only when given."""
        current = self._cursor_job()
        ids = sorted(self.selected) or ([current] if current is not None else [])
        return ids if statuses is None else [i for i in ids if self.jobs.get(i, {}).get("status") in statuses]

    def _confirm_then(self, question: str, call, said) -> None:  # noqa: ANN001
        """Ask once; on yes run `call(client)` off the UI thread, then `said(result)`, and refresh the table."""

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.app.call_api(call, lambda result: (said(result), self.refresh_jobs()))

        self.app.push_screen(Confirm(question), confirmed)

    def _not_mine(self, ids: list[int]) -> list[int]:
        """Of `ids`, the jobs another user owns, where the token is a plain user's (the API would refuse them)."""
        me = self.app.me or {}
        if me.get("role") != "user" or not me.get("name"):
            return []
        return [i for i in ids if (self.jobs.get(i) or {}).get("owner") not in (None, me["name"])]

    def action_cancel(self) -> None:
        """Cancel the selected jobs that can be (or the current one), after one confirmation that lists them; another
        user's job is refused first, not after the question (issue 67 #7)."""
        active = self._chosen(UNENDED)
        if not active:
            self.notify("nothing to cancel: no queued or running job selected", severity="warning")
            return
        theirs = self._not_mine(active)
        if theirs:
            owners = sorted({str(self.jobs[i].get("owner")) for i in theirs})
            self.notify(f"{id_list(theirs)}: {', '.join(owners)}'s, not yours to cancel", severity="error")
            active = [i for i in active if i not in theirs]
            if not active:
                return
        chosen = set(self._chosen())

        def said(done: list[dict]) -> None:
            ids = [d["id"] for d in done]
            # (what was canceled, and what the choice held that had ended: no ✓ left on rows done with)
            self.selected -= set(ids) | {i for i in chosen if (self.jobs.get(i) or {}).get("status") in ENDED}
            if ids:
                self.notify(f"canceling job{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}")

        question = f"Cancel {id_list(active)}?"
        self._confirm_then(question, lambda client: self._each(active, client.cancel), said)

    def action_priority(self, step: int) -> None:
        """The selected queued jobs (or the current one) one priority up (step -1) or down (+1)."""
        queued = self._chosen(("queued",))
        if not queued:
            self.notify("only a queued job's priority can change", severity="warning")
            return
        levels = ("high", "normal", "low")

        def shifted(job: dict) -> str:  # from the job as the API has it now, not as the table last showed it
            now = levels.index(job["spec"].get("priority", "normal"))
            return levels[min(len(levels) - 1, max(0, now + step))]

        def said(done: list[dict]) -> None:
            for d in done:
                self.jobs[d["id"]] = d
            if done:
                self.notify(", ".join(f"job {d['id']}: {d['spec']['priority']}" for d in done))

        call = lambda client: self._each(queued, lambda i: client.set_priority(i, shifted(client.job(i))))  # noqa: E731
        self.app.call_api(call, lambda done: (said(done), self.refresh_jobs()))

    def action_top(self) -> None:
        """The selected queued jobs (or the current one) first of their lines."""
        queued = self._chosen(("queued",))
        if not queued:
            self.notify("only a queued job can move in line", severity="warning")
            return

        def said(done: list[dict]) -> None:
            if done:
                self.notify(", ".join(f"job {d['id']}: #{d.get('queue_position') or '?'} in line" for d in done))

        call = lambda client: self._each(list(reversed(queued)), lambda i: client.move(i, top=True))  # noqa: E731
        self.app.call_api(call, lambda done: (said(done), self.refresh_jobs()))

    def action_delete(self) -> None:
        """Delete the selected ended jobs (or the current one) for good, after one confirmation that lists them."""
        ended = self._chosen(ENDED)
        if not ended:
            self.notify("nothing to delete: only ended jobs can be deleted (cancel first)", severity="warning")
            return

        def said(done: list[dict]) -> None:
            self.selected -= {d["id"] for d in done}
            freed = human(sum(d["bytes_freed"] for d in done))
            if done:
                ids = ", ".join(str(d["id"]) for d in done)
                self.notify(f"deleted job{'s' if len(done) > 1 else ''} {ids} ({freed})")

        question = f"Delete {id_list(ended)} for good (record, log, metrics, job dir)?"
        self._confirm_then(question, lambda client: self._each(ended, client.delete), said)

    def _each(self, ids: list[int], act) -> list[dict]:  # noqa: ANN001
        """`act(id)` for each job (off the UI thread); a job the API refuses (another user's: 403, gone: 404,
        ended meanwhile: 409) does not stop the others, and is named in one notification with the API's why."""
        done, refused = [], []
        for job_id in ids:
            try:
                done.append(act(job_id))
            except ApiError as exc:
                if exc.status not in (403, 404, 409):
                    raise
                refused.append(f"job {job_id}: {exc.message}")
        if refused:
            self.app.call_from_thread(self.notify, "\n".join(refused), title="Refused", severity="error")
        return done

    def action_select_all(self) -> None:
        self.selected |= {j for j, job in self.jobs.items() if self.visible(job)}
        self._resort()

    def action_select_none(self) -> None:
        self.selected.clear()
        self._resort()

    def action_select(self) -> None:
        job_id = self._cursor_job()
        if job_id is not None:
            self.selected ^= {job_id}
            self._resort()

    def action_sweep(self) -> None:
        job_id = self._cursor_job()
        if job_id is None:
            return
        sweep = sweep_of(self.jobs.get(job_id) or {})
        if sweep is None:
            self.notify(f"job {job_id} is not part of a sweep", severity="warning")
        else:
            self.app.push_screen(SweepScreen(sweep))

    def action_compare(self) -> None:
        """The selected jobs side by side (two or more)."""
        ids = sorted(self.selected)
        if len(ids) < 2:
            self.notify("select two jobs or more (space), then C compares them", severity="warning")
        else:
            self.app.push_screen(CompareScreen(ids))  # (over the API's limit: its 400 says so there)

    def action_tensorboard(self) -> None:
        ids = self._chosen()
        if ids:
            open_tensorboard(self.app, ids)
