"""Benchmark: the jobs table with 1,000 jobs (first fill, then the 2-second in-place refresh), and `gpudeck tui`
idle on the jobs screen in a real terminal (tmux): CPU use and memory. Not run by `make test`.

Run: make bench PYTEST_ARGS="-k tui"   (prints the figures)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import time
from pathlib import Path

import requests
from redis import Redis

from jobs import queues
from jobs.proc import python_module
from jobs.redis_server import EmbeddedRedis, free_port
from jobs.store import JobStore

N_JOBS = 1000
LOG_LINES = 100_000
SPEC = {"model": "lenet", "dataset": "synthetic", "gpus": 2, "params": {"steps": 10}}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_jobs_table_refresh_idle_cpu_and_memory_with_1000_jobs(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis", port=free_port(), appendonly=False)
    redis_url = server.start()
    redis = Redis.from_url(redis_url)
    for _ in range(N_JOBS):
        queues.submit(redis, SPEC)
    # Job 1 gets a 100,000-line log, written the way a work-horse writes one (numbered stream entries).
    store = JobStore(redis)
    for first in range(1, LOG_LINES + 1, 10_000):
        pipe = redis.pipeline(transaction=False)
        lines = [
            f"2026-11-21 12:00:00,000 INFO train step {n} loss {1 / n:.6f} " + "x" * 60
            for n in range(first, first + 10_000)
        ]
        store.append_lines(1, lines, pipe)
        pipe.execute()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDECK_")}
    env.update(REDIS_URL=redis_url, GPUDECK_HOME=str(tmp_path / "home"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    api = subprocess.Popen(python_module("tui.cli", "api", "--port", str(port)), env=env, stdout=subprocess.DEVNULL)
    session = f"gpudeck-bench-{port}"
    try:
        while True:
            try:
                requests.get(f"{url}/healthz", timeout=1)
                break
            except requests.RequestException:
                time.sleep(0.1)
        fill, refresh = asyncio.run(_table_timings(url))
        load_s, keys_ms = asyncio.run(_long_log(url))

        cmd = " ".join(python_module("tui.cli", "tui", "--api", url))
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", cmd], check=True)
        pane_pid = int(
            subprocess.run(
                ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"], capture_output=True, text=True
            ).stdout.split()[0]
        )
        time.sleep(10)  # start-up and the first fill
        cpu0, t0 = _cpu_seconds(pane_pid), time.monotonic()
        time.sleep(30)
        idle_cpu = (_cpu_seconds(pane_pid) - cpu0) / (time.monotonic() - t0) * 100
        rss = _rss_mib(pane_pid)
        print(
            f"\njob screen, {LOG_LINES} log lines: loaded in {load_s:.1f} s (pages of 10,000 lines); scroll keys "
            f"(pageup/home/end) p50 {statistics.median(keys_ms):.0f} ms, max {max(keys_ms):.0f} ms"
        )
        print(
            f"\njobs table, {N_JOBS} jobs: first fill p50 {statistics.median(fill):.0f} ms; "
            f"in-place refresh (fetch excluded) p50 {statistics.median(refresh):.0f} ms, "
            f"max {max(refresh):.0f} ms (n={len(refresh)})"
        )
        print(
            f"gpudeck tui idle on the jobs screen ({N_JOBS} jobs, 2 s refresh): CPU {idle_cpu:.1f} % of one core, "
            f"RSS {rss:.0f} MiB"
        )
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        api.terminate()
        api.wait(15)
        server.stop()


async def _table_timings(url: str) -> tuple[list[float], list[float]]:
    from textual.widgets import DataTable

    from tui.app import GpudeckApp
    from tui.client import Client

    jobs = []
    cursor = None
    client = Client(url)
    while True:
        page = client.jobs(limit=500, cursor=cursor)
        jobs += page["jobs"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    fill, refresh = [], []
    app = GpudeckApp(url)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        table = screen.query_one("#jobs", DataTable)
        for _ in range(5):
            table.clear()
            t0 = time.perf_counter()
            screen.apply(jobs)
            await pilot.pause()
            fill.append((time.perf_counter() - t0) * 1000)
            for _ in range(4):
                t0 = time.perf_counter()
                screen.apply(jobs)
                await pilot.pause()
                refresh.append((time.perf_counter() - t0) * 1000)
    return fill, refresh


async def _long_log(url: str) -> tuple[float, list[float]]:
    from textual.widgets import Log

    from tui.app import GpudeckApp
    from tui.screens.job import JobScreen

    app = GpudeckApp(url)
    async with app.run_test(size=(120, 40)) as pilot:
        t0 = time.perf_counter()
        app.push_screen(JobScreen(1))
        await pilot.pause(0.1)
        log = app.screen.query_one("#log", Log)
        while log.line_count < LOG_LINES:
            await pilot.pause(0.05)
        load_s = time.perf_counter() - t0
        keys = []
        for key in ["pageup"] * 10 + ["home", "end"] * 5:
            t0 = time.perf_counter()
            await pilot.press(key)
            await pilot.pause()
            keys.append((time.perf_counter() - t0) * 1000)
    return load_s, keys
