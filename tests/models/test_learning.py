"""Learning is real: on the UCI handwritten digits (8x8 IDX files), models.train matches a plain
model.fit script.

Both runs decay the learning rate to zero by a cosine (the trainer's `cosine` schedule, Keras's CosineDecay), so
the end point is the settled weights and not whichever epoch a noisy constant-rate run stops on; with a constant
rate the test accuracy of either swings by tens of points between the last epochs (see docs/architecture.md).
"""

import os

import pytest

from tests.support import learning
from tests.support.digits import write_digits_idx

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("learning")]  # one process: they share the baselines

EPOCHS, BATCH, LR, SEED = 5, 32, 0.05, 0
PARAMS = {"epochs": EPOCHS, "batch_size": BATCH, "lr": LR, "optimizer": "momentum", "schedule": "cosine", "seed": 0}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return write_digits_idx(tmp_path_factory.mktemp("digits"))


@pytest.fixture(scope="module")
def fit(digits):
    """model.fit's test accuracy for a model, measured once on this machine, on the float path the suite runs on
    (oneDNN's by default; `make test-other` runs TensorFlow without oneDNN's ops, and this module with it: each
    path is judged where it is the machine's, not both in every run, each of them two ResNet-20 trainings)."""
    seen: dict = {}

    def accuracy(model: str) -> float:
        if model not in seen:
            seen[model] = learning.plain(digits, model, EPOCHS, BATCH, LR, SEED, "cosine")["test_accuracy"]
        return seen[model]

    return accuracy


def test_resnet20_reaches_what_a_plain_keras_script_reaches(tmp_path, digits, fit):
    ours = learning.ours(tmp_path, digits, "resnet20", PARAMS)["test_accuracy"]
    path = "without oneDNN" if os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0" else "oneDNN as TensorFlow decides"
    print(f"resnet20 ({path}): models.train {ours:.4f} vs plain model.fit {fit('resnet20'):.4f}")
    assert learning.shortfalls(ours, fit("resnet20")) == []


def test_a_trainer_that_learns_worse_does_not_pass(tmp_path, digits, fit):
    """The same judgement fails a run that learns less than model.fit: one epoch at a hundredth of the rate."""
    weak = learning.ours(tmp_path, digits, "resnet20", {**PARAMS, "epochs": 1, "lr": LR / 100})["test_accuracy"]
    problems = learning.shortfalls(weak, fit("resnet20"))
    assert problems, f"a crippled run ({weak:.4f}) passed the learning check"
