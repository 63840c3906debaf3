"""Grid vs random vs random+ASHA vs TPE+ASHA on the real stack (issue 26's benchmark): a small problem this machine
trains a trial of in about six seconds — softmax regression with momentum SGD on the 8x8 digits, in numpy, its
lr, momentum, weight decay and batch size from env variables, its validation accuracy logged to metrics.jsonl every
20 of its 400 steps — searched through `gpudeck up` with two CPU workers, each method with the grid's budget of
trials (24, so at most the grid's steps), over several seeds.

Reported per method and seed: the best validation accuracy reached, the steps trained (and wall time) until a
trial ended within 1 % of the best any method found, and the steps trained in all. Target: ASHA reaches that
point with at most 40 % of the grid's steps.

    make bench PYTEST_ARGS="-k search_methods"   (GPUDECK_BENCH_SEEDS=3; GPUDECK_SEARCH_STEP_S=0.005: trials of
    a third of the length)
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import requests

from tests.support.digits import digits_arrays
from tests.support.live import until
from tests.support.stack import Up

SEEDS = int(os.environ.get("GPUDECK_BENCH_SEEDS", "3"))
STEPS = 400
STEP_S = float(os.environ.get("GPUDECK_SEARCH_STEP_S", "0.015"))
"""A trial's step time (a bigger model's step): 0.015 s, a trial of about 6 s; 0.005 for a third of that."""

TRAIN = f"""
import json, os, time
import numpy as np

data = np.load(os.path.join(os.environ["DATA_DIR"], "digits.npz"))
x, y, xv, yv = data["x_train"], data["y_train"], data["x_test"], data["y_test"]
lr, mom = float(os.environ["LR"]), float(os.environ["MOMENTUM"])
wd, batch = float(os.environ["WD"]), int(os.environ["BATCH"])
rng = np.random.default_rng(0)
w, b = np.zeros((64, 10)), np.zeros(10)
vw, vb = np.zeros_like(w), np.zeros_like(b)
out = open(os.path.join(os.environ["JOB_DIR"], "metrics.jsonl"), "a")
for step in range(1, {STEPS} + 1):
    i = rng.integers(0, len(x), batch)
    z = x[i] @ w + b
    p = np.exp(z - z.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
    p[np.arange(batch), y[i]] -= 1
    gw, gb = x[i].T @ p / batch + wd * w, p.mean(0)
    vw, vb = mom * vw - lr * gw, mom * vb - lr * gb
    w, b = w + vw, b + vb
    time.sleep({STEP_S})  # (a bigger model's step: a trial trains for about 6 s at 0.015)
    if step % 20 == 0:
        acc = float(((xv @ w + b).argmax(1) == yv).mean()) if np.isfinite(w).all() else 0.0
        out.write(json.dumps({{"step": step, "val_accuracy": acc}}) + "\\n"); out.flush()
"""

SPACE = {
    "env.LR": {"loguniform": [1e-3, 10.0]},
    "env.MOMENTUM": {"uniform": [0.0, 0.99]},
    "env.WD": {"loguniform": [1e-6, 1e-2]},
    "env.BATCH": {"choice": [16, 32, 64, 128]},
}
GRID = {"env.LR": ["0.01", "0.1", "1.0"], "env.MOMENTUM": ["0.0", "0.9"], "env.WD": ["1e-5", "1e-3"],
        "env.BATCH": ["32", "128"]}  # fmt: skip
TRIALS = 24
ASHA = {"kind": "asha", "min_steps": 40, "reduction_factor": 3}


def run_search(url: str, base: dict, body: dict) -> dict:
    t0 = time.monotonic()
    made = requests.post(f"{url}/api/v1/sweeps", json={"base": base, **body}, timeout=60)
    assert made.status_code == 201, made.text
    sweep_id = made.json()["id"]
    until(lambda: requests.get(f"{url}/api/v1/sweeps/{sweep_id}", timeout=10).json()["state"] != "running", 900)
    shown = requests.get(f"{url}/api/v1/sweeps/{sweep_id}", timeout=10).json()
    jobs = {t["job"]: requests.get(f"{url}/api/v1/jobs/{t['job']}", timeout=10).json() for t in shown["trials"]}
    ended = sorted(shown["trials"], key=lambda t: jobs[t["job"]]["ended_at"])
    return {"trials": ended, "jobs": jobs, "wall": time.monotonic() - t0, "t0": made.json().get("created_at")}


def to_within(run: dict, target: float) -> tuple[int | None, float | None]:
    """Steps trained (and seconds since the first trial started) until a trial ended at or above `target`."""
    steps, first = 0, min(j["started_at"] for j in run["jobs"].values() if j["started_at"])
    for t in run["trials"]:
        steps += trained(run, t)
        final = t["status"] == "succeeded" and not t["stopped_early"] and t["metric"] is not None
        if final and t["metric"] >= target:
            job = run["jobs"][t["job"]]
            return steps, _seconds(job["ended_at"]) - _seconds(first)
    return None, None


def trained(run: dict, trial: dict) -> int:
    """The steps a trial's job trained (a stopped one's: up to where the stop reached it)."""
    return (run["jobs"][trial["job"]]["progress"] or {}).get("step") or 0


def _seconds(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_search_methods(tmp_path, child_env):
    project, data = tmp_path / "project", tmp_path / "data"
    project.mkdir()
    data.mkdir()
    (project / "train.py").write_text(TRAIN)
    (x_train, y_train), (x_test, y_test) = digits_arrays()
    np.savez(data / "digits.npz", x_train=x_train.reshape(-1, 64) / 255, y_train=y_train,
             x_test=x_test.reshape(-1, 64) / 255, y_test=y_test)  # fmt: skip
    env = {**child_env, "GPUDECK_COMMAND_JOBS": "1", "GPUDECK_DATA_ROOTS": str(tmp_path)}
    stack = Up(tmp_path / "home", env, tmp_path / "up.log", args=("--cpu-workers", "2"))
    base = {"command": [sys.executable, "train.py"], "source": str(project), "dataset": str(data), "gpus": 0}
    runs: dict[str, list[dict]] = {}
    try:
        runs["grid"] = [run_search(stack.url, base, {"grid": GRID, "metric": "val_accuracy", "max_concurrent": 2})]
        for seed in range(SEEDS):
            for name, body in (
                ("random", {"search": "random"}),
                ("random+asha", {"search": "random", "stopping": ASHA}),
                ("tpe+asha", {"search": "tpe", "stopping": ASHA}),
            ):
                common = {"space": SPACE, "metric": "val_accuracy", "max_trials": TRIALS, "max_concurrent": 2}
                runs.setdefault(name, []).append(run_search(stack.url, base, {**body, **common, "seed": seed}))
    finally:
        stack.stop()
    best = max(t["metric"] for rs in runs.values() for r in rs for t in r["trials"] if t["metric"] is not None)
    target = best * 0.99
    grid_steps = to_within(runs["grid"][0], target)[0]
    print(f"\nbest validation accuracy any method found: {best:.4f}; within 1 %: >= {target:.4f}")
    print(
        f"{'method':<12} {'seed':>4} {'best':>7} {'steps to 1%':>12} {'s to 1%':>8} {'steps in all':>13} {'wall s':>7}"
    )
    fractions: dict[str, list[float]] = {}
    for name, rs in runs.items():
        for seed, r in enumerate(rs):
            finals = [t["metric"] for t in r["trials"] if t["metric"] is not None and not t["stopped_early"]] or [0.0]
            steps, secs = to_within(r, target)
            total = sum(trained(r, t) for t in r["trials"])
            if steps is not None and grid_steps:
                fractions.setdefault(name, []).append(steps / grid_steps)
            print(
                f"{name:<12} {seed if name != 'grid' else '-':>4} {max(finals):>7.4f} {steps if steps else '-':>12} "
                f"{f'{secs:.0f}' if secs else '-':>8} {total:>13} {r['wall']:>7.0f}"
            )
    for name, fr in fractions.items():
        print(f"{name}: steps to within 1 % / the grid's: median {statistics.median(fr):.2f} over {len(fr)} seeds")
    assert Path(tmp_path / "home").exists()
