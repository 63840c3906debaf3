"""Issue 46 §1: the README's "Comparing runs" commands, run as written against a real API process, over the three
trials of a grid whose runs are written into Redis as a worker writes them (tests.support.runs): the CLI's
tables show exactly the field that differs, the best of each result marked, a curve per run; CSV and curl too."""

from __future__ import annotations

import csv
import io
import json
import os
import sys

import pytest
import requests

from tests.support.live import start_api
from tests.support.readme import run_block
from tests.support.runs import T0, ran

pytestmark = pytest.mark.slow


def test_the_readme_compares_a_grids_three_runs(spawn, child_env, redis, tmp_path):
    url = start_api(spawn, child_env)
    base = {"model": "lenet", "dataset": "synthetic", "gpus": 2, "name": "lenet lr"}  # (2 GPUs: no worker takes it)
    grid = requests.post(f"{url}/api/v1/sweeps", json={"base": base, "grid": {"params.lr": [0.1, 0.05, 0.01]}}).json()
    assert grid["job_ids"] == [1, 2, 3]
    for job_id, accuracy in zip(grid["job_ids"], (0.62, 0.81, 0.44)):
        points = [
            {"step": s, "epoch": s / 100, "time": T0 + 5 + s / 10, "loss": 2.3 * (1 - accuracy * s / 400)}
            for s in range(10, 410, 10)
        ]
        points += [{"step": s, "epoch": s / 100, "val_accuracy": accuracy * s / 400} for s in (100, 200, 300, 400)]
        result = {"test_accuracy": accuracy, "test_loss": 1.5 - accuracy, "images_per_sec": 400.0 + job_id}
        ran(redis, job_id, points, [], {"status": "succeeded", "result": result}, gpu_seconds=190.0)

    env = {**child_env, "GPUDECK_API": url, "PATH": f"{os.path.dirname(sys.executable)}:{child_env['PATH']}"}
    shown, by_epoch, _, curl = run_block("compare", int(url.rsplit(":", 1)[1]), tmp_path, env)
    lines = shown.splitlines()
    assert lines[0].split() == ["JOB", "1", "2", "3"]
    assert [line.split()[0] for line in lines[1:4]] == ["name", "status", "params.lr"]  # (nothing else differs)
    assert lines[3].split() == ["params.lr", "0.1", "0.05", "0.01"] and lines[4] == ""
    results = {line.split()[0]: line.split()[1:] for line in lines[6 : lines.index("", 6)]}
    assert results["test_accuracy"] == ["0.62", "0.81", "*", "0.44"]  # (the best of a row marked)
    assert results["images_per_sec"] == ["401", "402", "403", "*"] and results["gpu_hours"] == ["0.0528"] * 3
    curves = lines[lines.index("LOSS BY STEP") + 1 :]
    assert [c.split()[0] for c in curves[:3]] == ["1", "2", "3"] and "2.253 → 0.437" in curves[1]
    assert "VAL_ACCURACY BY EPOCH" in by_epoch and "0.155 → 0.62" in by_epoch

    table = list(csv.reader(io.StringIO((tmp_path / "runs.csv").read_text())))
    assert table[0][:4] == ["id", "name", "status", "params.lr"] and [row[3] for row in table[1:]] == [
        "0.1",
        "0.05",
        "0.01",
    ]
    differs, best = curl.split(" ", 1)
    assert json.loads(differs) == ["params.lr"] and json.loads(best)["test_accuracy"] == 2
