"""The jobs table: its columns (wide and compact sets) and what each sorts a job by, how they fit the terminal's
width (fit_columns: names shrink, then columns give way, no other cell is cut), and the DataTable that repaints only
the rows it changes. tui.screens.jobs fills it."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.widgets import DataTable
from textual.widgets.data_table import CellKey, ColumnKey, Row, RowKey

from models.states import PRIORITIES
from tui.widgets.fmt import PRIORITY_MARK, accuracy, what, who

COLUMNS = [
    ("id", "ID"),
    ("name", "NAME"),
    ("model", "MODEL"),
    ("status", "STATUS"),
    ("priority", "PRI"),
    ("progress", "PROGRESS"),
    ("loss", "LOSS"),
    ("acc", "ACC"),
    ("gpu", "GPU"),
    ("elapsed", "ELAPSED"),
    ("eta", "ETA"),
    ("disk", "DISK"),
]
COMPACT = [
    ("id", "ID"),
    ("name", "NAME"),
    ("status", "STATUS"),
    ("progress", "PROGRESS"),
    ("loss", "LOSS"),
    ("acc", "ACC"),
    ("time", "TIME/ETA"),
]
"""The columns below WIDE_COLUMNS terminal columns: every one that matters in 80 (MODEL and GPU are in the job's
own screen), with elapsed and ETA in one cell, and a priority other than normal as a mark beside the id (↑ high,
↓ low)."""
WIDE_COLUMNS = 110
FLEX = {"name": (6, 40), "owner": (5, 12), "model": (8, 16)}
"""The columns that shrink to fit the terminal (their cells cut to the width given), the least and most each
takes (the room left: FILL)."""
FILL = (("name", 24), ("owner", 12), ("model", 16), ("name", 40))
"""Who gets the room left over their least, in turns, up to how wide."""
FLEX_WIDE = {**FLEX, "name": (16, 40)}
"""The same in the wide set, where a name keeps 16 cells and columns give way before it shrinks further."""
GIVE_WAY = ("disk", "elapsed", "gpu", "model")
"""The wide set's columns left out, in this order, where even the shrunk names leave them no room."""


def natural(text: str) -> tuple:
    """A sort key that reads numbers in a name as numbers: bulk99 before bulk989, bulk989 before bulk990."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part.lower()) for part in re.split(r"(\d+)", text) if part
    )


SORT_VALUES = {
    "id": lambda job: job["id"],
    "name": lambda job: natural(str(job.get("name") or "")) or None,
    "model": lambda job: what(job["spec"]),
    "status": lambda job: job["status"],
    "priority": lambda job: PRIORITIES.index((job.get("spec") or {}).get("priority") or "normal"),
    "progress": lambda job: (job.get("progress") or {}).get("fraction"),
    "loss": lambda job: (job.get("metrics") or {}).get("loss"),
    "acc": lambda job: accuracy(job)[0],
    "gpu": lambda job: ",".join(job.get("gpu_ids") or []) or None,
    "owner": lambda job: who(job),
    "elapsed": lambda job: job.get("elapsed_s"),
    "disk": lambda job: job.get("disk_bytes"),
    "eta": lambda job: job.get("eta_s") if job["status"] == "running" else None,
    "time": lambda job: job.get("elapsed_s"),
}
"""What each column sorts a job by; None where the job has none (those sort last either way)."""


def fit_columns(
    columns: list[tuple[str, str]], natural: dict[str, int], width: int, flex: dict[str, tuple[int, int]] = FLEX
) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The columns that fit `width` cells and the width of each FLEX one, from each column's widest cell
    (`natural`; a FLEX column's uncut): every other column keeps its whole width (a cell is never cut), the FLEX
    ones shrink (no further than their least), and where that is not enough, GIVE_WAY's columns are left out."""
    cols = list(columns)

    def wants(key: str, label: str) -> int:
        return max(natural.get(key, 0), len(label))

    while True:
        fixed = sum(wants(k, label) for k, label in cols if k not in flex) + 2 * len(cols)  # (cell padding)
        least = sum(min(flex[k][0], wants(k, label)) for k, label in cols if k in flex)
        dropping = [k for k in GIVE_WAY if k in {c[0] for c in cols}]
        if fixed + least <= width or not dropping:
            break
        cols = [c for c in cols if c[0] != dropping[0]]
    caps = {k: min(flex[k][0], wants(k, label)) for k, label in cols if k in flex}
    room = width - fixed - sum(caps.values())
    for key, most in FILL:  # the room left, in turns
        if key in caps and room > 0:
            label = next(label for k, label in cols if k == key)
            more = max(0, min(room, min(most, flex[key][1], wants(key, label)) - caps[key]))
            caps[key] += more
            room -= more
    return cols, caps


class Widths:
    """Each column's widest cell over the rows written, kept as rows are written and removed: a row's widths
    counted in, its old ones out. At rest the jobs screen writes a few running rows every refresh, and measured
    every cell of every row for it (2,000 rows: 15,000 cell_len calls a refresh, 60 % of its idle CPU, issue 64)."""

    def __init__(self) -> None:
        self.rows: dict[Any, dict[str, int]] = {}
        self.counts: dict[str, Counter[int]] = {}

    def set(self, row: Any, texts: dict[str, str], uncut: dict[str, int]) -> None:
        """Row `row` holds these cell texts (and these FLEX cells' uncut widths)."""
        widths = {key: cell_len(text) for key, text in texts.items()}
        for key, width in uncut.items():
            widths[key] = max(widths.get(key, 0), width)
        self.drop(row)
        self.rows[row] = widths
        for key, width in widths.items():
            self.counts.setdefault(key, Counter())[width] += 1

    def drop(self, row: Any) -> None:
        for key, width in self.rows.pop(row, {}).items():
            counts = self.counts[key]
            counts[width] -= 1
            if not counts[width]:
                del counts[width]

    def clear(self) -> None:
        self.rows.clear()
        self.counts.clear()

    def natural(self) -> dict[str, int]:
        """Each column's widest cell (fit_columns' `natural`)."""
        return {key: max(counts) for key, counts in self.counts.items() if counts}


def id_of(id_cell: Any) -> int:
    """The job id in an ID cell (`✓ 12↑`: selected, and its priority mark)."""
    return int(str(id_cell).removeprefix("✓ ").rstrip("".join(PRIORITY_MARK.values())))


class JobsTable(DataTable):
    """The jobs table. `set_cells` repaints only the rows it changes: DataTable.update_cell repaints the whole
    table (over SSH, every visible row sent again each time a running job's elapsed time ticks), and each call
    invalidates its row caches (finding a row's place again costs a pass over every row). Home and End (and G, as
    in less and the job screen) go to the first and last job, not to the first and last column."""

    BINDINGS = [
        Binding("home", "scroll_top", "First", show=False),
        Binding("end,G", "scroll_bottom", "Last", show=False),
    ]

    def _update_dimensions(self, new_rows) -> None:  # noqa: ANN001 - DataTable's
        """The columns' widths for new rows, and the table's size. Every cell here is one line of text, so its
        width is its text's (cell_len), not what Rich measures rendering it: DataTable renders each new row's
        cells to measure them (1,300 rows that a facet brought back took 0.7 s, issue 64). Column widths are
        measured when the app is next idle, after new rows may have been drawn at the old widths; DataTable neither
        repaints (unless its size changes) nor moves its `_update_count`, which keys its line caches, so a row
        drawn before could stay cut (`wide` for `wider lr sw…`) until a cell of it changed: those lines are
        dropped and the table repainted once the widths are measured."""
        columns = list(self.columns.values())
        for row_key in new_rows:
            cells = self._data.get(row_key)
            if cells is None:  # (removed before the app was idle)
                continue
            for column in columns:
                value = cells.get(column.key)
                width = value.cell_len if isinstance(value, Text) else cell_len(str(value)) if value is not None else 0
                if width > column.content_width:
                    column.content_width = width
        header = self.header_height if self.show_header else 0
        width = sum(column.get_render_width(self) for column in columns) + self._row_label_column_width
        self.virtual_size = Size(width, self._total_row_height + header)
        self._update_count += 1
        self.refresh()

    def _get_row_region(self, row_index: int) -> Region:
        """The region of the row at this index. Every row of the jobs table is one line (append_rows), so its y is
        its index: DataTable sums the heights of every row above it, for each row it repaints (150,000 additions a
        refresh at rest with 2,000 jobs, issue 64)."""
        row_key = self._row_locations.get_key(row_index) if self.is_valid_row_index(row_index) else None
        if row_key is None or self.rows[row_key].height != 1:
            return super()._get_row_region(row_index)
        row_width = sum(column.get_render_width(self) for column in self.columns.values())
        y = row_index + (self.header_height if self.show_header else 0)
        return Region(0, y, max(self.size.width, row_width + self._row_label_column_width), 1)

    def fit_widths(self) -> None:
        """Every column as wide as its widest cell now, no wider (widths only grow as cells are written: a column
        a cell once widened stayed so after the terminal narrowed, its last columns behind a scroll bar)."""
        for column in self.columns.values():
            column.content_width = cell_len(str(column.label))
        self._update_dimensions(list(self.rows))

    def append_rows(self, rows: list[tuple[str, list[Any]]]) -> None:
        """Add these rows (key, cells in column order) at the end, in one pass (issue 64): DataTable.add_row clamps
        the cursor, reorders the columns and counts an update for each row (2,000 rows a facet brought back took
        half a second). Each row one line high, unlabelled, as add_row's defaults make it."""
        if not rows:
            return
        columns, first = self.ordered_columns, self.row_count
        for n, (key, cells) in enumerate(rows):
            row_key = RowKey(key)
            self._row_locations[row_key] = first + n
            self._data[row_key] = {column.key: cell for column, cell in zip(columns, cells)}
            self.rows[row_key] = Row(row_key, 1, None, False)
            self._new_rows.add(row_key)
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        if first == 0 and columns and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()  # (a cursor that had no row to be on has one now)
        self._update_count += 1
        self.check_idle()

    def remove_rows(self, keys: Iterable[str]) -> None:
        """Remove these rows in one pass (issue 64): DataTable.remove_row renumbers every row after the one it
        removes, so a facet that dropped 1,990 of 2,000 rows took seconds, the terminal frozen."""
        gone = {RowKey(k) for k in keys} & set(self.rows)
        if not gone:
            return
        kept = sorted((i, k) for k in self._row_locations if k not in gone for i in (self._row_locations.get(k),))
        self._row_locations = TwoWayDict({k: n for n, (_, k) in enumerate(kept)})
        for row_key in gone:
            for column_key in self._data.get(row_key, ()):
                self._updated_cells.discard(CellKey(row_key, column_key))
            del self.rows[row_key]
            del self._data[row_key]
        self._require_update_dimensions = True
        self.check_idle()
        self.cursor_coordinate = self.cursor_coordinate  # (clamped to the rows left)
        self.hover_coordinate = self.hover_coordinate
        self._update_count += 1
        self.refresh(layout=True)

    def set_cells(self, changes: dict[str, dict[str, Any]]) -> None:
        """Write `{row key: {column key: value}}` and repaint those rows (all of them, once measured, when a
        value is wider than its column: `running` in a column sized for `queued` showed `runnin`)."""
        if not changes:
            return
        widened = False
        for row_key, cells in changes.items():  # what update_cell does, less its refresh() of everything
            for column_key, value in cells.items():
                self._data[RowKey(row_key)][ColumnKey(column_key)] = value
                column = self.columns[ColumnKey(column_key)]
                width = value.cell_len if isinstance(value, Text) else cell_len(str(value))
                if width > column.content_width:  # (columns only grow: a narrower value leaves them be)
                    column.content_width, widened = width, True
        self._update_count += 1  # once: the render caches are keyed by it
        if widened:
            self._require_update_dimensions = True  # measured on idle, then all repainted (_update_dimensions)
            self.check_idle()
            return
        for row_key in changes:
            self.refresh_row(self.get_row_index(row_key))
