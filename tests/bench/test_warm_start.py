"""Benchmark (issue 41 §1): warm starts against cold ones, through one real worker. Not run by `make test`.

Run: make bench PYTEST_ARGS="-k warm_start -s"
1. submit -> first training step done (its first metric point's time), lenet and ResNet-20 on synthetic data,
   one job after the other (each submitted when the one before ended): p50 / p95 over GPUDECK_WARM_BENCH_JOBS (30)
   jobs, a worker with GPUDECK_WARM=off and one with it on, interleaved in halves (cold, warm, cold, warm).
2. one-step jobs all queued at once through one worker: jobs per second, cold and warm.
"""

from __future__ import annotations

import os
import statistics
import time

import pytest

from tests.support.live import until

JOBS = int(os.environ.get("GPUDECK_WARM_BENCH_JOBS", "30"))
KINDS = {
    "lenet": {"model": "lenet", "dataset": "synthetic:28x28x1", "params": {"steps": 2, "batch_size": 32}},
    "resnet20": {"model": "resnet20", "dataset": "synthetic", "params": {"steps": 2, "batch_size": 32}},
}


def run_one(client, spec: dict) -> tuple[float, bool]:
    """(seconds from its submission to its first training step done, whether it started warm)."""
    spec = {**spec, "params": {**spec["params"], "log_every": 1}}
    job_id = client.post("/api/v1/jobs", json=spec).json["id"]
    job = client.get(f"/api/v1/jobs/{job_id}/wait?timeout=600").json
    assert job["status"] == "succeeded", job
    created = job["created_at"]
    first = client.get(f"/api/v1/jobs/{job_id}/metrics").json["train"][0]["time"]
    from datetime import datetime

    return first - datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp(), bool(job["warm_start"])


def worker_of(spawn, child_env, client, warm: bool):
    proc = spawn("worker", "--cpu", env={**child_env, "GPUDECK_WARM": "on" if warm else "off"})
    until(lambda: client.get("/api/v1/workers").json["workers"], 30, "the worker")
    return proc


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


@pytest.mark.timeout(7200)
def test_warm_start_submit_to_first_step_and_jobs_per_second(client, spawn, child_env):
    results: dict[tuple[str, bool], list[float]] = {}
    warm_seen: dict[tuple[str, bool], int] = {}
    for kind, spec in KINDS.items():
        for _half in range(2):
            for warm in (False, True):
                w = worker_of(spawn, child_env, client, warm)
                run_one(client, spec)  # (the worker's first zoo job: cold either way; not counted)
                for _ in range(JOBS // 2):
                    took, started_warm = run_one(client, spec)
                    results.setdefault((kind, warm), []).append(took)
                    warm_seen[(kind, warm)] = warm_seen.get((kind, warm), 0) + started_warm
                w.stop()
    print(f"\nsubmit -> first training step done, one job after another on one CPU worker, n={JOBS} each:")
    for kind in KINDS:
        cold, warm = results[(kind, False)], results[(kind, True)]
        print(
            f"  {kind:9s} cold p50 {statistics.median(cold):.2f} s p95 {pct(cold, 0.95):.2f} s | "
            f"warm p50 {statistics.median(warm):.2f} s p95 {pct(warm, 0.95):.2f} s "
            f"({warm_seen[(kind, True)]}/{len(warm)} started warm) | warm/cold p50 "
            f"{statistics.median(warm) / statistics.median(cold):.2f}"
        )
    n = 20
    rates = {}
    for warm in (False, True, False, True):
        w = worker_of(spawn, child_env, client, warm)
        run_one(client, KINDS["lenet"])
        t0 = time.monotonic()
        ids = [client.post("/api/v1/jobs", json=KINDS["lenet"]).json["id"] for _ in range(n)]
        for i in ids:
            assert client.get(f"/api/v1/jobs/{i}/wait?timeout=600").json["status"] == "succeeded"
        rates.setdefault(warm, []).append(n / (time.monotonic() - t0))
        w.stop()
    print(
        f"{n} one-step lenet jobs queued at once through one worker: cold {rates[False][0]:.3f} / "
        f"{rates[False][1]:.3f} jobs/s, warm {rates[True][0]:.3f} / {rates[True][1]:.3f} jobs/s "
        f"(warm/cold {statistics.mean(rates[True]) / statistics.mean(rates[False]):.2f}x)"
    )


@pytest.mark.timeout(1800)
def test_warm_start_command_jobs_gpudecks_own_start_up(command_client, spawn, child_env):
    """§2's measure: what gpudeck spends before a command job's first line is its own (a sandbox, a source copy,
    the shim): from the work-horse's claim to the script's first line (`date`, no Python of the user's), and from
    the submission, p50 / p95 over 30 jobs on one worker."""
    worker_of(spawn, child_env, command_client, True)
    from_claim, from_submit = [], []
    for _ in range(30):
        job_id = command_client.post("/api/v1/jobs", json={"command": "date +%s.%N", "gpus": 0}).json["id"]
        job = command_client.get(f"/api/v1/jobs/{job_id}/wait?timeout=600").json
        assert job["status"] == "succeeded", job
        first = float(command_client.get(f"/api/v1/jobs/{job_id}/logs").get_data(as_text=True).split()[0])
        from jobs.store import JobStore

        rec = JobStore(command_client.application.config["REDIS"]).get(job_id)
        from_claim.append(first - rec["claimed_at"])
        from_submit.append(first - rec["created_at"])
    print(
        f"\ncommand job `date`, n=30: work-horse claim -> first line p50 {statistics.median(from_claim) * 1000:.0f} ms "
        f"p95 {pct(from_claim, 0.95) * 1000:.0f} ms; submit -> first line p50 "
        f"{statistics.median(from_submit) * 1000:.0f} ms p95 {pct(from_submit, 0.95) * 1000:.0f} ms"
    )


GAP_S = 4.0
"""Between one job's end and the next's submission, in the first pass (longer than TensorFlow's import here)."""
TF_SCRIPT = "import time\nimport tensorflow as tf\nprint('first-line', time.time(), tf.__version__, flush=True)\n"
"""A person's own script whose start is its heavy import (TensorFlow, the heavy library this machine has)."""


@pytest.mark.timeout(3600)
def test_warm_interpreter_python_script_submit_to_first_line(command_client, spawn, child_env, tmp_path):
    """Issue 65 #2's measure: `python train.py`, whose script imports TensorFlow and prints once, submit -> its
    first line and submit -> ended, on one CPU worker with GPUDECK_WARM=off and one with it on, interleaved in
    halves; p50 / p95 over GPUDECK_WARM_BENCH_JOBS (30) jobs each, each submitted GAP_S after the one before
    ended (as people and CI submit: a warm interpreter is made as its job's predecessor starts, and needs the
    import's seconds); then the same back to back. The warm worker's first two jobs are not counted (the first
    starts cold, the second records what the environment imports)."""
    source = tmp_path / "roots" / "tfscript"
    source.mkdir(parents=True)
    (source / "train.py").write_text(TF_SCRIPT)
    spec = {"command": "python train.py", "source": str(source), "gpus": 0}
    from datetime import datetime

    def one() -> tuple[float, float, bool]:
        job_id = command_client.post("/api/v1/jobs", json=spec).json["id"]
        job = command_client.get(f"/api/v1/jobs/{job_id}/wait?timeout=600").json
        assert job["status"] == "succeeded", job
        created = datetime.fromisoformat(job["created_at"].replace("Z", "+00:00")).timestamp()
        ended = datetime.fromisoformat(job["ended_at"].replace("Z", "+00:00")).timestamp()
        lines = command_client.get(f"/api/v1/jobs/{job_id}/logs").get_data(as_text=True).splitlines()
        first = float(next(line for line in lines if line.startswith("first-line")).split()[1])
        return first - created, ended - created, bool(job["warm_start"])

    for gap in (GAP_S, 0.0):
        first: dict[bool, list[float]] = {False: [], True: []}
        ended: dict[bool, list[float]] = {False: [], True: []}
        started_warm = 0
        for _half in range(2):
            for warm in (False, True):
                w = worker_of(spawn, child_env, command_client, warm)
                for _ in range(2 if warm else 0):
                    one()
                for _ in range(JOBS // 2):
                    time.sleep(gap)
                    a, b, was_warm = one()
                    first[warm].append(a)
                    ended[warm].append(b)
                    started_warm += was_warm and warm
                w.stop()
        n = len(first[True])
        print(f"\n`python train.py` importing TensorFlow, one CPU worker, n={n} each, {gap:.0f} s apart:")
        for name, got in (("submit -> first line", first), ("submit -> ended", ended)):
            cold, warm = got[False], got[True]
            print(
                f"  {name}: cold p50 {statistics.median(cold):.2f} s p95 {pct(cold, 0.95):.2f} s | warm p50 "
                f"{statistics.median(warm):.2f} s p95 {pct(warm, 0.95):.2f} s | warm/cold p50 "
                f"{statistics.median(warm) / statistics.median(cold):.2f}"
            )
        print(f"  {started_warm}/{len(first[True])} of the warm worker's jobs started warm")
