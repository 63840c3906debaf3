"""Snapshots of the TUI at 80x24 and 120x40 (SVG files in tests/tui/__snapshots__), against a real API process on
a fresh Redis: two jobs that stay queued (they ask for 2 GPUs and no worker runs), so every cell is stable.
(The submit form is not snapshotted: the table behind a modal repaints on its own clock, so its picture
depended on timing.)
After an intended change of the look: pytest tests/tui/test_snapshots.py --snapshot-update, and review the SVGs."""

from __future__ import annotations

import pytest
import requests

from tests.support.live import start_api
from tui.app import GpudeckApp

pytestmark = pytest.mark.slow


@pytest.fixture
def queued_api(spawn, child_env) -> str:
    url = start_api(spawn, child_env)
    for name in ("baseline", "wider lr sweep"):
        spec = {"model": "resnet20", "dataset": "synthetic", "name": name, "gpus": 2, "tags": ["paper"]}
        requests.post(f"{url}/api/v1/jobs", json=spec, timeout=10).raise_for_status()
    return url


class SnapshotApp(GpudeckApp):
    """The app with a fixed subtitle (the API URL has a random port in tests)."""

    def on_mount(self) -> None:
        super().on_mount()
        self.sub_title = "http://127.0.0.1:8686"


async def _loaded(pilot) -> None:
    from textual.widgets import DataTable

    table = pilot.app.screen.query_one("#jobs", DataTable)
    # Both rows in, and the columns sized to them (widths are measured after the rows land).
    while table.row_count < 2 or table.columns["name"].content_width < max(
        len(str(table.get_cell_at((row, 1)))) for row in range(table.row_count)
    ):
        await pilot.pause(0.1)
    while not table.has_focus:  # the footer shows the focused widget's keys with the screen's
        await pilot.pause(0.1)
    await pilot.pause(0.5)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_jobs_screen(snap_compare, queued_api, size):
    assert snap_compare(SnapshotApp(queued_api), terminal_size=size, run_before=_loaded)
