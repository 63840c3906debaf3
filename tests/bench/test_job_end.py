"""How soon a job's record ends after its process does (issue 65 #3: within 0.15 s; 0.55 s on the GPU box): a
command job whose last act is to print the time, on a CPU worker of a real `gpudeck up`, its record's `ended_at`
against that time; p50/p95 over 20 jobs, with submit -> ended beside.

    make bench PYTEST_ARGS="-k job_end -s"
"""

from __future__ import annotations

import statistics
import time

import requests

from tests.support.stack import Up

LAST_WORDS = "import time; print('exit at', repr(time.time()), flush=True)"


def _stamp(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_a_jobs_record_ends_soon_after_its_process(tmp_path, child_env):
    env = {**child_env, "GPUDECK_COMMAND_JOBS": "1"}
    up = Up(tmp_path / "home", env, tmp_path / "up.log", args=("--cpu-workers", "1"))
    gaps, walls = [], []
    try:
        for _ in range(22):
            t0 = time.time()
            made = requests.post(
                f"{up.url}/api/v1/jobs", json={"command": ["python", "-c", LAST_WORDS], "gpus": 0}, timeout=30
            )
            assert made.status_code == 201, made.text
            job_id = made.json()["id"]
            job = requests.get(f"{up.url}/api/v1/jobs/{job_id}/wait?timeout=60", timeout=90).json()
            assert job["status"] == "succeeded", job
            log = requests.get(f"{up.url}/api/v1/jobs/{job_id}/logs", timeout=30).text
            exited = float(next(line for line in log.splitlines() if "exit at" in line).rsplit(" ", 1)[1])
            gaps.append(_stamp(job["ended_at"]) - exited)
            walls.append(_stamp(job["ended_at"]) - t0)
    finally:
        up.kill()
    gaps, walls = gaps[2:], walls[2:]  # (the first jobs warm the worker up)

    def p95(xs: list[float]) -> float:
        return sorted(xs)[int(0.95 * (len(xs) - 1))]

    print(
        f"\nprocess exit -> record ended: p50 {statistics.median(gaps):.3f} s, p95 {p95(gaps):.3f} s; "
        f"submit -> ended: p50 {statistics.median(walls):.3f} s, p95 {p95(walls):.3f} s ({len(gaps)} jobs)"
    )
    assert statistics.median(gaps) <= 0.15, gaps
