"""What a queue costs while it waits (issue 41 §3): a resting `gpudeck up` (its API and two workers on two FAKE
GPUs: a fake nvidia-smi on PATH, none exist here) on a Redis of its own, with 100 jobs queued and then with 10,000
(1,000 of them waiting on a dependency), in the same run: the CPU of the whole stack (its processes and Redis)
over a quiet window, `POST /jobs` p95 and `GET /jobs` first page p95. A command job holds both GPUs (`sleep`), so
no queued job starts and every round looks at the line again.

    make bench PYTEST_ARGS="-k queue_cost -s"
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest
import requests

from jobs import queues
from jobs.settings import Settings
from tests.support.live import fake_gpus, fake_nvidia_smi
from tests.support.stack import Up

WINDOW_S = float(os.environ.get("GPUDECK_BENCH_WINDOW_S", "20"))
SHAPE = os.environ.get("GPUDECK_BENCH_SHAPE", "two")
"""The queue's shape: `two` (two GPUs a job of both holds, every queued job asks both), or `held` (issue 64: one
GPU of four job slots held whole by a job of one GPU, every queued job asks one: three slots free, no room)."""
SIZES = [int(n) for n in os.environ.get("GPUDECK_BENCH_SIZES", "100,10000").split(",")]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds the processes have used so far."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def tree(root: int) -> list[int]:
    """`root` and every process under it."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += parents.get(pid, [])
    return out


def p95(xs: list[float]) -> float:
    return sorted(xs)[int(0.95 * (len(xs) - 1))]


@pytest.mark.timeout(1800)
def test_queue_cost_resting_with_100_and_10000_jobs_queued(tmp_path, child_env, redis, redis_url):
    gpus = 2 if SHAPE == "two" else 1
    fake_nvidia_smi(tmp_path / "bin", fake_gpus(gpus))
    env = {**child_env, "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}", "GPUDECK_COMMAND_JOBS": "1"}
    if SHAPE == "held":
        env["GPUDECK_JOBS_PER_GPU"] = "4"
    up = Up(tmp_path / "home", env, tmp_path / "up.log", redis_url=redis_url)
    settings = Settings(home=tmp_path / "home", redis_url=redis_url)
    redis_pid = int(redis.info("server")["process_id"])
    spec = {"model": "lenet", "dataset": "synthetic", "params": {"steps": 2}, "gpus": gpus}
    queued = 0
    figures: dict[int, dict[str, float]] = {}
    try:
        deadline = time.monotonic() + 60
        while len(requests.get(f"{up.url}/api/v1/workers", timeout=10).json()["workers"]) < (2 if gpus == 2 else 4):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        blocker = requests.post(f"{up.url}/api/v1/jobs", json={"command": ["sleep", "3600"], "gpus": gpus}, timeout=30)
        assert blocker.status_code == 201, blocker.text
        deadline = time.monotonic() + 60
        while requests.get(f"{up.url}/api/v1/jobs/{blocker.json()['id']}", timeout=10).json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for size in SIZES:
            head = None
            while queued < size:  # a tenth of them wait on a dependency (one job that itself waits in line)
                if head is not None and queued % 10 == 0:
                    queues.submit(redis, {**spec, "after": [head]}, settings)
                else:
                    made = queues.submit(redis, spec, settings)
                    head = head or made["id"]
                queued += 1
            time.sleep(5)  # (the rounds the new jobs cause)
            pids = [*tree(up.proc.pid), redis_pid]
            before, t0 = cpu_seconds(pids), time.monotonic()
            each = {pid: cpu_seconds([pid]) for pid in pids}
            time.sleep(WINDOW_S)
            cpu = (cpu_seconds(pids) - before) / (time.monotonic() - t0) * 100
            took = time.monotonic() - t0
            print(f"\n{size} queued, CPU % of one core by process over {WINDOW_S:g} s:")
            for pid in pids:  # (which of them costs what: the API, each worker, Redis)
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:70]
                except OSError:
                    continue
                print(f"  {(cpu_seconds([pid]) - each[pid]) / took * 100:5.2f}  {argv}")
            posts, lists = [], []
            for _ in range(40):
                t = time.perf_counter()
                made = requests.post(f"{up.url}/api/v1/jobs", json=spec, timeout=30)
                posts.append((time.perf_counter() - t) * 1000)
                assert made.status_code == 201, made.text
                t = time.perf_counter()
                requests.get(f"{up.url}/api/v1/jobs?limit=50", timeout=30).raise_for_status()
                lists.append((time.perf_counter() - t) * 1000)
            queued += 40
            figures[size] = {
                "stack_cpu_percent": cpu,
                "post_p95_ms": p95(posts),
                "post_p50_ms": statistics.median(posts),
                "list_p95_ms": p95(lists),
                "list_p50_ms": statistics.median(lists),
            }
    finally:
        up.kill()
    print(f"\nresting stack (API, 2 workers, Redis) over {WINDOW_S:g} s; a tenth of the jobs wait on a dependency")
    small_n, big_n = SIZES[0], SIZES[-1]
    print(f"shape {SHAPE}")
    print(f"{'':22}{f'{small_n:,} queued':>14}{f'{big_n:,} queued':>16}{'ratio':>8}")
    for key in figures[small_n]:
        small, big = figures[small_n][key], figures[big_n][key]
        print(f"{key:22}{small:14.2f}{big:16.2f}{big / small if small else float('nan'):8.2f}")
    assert figures[big_n]["stack_cpu_percent"] <= 5.0, "target: a resting stack <= 5 % of one core"
    assert figures[big_n]["post_p95_ms"] <= 30.0 and figures[big_n]["list_p95_ms"] <= 30.0, "target: p95 <= 30 ms"
