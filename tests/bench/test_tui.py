"""Benchmark: the jobs table with 1,000 jobs (first fill, then the 2-second in-place refresh), and `gpudeck tui`
idle on the jobs screen in a real terminal (tmux): CPU use and memory. Not run by `make test`.

Run: make bench PYTEST_ARGS="-k tui"   (prints the figures)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import time
from pathlib import Path

import pytest
import requests
from redis import Redis

from jobs import queues
from jobs.redis_server import EmbeddedRedis, free_port
from jobs.run.proc import python_module
from jobs.store import JobStore
from tests.support.live import api_on, cpu_seconds
from tests.support.policy import DEFAULTS

N_JOBS = 1000
LOG_LINES = 100_000
SPEC = {"model": "lenet", "dataset": "synthetic", "gpus": 2, "params": {"steps": 10}}


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
        queues.submit(redis, SPEC, DEFAULTS)
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
    session = f"gpudeck-bench-{free_port()}"
    with contextlib.ExitStack() as stack:
        stack.callback(server.stop)
        url = stack.enter_context(api_on(redis_url, tmp_path / "home"))
        stack.callback(subprocess.run, ["tmux", "kill-session", "-t", session], capture_output=True)
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
        cpu0, t0 = cpu_seconds(pane_pid), time.monotonic()
        time.sleep(30)
        idle_cpu = (cpu_seconds(pane_pid) - cpu0) / (time.monotonic() - t0) * 100
        rss = _rss_mib(pane_pid)
        print(
            f"\njob screen, {LOG_LINES} log lines: loaded in {load_s:.1f} s (pages of 10,000 lines); scroll keys "
            f"(pageup/home/end) p50 {statistics.median(keys_ms):.0f} ms, max {max(keys_ms):.0f} ms"
        )
        print(
            f"\njobs table, {N_JOBS} jobs: first fill p50 {statistics.median(fill):.0f} ms; "
            f"in-place refresh with {RUNNING} running jobs changed (fetch excluded) p50 "
            f"{statistics.median(refresh):.0f} ms, "
            f"max {max(refresh):.0f} ms (n={len(refresh)})"
        )
        print(
            f"gpudeck tui idle on the jobs screen ({N_JOBS} jobs, 2 s refresh): CPU {idle_cpu:.1f} % of one core, "
            f"RSS {rss:.0f} MiB"
        )


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
            getattr(screen, "written", {}).clear()  # (what the table wrote: its cache of cells)
            t0 = time.perf_counter()
            screen.apply(jobs)
            await pilot.pause()
            fill.append((time.perf_counter() - t0) * 1000)
            for tick in range(4):
                # what a refresh brings while RUNNING jobs train: their step, loss and elapsed time move
                jobs = [_ticked(j, tick) if j["id"] % (N_JOBS // RUNNING) == 0 else j for j in jobs]
                t0 = time.perf_counter()
                screen.apply(jobs)
                await pilot.pause()
                refresh.append((time.perf_counter() - t0) * 1000)
    return fill, refresh


RUNNING = 10
"""Jobs of the 1,000 whose values change between two refreshes of the table benchmark."""


def _ticked(job: dict, tick: int) -> dict:
    step = (job.get("progress") or {}).get("step") or 0
    return {
        **job,
        "status": "running",
        "elapsed_s": (job.get("elapsed_s") or 0) + 2.0,
        "eta_s": 100.0 - tick,
        "progress": {**(job.get("progress") or {}), "step": step + 5, "total_steps": 100, "fraction": (step + 5) / 100},
        "metrics": {"step": step + 5, "loss": 1 / (step + 5)},
    }


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


# -- what a slow link pays: bytes the TUI writes to its terminal, and its CPU, while nothing or little changes ----
REPAINT_S = float(os.environ.get("GPUDECK_BENCH_S", "60"))
"""Seconds each case is measured."""

TICKER = r"""
import json, os, sys, time
for s in range(1, 100000):
    time.sleep(1)
    print(f"step {s} loss {1 / s:.5f}", flush=True)
    if s % 5 == 0:
        with open(os.path.join(os.environ["JOB_DIR"], "metrics.jsonl"), "a") as f:
            f.write(json.dumps({"step": s, "loss": 1 / s, "accuracy": 1 - 1 / s}) + "\n")
"""
"""A running job of a line a second and a metric point every 5 s: what a following job screen watches."""


def _tmux_cost(session: str, argv: list[str], out: Path, size: tuple[int, int]) -> tuple[float, float]:
    """Run `argv` in a tmux pane of `size`, let it settle, then measure REPAINT_S s: bytes/s it writes to the
    terminal (tmux pipe-pane) and CPU % of one core."""
    cmd = " ".join(argv)
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), cmd], check=True
    )
    try:
        pid = int(
            subprocess.run(
                ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"], capture_output=True, text=True
            ).stdout.split()[0]
        )
        time.sleep(12)  # start-up, the first fill, a log caught up
        subprocess.run(["tmux", "pipe-pane", "-t", session, "-o", f"cat >> {out}"], check=True)
        time.sleep(1)
        b0, cpu0, t0 = out.stat().st_size if out.exists() else 0, cpu_seconds(pid), time.monotonic()
        time.sleep(REPAINT_S)
        took = time.monotonic() - t0
        return (out.stat().st_size - b0) / took, (cpu_seconds(pid) - cpu0) / took * 100
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


@pytest.mark.timeout(600 + 8 * REPAINT_S)
def test_repaint_cost_jobs_screen_and_job_screens(tmp_path):
    """Bytes/s and CPU of `gpudeck tui` (a) on the jobs screen with 1,000 jobs, two of them running, (b) on the
    screen of that running job, following its log, (c) on the screen of an ended job, (d) on the screen of a
    running job that prints nothing: after the first paint only a changed value, a new line or a new point should
    cost bytes."""
    from tests.support.stack import Up

    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDECK_")}
    env.update(GPUDECK_COMMAND_JOBS="1")
    stack = Up(tmp_path / "home", env, tmp_path / "up.log", args=("--cpu-workers", "2"))
    try:
        http = requests.Session()
        for _ in range(N_JOBS - 3):  # queued for 2 GPUs this box lacks: they stay queued
            http.post(f"{stack.url}/api/v1/jobs", json=SPEC, timeout=30).raise_for_status()
        ended = http.post(f"{stack.url}/api/v1/jobs", json={"command": "echo done", "gpus": 0}, timeout=30).json()
        http.get(f"{stack.url}/api/v1/jobs/{ended['id']}/wait?timeout=120", timeout=130)
        running = http.post(
            f"{stack.url}/api/v1/jobs", json={"command": ["python", "-c", TICKER], "gpus": 0}, timeout=30
        ).json()
        quiet = http.post(  # running, printing nothing: only its elapsed time moves
            f"{stack.url}/api/v1/jobs", json={"command": "echo started; sleep 3600", "gpus": 0}, timeout=30
        ).json()
        for job in (running, quiet):
            while http.get(f"{stack.url}/api/v1/jobs/{job['id']}", timeout=10).json()["status"] != "running":
                time.sleep(0.2)
        tui = [*python_module("tui.cli", "tui", "--api", stack.url)]
        cases = [
            ("jobs screen, 1,000 jobs (2 running)", tui),
            (f"job screen following running job {running['id']}", [*tui, str(running["id"])]),
            (f"job screen of ended job {ended['id']}", [*tui, str(ended["id"])]),
            (f"job screen following quiet running job {quiet['id']}", [*tui, str(quiet["id"])]),
        ]
        print()
        for size in ((120, 40), (80, 24)):
            for n, (label, argv) in enumerate(cases):
                out = tmp_path / f"pane-{size[0]}-{n}.bytes"
                rate, cpu = _tmux_cost(f"gpudeck-repaint-{stack.port}", argv, out, size)
                print(f"{size[0]}x{size[1]} {label}: {rate / 1024:.2f} KB/s written, CPU {cpu:.1f} % of a core")
    finally:
        stack.stop()
