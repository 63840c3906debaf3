"""The jobs table widget on its own (no API): what it draws after rows arrive and cells change."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult

from tui.screens.jobs import JobsTable


class TableApp(App):
    CSS = "JobsTable { height: 1fr; }"  # as on the jobs screen: a new row does not resize it (a resize repaints)

    def compose(self) -> ComposeResult:
        table = JobsTable(id="jobs")
        table.add_column("ID", key="id")
        table.add_column("NAME", key="name")
        table.add_column("STATUS", key="status")
        yield table


def test_a_row_drawn_before_its_widths_were_measured_is_drawn_again_at_the_new_widths():
    """DataTable measures column widths of new rows when the app is next idle; a line drawn before that (at the
    labels' widths) must not stay cached: the name showed cut (`wide`) until a cell of its row changed."""

    async def scenario() -> tuple[str, str]:
        app = TableApp()
        async with app.run_test(size=(60, 10)) as pilot:
            table = app.query_one(JobsTable)
            await pilot.pause()
            table.add_row("2", "wider lr sweep", "queued", key="2")
            before = table.render_line(1).text  # drawn now, before the app is idle
            await pilot.pause()
            after = table.render_line(1).text
            table.set_cells({"2": {"status": "running"}})
            await pilot.pause()
            return before, after, table.render_line(1).text

    before, after, changed = asyncio.run(scenario())
    assert "wider lr sweep" not in before  # (what the old widths make of it: the test draws that case)
    assert "wider lr sweep  queued" in after
    assert "wider lr sweep  running" in changed
