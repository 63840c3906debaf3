"""lenet's defaults on the synthetic set over several seeds (issue 25 #14): a user's first run,
`gpudeck submit --model lenet --dataset synthetic`, learns whatever the seed. `make test` trains seed 3
(tests/tui/test_cli.py); this trains seeds 0..N-1 with models.train directly.

    make bench PYTEST_ARGS="-k lenet_defaults"   (GPUDECK_BENCH_SEEDS=5)
"""

from __future__ import annotations

import json
import os
import subprocess

from jobs.run.proc import python_module

SEEDS = range(int(os.environ.get("GPUDECK_BENCH_SEEDS", "5")))


def test_lenet_defaults(tmp_path):
    accuracies = {}
    for seed in SEEDS:
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        (run / "spec.json").write_text(json.dumps({"model": "lenet", "dataset": "synthetic", "params": {"seed": seed}}))
        subprocess.run(
            python_module("models.train", "--spec", str(run / "spec.json"), "--job-dir", str(run / "job")),
            check=True,
            capture_output=True,
            timeout=900,
        )
        accuracies[seed] = json.loads((run / "job" / "result.json").read_text())["test_accuracy"]
        print(f"seed {seed}: test accuracy {accuracies[seed]:.4f}")
    assert all(a >= 0.8 for a in accuracies.values()), accuracies
