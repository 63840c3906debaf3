"""Snapshots of the TUI at 80x24 and 120x40 (SVG files in tests/tui/__snapshots__), against a real API process on
a Redis database of its own (one API for all the tests of a fixture: they only read): jobs that stay queued (they
ask for 2 GPUs and no worker runs), and jobs whose run is written into Redis as a worker writes it (log lines,
metric points, the end) with fixed times, so every cell is stable:
the jobs table, a failed job's log, curves and result, the GPUs and workers of a box with none, and a sweep.
(The submit form is not snapshotted: the table behind a modal repaints on its own clock, so its picture
depended on timing.)
After an intended change of the look: pytest tests/tui/test_snapshots.py --snapshot-update, and review the SVGs."""

from __future__ import annotations

import pytest
import requests

from tests.support.live import start_api
from tests.support.runs import ran
from tui.app import GpudeckApp

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("snapshots")]  # (one process starts each shared API)


@pytest.fixture(scope="module")
def queued_api(module_stacks) -> str:
    stack = module_stacks()
    url = start_api(stack.spawn, stack.env)
    for name in ("baseline", "wider lr sweep"):
        spec = {"model": "resnet20", "dataset": "synthetic", "name": name, "gpus": 2, "tags": ["paper"]}
        requests.post(f"{url}/api/v1/jobs", json=spec, timeout=10).raise_for_status()
    return url


LOG = [
    "2026-11-23 10:00:00.000000: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.",
    "2026-11-23 10:00:00.100000: I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "gpudeck: model resnet20 on synthetic (32x32x3, 10 classes), 400 steps, batch 32, lr 0.1",
    *(f"train step {s} loss {2.3 / (1 + s / 40):.4f} accuracy {min(0.9, s / 400):.4f}" for s in range(10, 310, 10)),
    "Traceback (most recent call last):",
    '  File "/srv/gpudeck/models/train.py", line 88, in main',
    "    batch = next(data)",
    '  File "/srv/gpudeck/models/pipeline.py", line 41, in load',
    "    raise FileNotFoundError(path)",
    "FileNotFoundError: /data/cifar-10-batches-bin/data_batch_3.bin",
]


@pytest.fixture(scope="module")
def ran_api(module_stacks) -> dict:
    """A failed job with its log and curves, and a sweep of three runs (two ended, one queued)."""
    stack = module_stacks()
    redis = stack.redis
    url = start_api(stack.spawn, stack.env)
    post = lambda spec: requests.post(f"{url}/api/v1/jobs", json=spec, timeout=10).json()["id"]  # noqa: E731
    failed = post({"model": "resnet20", "dataset": "synthetic", "name": "data on a dead disk", "gpus": 2})
    train = [{"step": s, "loss": 2.3 / (1 + s / 40), "accuracy": min(0.9, s / 400)} for s in range(10, 310, 10)]
    val = [{"step": s, "val_loss": 2.4 / (1 + s / 50), "val_accuracy": min(0.85, s / 420)} for s in (100, 200, 300)]
    end = {"status": "failed", "reason": "exit_nonzero", "message": "the trainer exited with status 1"}
    ran(redis, failed, train + val, LOG, {**end, "log_tail": LOG[-8:]})
    grid = {"params.lr": [0.1, 0.05, 0.01]}
    base = {"model": "lenet", "dataset": "synthetic", "gpus": 2, "name": "lenet lr"}
    sweep = requests.post(f"{url}/api/v1/sweeps", json={"base": base, "grid": grid}, timeout=10).json()
    for job_id, lr, accuracy in zip(sweep["job_ids"], (0.1, 0.05), (0.71, 0.83)):
        points = [{"step": s, "val_loss": lr * 20 / s, "val_accuracy": accuracy * s / 300} for s in (100, 200, 300)]
        points += [{"step": 300, "loss": lr * 18 / 300}]
        result = {"test_accuracy": accuracy, "test_loss": lr * 19 / 300}
        ran(redis, job_id, points, ["train step 300"], {"status": "succeeded", "result": result})
    return {"url": url, "failed": failed, "sweep": sweep["id"]}


class SnapshotApp(GpudeckApp):
    """The app with a fixed subtitle (the API URL has a random port in tests, the free space varies)."""

    def on_mount(self) -> None:
        super().on_mount()
        self.sub_title = "http://127.0.0.1:8686"

    def read_title(self) -> None:
        pass


async def _loaded(pilot) -> None:
    from textual.widgets import DataTable

    table = pilot.app.screen.query_one("#jobs", DataTable)

    def measured() -> bool:
        """Every column as wide as its widest cell (DataTable measures widths after the rows land)."""
        return all(
            column.content_width >= max(len(str(table.get_cell_at((row, x)))) for row in range(table.row_count))
            for x, column in enumerate(table.ordered_columns)
        )

    while table.row_count < 2 or not measured():
        await pilot.pause(0.1)
    while not table.has_focus:  # the footer shows the focused widget's keys with the screen's
        await pilot.pause(0.1)
    await pilot.pause(0.5)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_jobs_screen(snap_compare, queued_api, size):
    assert snap_compare(SnapshotApp(queued_api), terminal_size=size, run_before=_loaded)


@pytest.fixture
def owned_api(spawn, child_env, redis) -> tuple[str, str]:
    """Jobs of two users (named tokens): the table gets an OWNER column. Answers the URL and alice's token."""
    from jobs import tokens

    made = {name: tokens.create(redis, name) for name in ("alice", "bartholomew")}
    url = start_api(spawn, child_env)
    for who, name in (("alice", "baseline"), ("bartholomew", "wider lr sweep")):
        spec = {"model": "resnet20", "dataset": "synthetic", "name": name, "gpus": 2}
        headers = {"Authorization": f"Bearer {made[who]}"}
        requests.post(f"{url}/api/v1/jobs", json=spec, headers=headers, timeout=10).raise_for_status()
    return url, made["alice"]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_jobs_screen_of_several_users(snap_compare, owned_api, size):
    """An OWNER column after the ID, which still fits 80 columns (a long name cut with an ellipsis)."""
    url, token = owned_api
    assert snap_compare(SnapshotApp(url, token=token), terminal_size=size, run_before=_loaded)


def _job_tab(key: str):
    async def run_before(pilot) -> None:
        from tui.screens.job import JobScreen

        screen = pilot.app.screen
        while not (isinstance(screen, JobScreen) and screen.job and screen.points and screen.lines):
            await pilot.pause(0.1)
            screen = pilot.app.screen
        await pilot.press(key)
        await pilot.pause(0.5)

    return run_before


@pytest.mark.parametrize("tab", ["1", "2", "3", "4"])
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_failed_job_screen(snap_compare, ran_api, size, tab):
    """The log (the failure in the header, TensorFlow's start-up folded), the curves, the config (aligned fields),
    the result tab."""
    app = SnapshotApp(ran_api["url"], job=ran_api["failed"])
    assert snap_compare(app, terminal_size=size, run_before=_job_tab(tab))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_gpus_and_workers_screen_of_a_box_without_any(snap_compare, queued_api, size):
    async def run_before(pilot) -> None:
        await _loaded(pilot)
        await pilot.press("g")
        while getattr(pilot.app.screen, "shown", None) is None:  # the first answer is drawn
            await pilot.pause(0.1)
        await pilot.pause(0.3)

    assert snap_compare(SnapshotApp(queued_api), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_sweep_screen(snap_compare, ran_api, size):
    async def run_before(pilot) -> None:
        pilot.app.open_sweep(ran_api["sweep"])
        drawn = lambda: getattr(pilot.app.screen, "drawn", None)  # noqa: E731
        while not (drawn() and len(drawn()[1]) == 2 and all(n for _, n, _ in drawn()[1])):
            await pilot.pause(0.1)
        await pilot.pause(0.5)

    assert snap_compare(SnapshotApp(ran_api["url"]), terminal_size=size, run_before=run_before)


def test_config_and_result_scroll_at_once_and_the_footer_offers_what_works_there(ran_api):
    """Issue 25 #5: on the Config and Result tabs ↓, PgDn and j scroll what is shown with no Tab first, and the
    footer no longer offers the log's keys (follow, wrap, error) there; back on the log it does again."""
    import asyncio

    from textual.containers import VerticalScroll

    from tests.support.pilot import footer_overlaps, until
    from tui.screens.job import JobScreen

    def offered(screen) -> set[str]:
        return {b.binding.action for b in screen.active_bindings.values() if b.enabled and b.binding.show}

    async def drive():
        app = GpudeckApp(ran_api["url"], job=ran_api["failed"])
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await until(pilot, lambda: app.screen if isinstance(app.screen, JobScreen) else None, 30)
            await until(pilot, lambda: screen.job is not None and screen.lines, 30)
            assert "toggle_follow" in offered(screen)
            await pilot.pause(0.2)
            assert footer_overlaps(screen, 80) == []  # (issue 42: `t Tens▏` was cut at 80 columns)
            await pilot.press("3")
            scroll = screen.query_one("#tab-config").query_one(VerticalScroll)
            await until(pilot, lambda: scroll.max_scroll_y > 0, 10)
            await pilot.press("down")
            await until(pilot, lambda: scroll.scroll_y == 1, 5)
            await pilot.press("k")
            await until(pilot, lambda: scroll.scroll_y == 0, 5)
            await pilot.press("j")
            await until(pilot, lambda: scroll.scroll_y == 1, 5)
            await pilot.press("home", "pagedown")
            await until(pilot, lambda: scroll.scroll_y == scroll.max_scroll_y, 5)
            assert not offered(screen) & {"toggle_follow", "toggle_wrap", "next_error"}, offered(screen)
            await pilot.press("1")
            await until(pilot, lambda: "toggle_follow" in offered(screen), 5)

    asyncio.run(drive())


async def _compared(pilot, ids: list[int]):
    """Select `ids` on the jobs table (space on each), press C: the compare screen, once its answer is drawn."""
    from textual.widgets import DataTable

    from tests.support.pilot import on_screen
    from tui.screens.compare import CompareScreen

    await _loaded(pilot)
    table = pilot.app.screen.query_one("#jobs", DataTable)
    for job_id in ids:
        table.move_cursor(row=table.get_row_index(str(job_id)), animate=False)
        await pilot.press("space")
    await pilot.press("C")
    return await on_screen(pilot, pilot.app, CompareScreen, lambda s: s.doc is not None, 30)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_compare_screen(snap_compare, ran_api, size):
    """Issue 46 §1: two runs of the sweep side by side: the field that differs, the results (the best in bold
    green, marked *), their loss curves on one chart in the colours of their columns."""
    jobs = requests.get(f"{ran_api['url']}/api/v1/sweeps/{ran_api['sweep']}", timeout=10).json()["jobs"]
    ended = [j["job_id"] for j in jobs if j["status"] == "succeeded"]

    async def run_before(pilot) -> None:
        await _compared(pilot, ended)
        await pilot.pause(0.5)

    assert snap_compare(SnapshotApp(ran_api["url"]), terminal_size=size, run_before=run_before)


def test_C_compares_the_selected_jobs_and_m_x_l_change_the_chart(ran_api):
    """Issue 46 §1 in the TUI: space selects, C compares (one job selected: a warning instead); the tables show
    what differs and the results a column a job, the best marked; m cycles the metric, x the axis, l the scale."""
    import asyncio

    from textual.widgets import DataTable

    from tests.support.pilot import until

    jobs = requests.get(f"{ran_api['url']}/api/v1/sweeps/{ran_api['sweep']}", timeout=10).json()["jobs"]
    first, second = [j["job_id"] for j in jobs if j["status"] == "succeeded"]

    async def drive():
        app = SnapshotApp(ran_api["url"])
        async with app.run_test(size=(120, 40)) as pilot:
            await _loaded(pilot)
            await pilot.press("C")  # nothing selected: it says what to do
            await until(pilot, lambda: any("select two jobs" in str(n.message) for n in app._notifications), 10)
            screen = await _compared(pilot, [first, ran_api["failed"], second])
            assert screen.job_ids == sorted([first, second, ran_api["failed"]])
            config = screen.query_one("#compare-config", DataTable)
            rows = {
                str(config.get_row_at(r)[0]): [str(c) for c in config.get_row_at(r)[1:]]
                for r in range(config.row_count)
            }
            assert rows["model"] == ["resnet20", "lenet", "lenet"] and rows["params.lr"][1:] == ["0.1", "0.05"]
            assert rows["status"] == ["failed", "succeeded", "succeeded"]
            results = screen.query_one("#compare-results", DataTable)
            best = {
                str(results.get_row_at(r)[0]): [str(c) for c in results.get_row_at(r)[1:]]
                for r in range(results.row_count)
            }
            assert best["test_accuracy"] == ["-", "0.71", "0.83 *"]  # (the failed run has none)
            assert screen.doc["metric"] == "loss" and len(screen.doc["curves"]) == 3
            await pilot.press("m")
            await until(pilot, lambda: screen.doc["metric"] == screen.doc["metrics"][1], 10)
            await pilot.press("x")
            await until(pilot, lambda: screen.doc["x"] == "epoch", 10)
            await pilot.press("l")
            assert screen.log_scale
            await pilot.press("escape")
            await until(pilot, lambda: not hasattr(app.screen, "job_ids"), 10)

    asyncio.run(drive())


def test_three_jobs_compared_at_80_columns_all_fit(ran_api):
    """Issue 67 #7: at 80x24 the third job of three was pushed off the screen (a horizontal scroll)."""
    import asyncio

    from textual.widgets import DataTable

    jobs = requests.get(f"{ran_api['url']}/api/v1/sweeps/{ran_api['sweep']}", timeout=10).json()["jobs"]
    first, second = [j["job_id"] for j in jobs if j["status"] == "succeeded"]

    async def drive():
        app = SnapshotApp(ran_api["url"])
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await _compared(pilot, [first, ran_api["failed"], second])
            await pilot.pause(0.3)
            for which in ("#compare-config", "#compare-results"):
                table = screen.query_one(which, DataTable)
                assert table.virtual_size.width <= table.size.width, (which, table.virtual_size, table.size)
                assert len(table.columns) == 4

    asyncio.run(drive())
