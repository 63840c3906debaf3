"""models.train vs a plain model.fit script over several seeds: test accuracy on the digits, with a constant
learning rate (the old learning check) and with a cosine decay to zero (the current one), oneDNN on and off.

make bench PYTEST_ARGS="-k learning_seeds"   (GPUDECK_BENCH_SEEDS=5 by default; about 15 s a run here)
"""

import os
import statistics

import pytest

from tests.support import learning
from tests.support.digits import write_digits_idx

EPOCHS, BATCH, LR = 5, 32, 0.05
SEEDS = range(int(os.environ.get("GPUDECK_BENCH_SEEDS", "5")))


def spread(values: list[float]) -> str:
    return f"mean {statistics.mean(values):.4f} min {min(values):.4f} max {max(values):.4f}"


@pytest.mark.timeout(3600)
@pytest.mark.parametrize(
    "schedule, onednn",
    [("constant", None), ("cosine", True), ("cosine", False)],
    ids=["constant", "cosine-onednn", "cosine-no-onednn"],
)
def test_learning_seeds(tmp_path, schedule, onednn):
    digits = write_digits_idx(tmp_path / "digits")
    ours, fit = [], []
    for seed in SEEDS:  # interleaved, so a slow stretch of the machine hits both sides
        params = {"epochs": EPOCHS, "batch_size": BATCH, "lr": LR, "optimizer": "momentum", "schedule": schedule}
        result = learning.ours(tmp_path / f"ours-{seed}", digits, "resnet20", {**params, "seed": seed}, onednn)
        ours.append(result["test_accuracy"])
        fit.append(learning.plain(digits, "resnet20", EPOCHS, BATCH, LR, seed, schedule, onednn)["test_accuracy"])
        print(f"{schedule} oneDNN={onednn} seed {seed}: models.train {ours[-1]:.4f}  model.fit {fit[-1]:.4f}")
    passed = sum(not learning.shortfalls(o, f) for o, f in zip(ours, fit))
    print(
        f"\n{schedule} oneDNN={onednn} over {len(ours)} seeds: models.train {spread(ours)}; model.fit {spread(fit)}; "
        f"learning check passed {passed}/{len(ours)}"
    )
