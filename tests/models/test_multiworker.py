"""The trainer under MultiWorkerMirroredStrategy from TF_CONFIG: two local tasks train one model together."""

import json
import os
import re
import subprocess

import pytest

from jobs.proc import python_module
from jobs.redis_server import free_port

pytestmark = pytest.mark.slow


def test_two_tasks_share_one_loss_trajectory(tmp_path):
    spec = {
        "model": "resnet20",
        "dataset": "synthetic:8x8x3:4",
        "params": {"steps": 6, "batch_size": 16, "log_every": 2, "seed": 3},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    cluster = {"worker": [f"localhost:{free_port()}", f"localhost:{free_port()}"]}
    procs = []
    for index in range(2):
        env = {
            **os.environ,
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
            "CUDA_VISIBLE_DEVICES": "",
        }
        procs.append(
            subprocess.Popen(
                python_module(
                    "models.train", "--spec", str(tmp_path / "spec.json"), "--job-dir", str(tmp_path / "job")
                ),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[1][-3000:] + outs[0][-3000:]
    assert "strategy=CollectiveAllReduceStrategy replicas=2 task=worker0" in outs[0]  # MultiWorkerMirrored
    assert "task=worker1" in outs[1]
    losses = [re.findall(r"train step (\d+) .*? loss ([\d.e+-]+)", out) for out in outs]
    assert [s for s, _ in losses[0]] == ["2", "4", "6"]
    assert losses[0] == losses[1]  # gradients and metrics are all-reduced: one trajectory
    # Worker 0 is the chief: it alone writes the job's metrics, result and model.
    points = [json.loads(line) for line in (tmp_path / "job" / "metrics.jsonl").read_text().splitlines()]
    assert [p["step"] for p in points if "loss" in p] == [2, 4, 6]
    assert json.loads((tmp_path / "job" / "result.json").read_text())["steps"] == 6
