"""Train the same model on the same digits two ways (models.train, and a plain model.fit script) and judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jobs.run.proc import python_module

FLOOR = 0.90
"""Test accuracy either way must reach on the digits (chance is 0.10)."""
MARGIN = 0.04
"""How far below model.fit models.train may end. Each accuracy is measured on 360 test digits, so at ~0.97 it
carries a binomial noise of ~0.009, and the difference of two runs ~0.013: 0.04 is three of those (a false alarm
about once in a thousand runs). `make bench PYTEST_ARGS="-k learning_seeds"` measured the difference over 5
seeds at -0.017..+0.011 (mean -0.003); a smaller gap than the margin is for that benchmark to find."""


def env(onednn: bool | None) -> dict[str, str]:
    """The environment of a training run; `onednn` sets TF_ENABLE_ONEDNN_OPTS (None: as the suite runs, which
    `make test-other` sets to 0)."""
    out = dict(os.environ)
    if onednn is not None:
        out["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn else "0"
    return out


def ours(tmp: Path, digits: Path, model: str, params: dict, onednn: bool | None = None) -> dict:
    """models.train on the digits: its result.json."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "spec.json").write_text(json.dumps({"model": model, "dataset": str(digits), "params": params}))
    run = subprocess.run(
        python_module("models.train", "--spec", str(tmp / "spec.json"), "--job-dir", str(tmp / "job")),
        capture_output=True,
        text=True,
        timeout=600,
        env=env(onednn),
    )
    assert run.returncode == 0, run.stdout[-3000:]
    return json.loads((tmp / "job" / "result.json").read_text())


def plain(digits: Path, model: str, epochs: int, batch: int, lr: float, seed: int, schedule: str, onednn=None) -> dict:
    """tests/support/plain_keras.py: model.fit with SGD momentum 0.9 and the same schedule."""
    argv = [str(digits), model, str(epochs), str(batch), str(lr), str(seed), schedule]
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.plain_keras", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env=env(onednn),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def shortfalls(ours_acc: float, fit_acc: float) -> list[str]:
    """What keeps models.train from counting as learning as well as model.fit (empty: it does)."""
    out = []
    if ours_acc < FLOOR:
        out.append(f"models.train reached {ours_acc:.4f}, below the floor {FLOOR}")
    if ours_acc < fit_acc - MARGIN:
        out.append(f"models.train reached {ours_acc:.4f}, more than {MARGIN} below model.fit's {fit_acc:.4f}")
    return out
