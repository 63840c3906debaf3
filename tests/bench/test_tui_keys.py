"""Benchmark (issue 64): the jobs screen's keys with thousands of jobs, key press to the screen changed, through
Textual's Pilot (headless) against a real API and Redis: `j`/`k`, `f` (a facet that drops most rows), `/` and a
word, `s` (sort by the next column), enter (the job's screen and its header), escape back. Not run by `make test`.

Run: make bench PYTEST_ARGS="-k tui_keys"          (GPUDECK_BENCH_JOBS=2000,10000 by default)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

import pytest
from redis import Redis

from jobs.keys import COUNTER_KEY
from jobs.redis_server import EmbeddedRedis, free_port
from jobs.store import JobStore
from models.states import Status
from tests.support.live import api_on

SIZES = [int(n) for n in os.environ.get("GPUDECK_BENCH_JOBS", "2000,10000").split(",")]
SPEC = {"model": "lenet", "dataset": "synthetic", "gpus": 1, "priority": "normal", "params": {"steps": 10}}
ENDS = ("succeeded", "failed", "canceled")


def _fill(redis: Redis, n: int) -> None:
    """`n` job records, as the store writes them, of three owners and every status (most ended, a few running
    and queued): the shape of a box after some searches and a CI pipeline."""
    store = JobStore(redis)
    now = time.time()
    for first in range(1, n + 1, 500):
        pipe = redis.pipeline(transaction=False)
        for job_id in range(first, min(n, first + 499) + 1):
            owner = ("alice", "bob", "carol")[job_id % 3]
            spec = {**SPEC, "name": f"lr-sweep-{job_id % 97}-trial-{job_id}"}
            store.create(job_id, spec, "gpus-1", pipe=pipe, extra={"owner": owner})
        pipe.execute()
        pipe = redis.pipeline(transaction=False)
        for job_id in range(first, min(n, first + 499) + 1):
            status = ENDS[job_id % 3] if job_id % 50 else (Status.RUNNING.value if job_id % 100 else "queued")
            if status != "queued":
                store.update(
                    job_id,
                    pipe=pipe,
                    status=status,
                    started_at=now - 600,
                    **({"ended_at": now - 60} if status in ENDS else {}),
                    progress={"step": 5, "total_steps": 10, "fraction": 0.5},
                    metrics={"step": 5, "loss": 0.5},
                )
        pipe.execute()
    redis.set(COUNTER_KEY, n)


def _with_jobs(tmp_path, n: int, measure):  # noqa: ANN001, ANN202
    """`measure(url, n)` run against a real API on a Redis of its own holding `n` jobs (_fill)."""
    server = EmbeddedRedis(tmp_path / f"redis-{n}", port=free_port(), appendonly=False)
    redis = Redis.from_url(server.start())
    _fill(redis, n)
    try:
        with api_on(server.url, tmp_path / f"home-{n}") as url:
            return asyncio.run(measure(url, n))
    finally:
        server.stop()


async def _keys(url: str, n: int) -> dict[str, list[float]]:
    from textual.widgets import DataTable, Static

    from tui.app import GpudeckApp
    from tui.screens.job import JobScreen
    from tui.screens.jobs import JobsScreen

    took: dict[str, list[float]] = {}
    app = GpudeckApp(url)
    t0 = time.perf_counter()
    async with app.run_test(size=(120, 40)) as pilot:

        async def until(check, timeout: float = 120.0, what: str = "the first table") -> None:
            deadline = time.monotonic() + timeout
            while not check():
                assert time.monotonic() < deadline, (
                    f"the screen did not change: {what}; focused {app.focused!r}, {table.row_count} rows, "
                    f"cursor {table.cursor_row}, screen {app.screen!r}, stack {app.screen_stack!r}"
                )
                await pilot.pause(0.005)

        screen = app.screen
        assert isinstance(screen, JobsScreen)
        table = screen.query_one("#jobs", DataTable)
        await until(lambda: table.row_count >= min(n, 1000))
        took["start-up to the first table"] = [(time.perf_counter() - t0) * 1000]
        state = screen.query_one("#jobs-state", Static)

        async def press(name: str, keys: list[str], changed) -> None:  # noqa: ANN001
            before = (str(state.content), table.cursor_row, type(app.screen))
            t0 = time.perf_counter()
            for key in keys:
                await pilot.press(key)
            await until(lambda: changed(before), what=f"{name} ({keys})")
            took.setdefault(name, []).append((time.perf_counter() - t0) * 1000)

        moved = lambda before: table.cursor_row != before[1]  # noqa: E731
        restated = lambda before: str(state.content) != before[0]  # noqa: E731
        for _ in range(10):
            await press("j", ["j"], moved)
            await press("k", ["k"], moved)
        for _ in range(12):
            await press("f", ["f"], restated)
        for _ in range(5):
            await press("s", ["s"], restated)
        for word in ("trial-17", "carol", "sweep-3"):
            await press("/ (the filter box)", ["slash"], lambda before: app.focused is not table)
            for n, c in enumerate(word):  # (each key of the word: the rows it filters shown)
                shown = f"filter: {word[: n + 1]!r}"
                key = c if c.isalnum() else "minus"
                await press("a key of a word in it", [key], lambda b, shown=shown: shown in str(state.content))
            # (cleared: the table has the keys again and the state line no filter; a refresh landing meanwhile also
            # changes the state line, and enter pressed while the filter has the keys keeps the filter, by design)
            cleared = lambda before: app.focused is table and "filter:" not in str(state.content)  # noqa: E731
            await press("escape (the filter cleared)", ["escape"], cleared)
        for _ in range(5):
            await press("enter (the job's screen)", ["enter"], lambda before: isinstance(app.screen, JobScreen))
            await press("escape (back)", ["escape"], lambda before: app.screen is screen)
    return took


@pytest.mark.timeout(1800)
def test_jobs_screen_keys_with_thousands_of_jobs(tmp_path):
    for n in SIZES:
        took = _with_jobs(tmp_path, n, _keys)
        print(f"\njobs screen with {n} jobs, key press to the screen changed (ms):")
        for name, ms in took.items():
            ms = sorted(ms)
            p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
            print(f"  {name:32} p50 {statistics.median(ms):7.0f}  p95 {p95:7.0f}  max {ms[-1]:7.0f}  (n={len(ms)})")


IDLE_S = float(os.environ.get("GPUDECK_BENCH_IDLE_S", "20"))


async def _idle(url: str, n: int) -> dict[str, float]:
    """The TUI process's CPU (every thread of it: the reads, the table) while the jobs screen sits, sorted by id
    and then by the next column, over IDLE_S each: % of one core."""
    from textual.widgets import DataTable

    from tui.app import GpudeckApp

    app = GpudeckApp(url)
    got = {}
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.screen.query_one("#jobs", DataTable)
        while table.row_count < min(n, 1000):
            await pilot.pause(0.01)
        for sort in ("id", "the next column"):
            if sort != "id":
                await pilot.press("s")
            await pilot.pause(5)  # (its first reads of that order)
            c0, t0 = time.process_time(), time.monotonic()
            await pilot.pause(IDLE_S)
            got[f"idle, sorted by {sort}"] = (time.process_time() - c0) / (time.monotonic() - t0) * 100
    return got


@pytest.mark.timeout(1800)
def test_jobs_screen_idle_cpu_with_thousands_of_jobs(tmp_path):
    for n in SIZES:
        got = _with_jobs(tmp_path, n, _idle)
        print(f"\njobs screen with {n} jobs at rest (2 s refresh), the TUI's CPU, % of one core:")
        for name, percent in got.items():
            print(f"  {name:32} {percent:5.1f}")
