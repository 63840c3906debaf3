"""Learning is real: on digits shipped inside scikit-learn, models.train matches a plain Keras script."""

import json
import subprocess
import sys

import pytest

from jobs.proc import python_module
from tests.models.digits import write_digits_cifar

pytestmark = pytest.mark.slow

EPOCHS, BATCH, LR = 7, 32, 0.05  # 7 x 44 = 308 steps


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return write_digits_cifar(tmp_path_factory.mktemp("digits"))


@pytest.mark.parametrize("model", ["resnet20", "lenet"])
def test_reaches_what_a_plain_keras_script_reaches(tmp_path, digits, model):
    spec = {
        "model": model,
        "dataset": str(digits),
        "params": {"epochs": EPOCHS, "batch_size": BATCH, "lr": LR, "optimizer": "momentum", "seed": 0},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    ours = subprocess.run(
        python_module("models.train", "--spec", str(tmp_path / "spec.json"), "--job-dir", str(tmp_path / "job")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ours.returncode == 0, ours.stdout[-3000:]
    result = json.loads((tmp_path / "job" / "result.json").read_text())
    plain = subprocess.run(
        [sys.executable, "-m", "tests.models.plain_keras", str(digits), model, str(EPOCHS), str(BATCH), str(LR)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    baseline = json.loads(plain.stdout.strip().splitlines()[-1])["test_accuracy"]
    print(f"{model}: models.train {result['test_accuracy']:.4f} vs plain model.fit {baseline:.4f}")
    assert result["test_accuracy"] >= 0.90
    assert result["test_accuracy"] >= baseline - 0.02
