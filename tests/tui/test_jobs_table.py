"""The jobs table widget on its own (no API): what it draws after rows arrive and cells change."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
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


def _jobs(owner: str | None) -> list[dict]:
    from datetime import datetime, timedelta, timezone

    later = (datetime.now(timezone.utc) + timedelta(seconds=250)).isoformat()
    spec = {"model": "resnet20", "gpus": 1, "priority": "normal"}
    return [
        {"id": 1234, "owner": owner, "name": "lrsweep lr=0.1 model=lenet batch=128", "status": "running",
         "spec": spec, "progress": {"fraction": 0.5, "step": 50, "total_steps": 100},
         "metrics": {"loss": 0.0001234, "accuracy": 0.875}, "elapsed_s": 3723, "eta_s": 3723, "gpu_ids": ["0", "1"],
         "disk_bytes": 123456789},
        {"id": 1235, "owner": owner, "name": "wider lr sweep baseline", "status": "queued", "queue_position": 12,
         "expected_start": later, "spec": {**spec, "priority": "high", "gpus": 2}},
        {"id": 1236, "owner": owner, "name": "x", "status": "failed", "reason": "dependency_failed",
         "result": {"test_accuracy": 0.9123}, "metrics": {"loss": 12.5}, "elapsed_s": 59,
         "spec": {**spec, "priority": "low", "command": ["python", "train.py"], "model": None}},
        {"id": 1237, "owner": owner, "name": "s", "status": "succeeded", "warning": "w", "elapsed_s": 100000,
         "result": {"test_accuracy": 0.9123}, "spec": spec, "disk_bytes": 10**12},
    ]  # fmt: skip


@pytest.mark.parametrize("width", [80, 100, 110, 120, 150, 200])
@pytest.mark.parametrize("owner", [None, "bartholomew"])
def test_the_jobs_table_fits_the_terminal_and_cuts_only_names(width, owner):
    """Issue 42 (should-fix): at 80 columns running rows read a bare `eta`, at 120 the columns stopped at `ELA`.
    At every width every column shown fits, no cell but a name, owner or model is ever cut, the names keep 16
    cells in the wide set (columns give way first: disk, elapsed, GPU, model), and what matters is always there:
    the id with its priority mark or the PRI column, status, progress or place in line, the time or ETA."""
    from tui.screens.jobs import JobsScreen

    class Quiet(JobsScreen):
        def refresh_jobs(self) -> None:  # (no API: the test gives the answer)
            pass

    async def scenario() -> tuple[int, int, list[str], list[str]]:
        app = App()
        async with app.run_test(size=(width, 24)) as pilot:
            screen = Quiet()
            await app.push_screen(screen)
            await pilot.pause()
            screen.apply(_jobs(owner))
            await pilot.pause(0.3)
            table = screen.query_one("#jobs", JobsTable)
            lines = [table.render_line(y).text for y in range(5)]
            return table.virtual_size.width, table.size.width, [k for k, _ in screen.columns], lines

    virtual, shown, columns, lines = asyncio.run(scenario())
    assert virtual <= shown, (virtual, shown, lines)
    header, *rows = lines
    by_id = {int(r.split()[0].rstrip("↑↓")): r for r in rows}
    compact = width < 110
    eta = "eta 1h02m" if compact else "1h02m"
    assert "running" in by_id[1234] and "50%" in by_id[1234] and eta in by_id[1234], lines
    assert "#12 ~4m" in by_id[1235], lines
    assert ("✗ after" if compact else "failed·after") in by_id[1236], lines
    if compact:
        assert by_id[1235].split()[0] == "1235↑" and by_id[1236].split()[0] == "1236↓", lines
    else:
        assert "PRI" in header and " high " in by_id[1235] and " low " in by_id[1236], lines
        assert "wider lr sweep baseline" in by_id[1235] or "wider lr sweep b" in by_id[1235], lines
    if width >= 160 or (width >= 150 and owner is None):
        assert "931.3 GiB" in by_id[1237], lines
    assert ("owner" in columns) == (owner is not None)


def test_the_gpus_screen_opens_the_job_that_holds_the_gpu_under_its_cursor():
    """Issue 42 (should-fix): the GPUs screen was static; ↓/j moves a cursor over the GPUs (the row reversed) and
    enter opens the job that holds it, as nvitop and k9s do; a GPU nobody's job holds says so."""
    from tui.screens.gpus import GpusScreen

    gpu = {"name": "NVIDIA H100 80GB HBM3", "utilization": 5, "memory_used_mib": 1, "memory_total_mib": 81559}
    state = {
        "hosts": [
            {"host": "box", "gpus": [
                {**gpu, "index": 0, "uuid": "GPU-a", "held_by": None},
                {**gpu, "index": 1, "uuid": "GPU-b", "held_by": {"job_id": 42, "owner": "alice"}},
            ]},
        ],
        "workers": [],
        "running": {},
        "line": {"queued": 0, "waiting_for_dependencies": 0, "jobs": []},
    }  # fmt: skip
    opened: list[int] = []

    class Box(App):
        def open_job(self, job_id: int) -> None:
            opened.append(job_id)

    class Quiet(GpusScreen):
        def poll(self) -> None:  # (no API: the test gives the answer)
            pass

    async def scenario() -> list[str]:
        app = Box()
        async with app.run_test(size=(120, 30)) as pilot:
            screen = Quiet()
            await app.push_screen(screen)
            screen.apply(state)
            await pilot.press("enter")  # GPU 0: nobody's job
            await pilot.pause()
            told = [n.message for n in app._notifications]
            await pilot.press("j", "enter")
            await pilot.pause()
            await pilot.press("down", "down", "up", "up", "up", "enter")  # (it stays within the GPUs)
            await pilot.pause()
            return told

    told = asyncio.run(scenario())
    assert told == ["GPU 0: no gpudeck job holds it"], told
    assert opened == [42], opened


def test_resizing_and_cycling_facets_leave_every_column_of_a_running_job_whole():
    """Issue 64 #1: after 80→150→80 (or a facet cycled once with many jobs) LOSS, ACC and TIME/ETA sat behind a
    horizontal scroll bar: columns only grew, and the resize fitted to the old width. At 80 columns again the
    table is no wider than the terminal and the running job's row reads whole; a facet that drops most rows and
    the way back to all leave every row in its place (rows removed and added in one pass)."""
    from tui.screens.jobs import FACETS, JobsScreen

    class Quiet(JobsScreen):
        def refresh_jobs(self) -> None:  # (no API: the test gives the answer)
            pass

    many = [
        {"id": n, "name": f"lr sweep trial {n} with a long name", "status": "succeeded", "elapsed_s": 100,
         "result": {"test_accuracy": 0.5}, "spec": {"model": "lenet", "gpus": 1, "priority": "normal"}}
        for n in range(1, 400)
    ]  # fmt: skip
    jobs = _jobs(None) + many

    async def scenario() -> list[tuple[int, int, str, int]]:
        app = App()
        seen = []
        async with app.run_test(size=(80, 24)) as pilot:
            screen = Quiet()
            await app.push_screen(screen)
            await pilot.pause()
            screen.apply(jobs)
            table = screen.query_one("#jobs", JobsTable)

            async def look() -> None:
                await pilot.pause(0.3)
                row = next(table.render_line(y).text for y in range(1, 8) if table.render_line(y).text.strip()
                           .startswith("1234"))  # fmt: skip
                seen.append((table.virtual_size.width, table.size.width, row, table.row_count))

            await look()
            for width in (150, 80):
                await pilot.resize_terminal(width, 24)
                await look()
            for _ in FACETS:  # once round: all, running, …, and all again
                screen.action_facet()
            await look()
        return seen

    seen = asyncio.run(scenario())
    for virtual, shown, row, rows in seen:
        assert virtual <= shown, seen
        # (its ETA whole: 1h02m, or a minute less when the test ran long on a loaded machine)
        assert "running" in row and "50%" in row and re.search(r"(eta )?1h0[0-2]m", row), seen
        assert rows == len(jobs), seen
    assert len(seen) == 4 and seen[2][1] == seen[0][1] == seen[3][1], seen  # (80, 150, 80, then the facets at 80)


def test_the_keys_help_uses_the_terminal_and_end_reaches_the_last_keys():
    """Issue 64 #4: `?` scrolled inside 12 lines even at 120×40 (the newer keys below the fold) and End did
    nothing. At 120×40 it shows most of the list; End shows its last line, Home its first."""
    from textual.containers import VerticalScroll

    from tui.app import JOBS_KEYS
    from tui.screens.dialogs import KeysHelp

    class Styled(App):
        CSS_PATH = str(Path(__file__).resolve().parents[2] / "tui" / "app.tcss")  # (the TUI's own styles)

    async def scenario() -> tuple[int, int, float, float, float]:
        app = Styled()
        async with app.run_test(size=(120, 40)) as pilot:
            await app.push_screen(KeysHelp("jobs", JOBS_KEYS))
            await pilot.pause()
            box = app.screen.query_one("#keys-help VerticalScroll", VerticalScroll)
            height, total = box.size.height, box.virtual_size.height
            await pilot.press("end")
            await pilot.pause()
            at_end, most = box.scroll_y, box.max_scroll_y
            await pilot.press("home")
            await pilot.pause()
            return height, total, at_end, most, box.scroll_y

    height, total, at_end, most, at_home = asyncio.run(scenario())
    assert total > 24 and height >= 24, (height, total)  # (the list is longer than 24 lines: it must scroll)
    assert most == 0 or (at_end == most and at_home == 0), (at_end, most, at_home)


def test_an_idle_worker_of_a_gpu_held_whole_says_so():
    """Issue 64 #3: the other slots of a GPU a job holds whole read plain `idle`; they take nothing until it ends."""
    from tui.screens.gpus import GpusScreen

    gpu = {"name": "NVIDIA H100 80GB HBM3", "utilization": 90, "memory_used_mib": 1, "memory_total_mib": 81559}
    whole = {"job_id": 7, "owner": "alice", "kind": "job", "gpu_memory": None, "part": 1.0}
    workers = [
        {"name": f"box.gpu0-{k}", "host": "box", "gpus": ["0"], "alive": True, "draining": False,
         "state": "busy" if k == 0 else "idle", "job_id": 7 if k == 0 else None}
        for k in range(3)
    ] + [{"name": "box.gpu1-0", "host": "box", "gpus": ["1"], "alive": True, "draining": False, "state": "idle",
          "job_id": None}]  # fmt: skip
    table = GpusScreen._workers(
        workers,
        {},
        True,
        [{"host": "box", "gpus": [{**gpu, "index": 0, "holders": [whole]}, {**gpu, "index": 1, "holders": []}]}],
    )
    states = [str(cell) for cell in table.columns[2].cells]
    assert states == ["busy", "held: job 7", "held: job 7", "idle"], states
