"""`python -m models.train` on its own: the job dir it writes, bad input."""

import json
import os
import subprocess

import pytest

from jobs.run.proc import python_module
from models.protocol import EXIT_DIVERGED

pytestmark = pytest.mark.slow


def train(tmp_path, spec, job_dir, env=None):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    return subprocess.run(
        python_module("models.train", "--spec", str(spec_file), "--job-dir", str(job_dir)),
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


def points(job_dir):
    return [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_writes_the_job_dir(tmp_path):
    """(Resuming in the same job dir: test_training_options.py, after a SIGTERM.)"""
    job_dir = tmp_path / "job"
    spec = {
        "model": "resnet20",
        "dataset": "synthetic:16x16x3:4",
        "params": {"steps": 6, "batch_size": 16, "log_every": 2, "seed": 1},
    }
    temp = tmp_path / "tmp"  # (the trainer's temp dir, outside a sandbox the host's /tmp)
    temp.mkdir()
    run = train(tmp_path, spec, job_dir, env={**os.environ, "TMPDIR": str(temp)})
    assert run.returncode == 0, run.stdout[-3000:]
    assert list(temp.glob("*.py")) == []  # (no AutoGraph module left: none written for the steps, any other deleted)
    train_points = [p for p in points(job_dir) if "loss" in p]
    assert [p["step"] for p in train_points] == [2, 4, 6]
    assert set(train_points[0]) >= {"step", "epoch", "loss", "accuracy", "lr", "images_per_sec"}
    assert any("val_loss" in p and "val_accuracy" in p for p in points(job_dir))
    result = json.loads((job_dir / "result.json").read_text())
    assert set(result) == {
        *("test_accuracy", "test_top5", "test_loss", "steps", "epochs", "images_per_sec", "duration_s", "gpus_seen")
    }
    assert result["gpus_seen"] == 0  # (no GPU here)
    assert result["steps"] == 6 and 0 <= result["test_accuracy"] <= result["test_top5"] <= 1
    assert (job_dir / "model.keras").stat().st_size > 0
    assert list((job_dir / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert list((job_dir / "tensorboard" / "validation").glob("events.out.tfevents.*"))
    assert "resnet20: 271,098 parameters" not in run.stdout  # 4 classes, not 10
    assert "resnet20: 270,708 parameters" in run.stdout


def test_bad_input_exits_2_and_says_why(tmp_path):
    run = train(
        tmp_path,
        {"model": "resnet20", "dataset": "synthetic", "params": {"batch_size": 4096, "steps": 1}},
        tmp_path / "j",
    )
    assert run.returncode == 2
    assert "batch_size 4096 is larger than the training set (2048 images)" in run.stdout
    run = train(tmp_path, {"model": "nope", "dataset": "synthetic"}, tmp_path / "j2")
    assert run.returncode == 2 and "bad spec: model" in run.stdout
    missing = tmp_path / "missing"
    run = train(tmp_path, {"model": "lenet", "dataset": str(missing)}, tmp_path / "j3")
    assert run.returncode == 2 and f"bad input: {missing}: no such file or directory" in run.stdout
    assert "devices:" not in run.stdout  # (said before TensorFlow's import, which logs the devices it finds)


def test_a_short_resnet_run_is_evaluated_with_settled_batch_norm_statistics(tmp_path):
    """Issue 16 #4: fifty steps of resnet20 on the synthetic set learn it, and the test loss says so. With Keras's
    BN momentum of 0.99 the moving statistics still lagged the weights after 50 steps: test loss 187, accuracy 0.10
    (chance), while the training batches were at 0.9."""
    job_dir = tmp_path / "job"
    spec = {"model": "resnet20", "dataset": "synthetic:8x8x3", "params": {"steps": 50, "batch_size": 32, "seed": 1}}
    run = train(tmp_path, spec, job_dir)
    assert run.returncode == 0, run.stdout[-3000:]
    result = json.loads((job_dir / "result.json").read_text())
    assert result["test_accuracy"] >= 0.8 and result["test_loss"] < 1.0, result


def test_given_neither_epochs_nor_steps_a_run_trains_one_epoch_of_at_least_200_steps():
    from models import params

    resolved = params.resolve({})
    assert params.total_steps({}, resolved, steps_per_epoch=16) == 200  # the synthetic set at batch 128
    assert params.total_steps({}, resolved, steps_per_epoch=390) == 390  # CIFAR-10: one epoch
    assert params.total_steps({"epochs": 1}, params.resolve({"epochs": 1}), steps_per_epoch=16) == 16  # as asked
    assert params.total_steps({"steps": 7}, params.resolve({"steps": 7}), steps_per_epoch=16) == 7


def test_lenet_at_lr_100_never_passes_silently_whatever_the_seed(tmp_path):
    """Issue 42 #2: plain SGD at the API's largest lr explodes before the first logged point. Whatever the seed (and
    the CPU's float path), the run either fails as diverged (a NaN: exit 3) or succeeds with a warning in its result;
    it never ends as a plain success."""
    for seed in (1, 2, 3):
        job_dir = tmp_path / f"seed{seed}"
        params = {"steps": 40, "batch_size": 16, "log_every": 10, "seed": seed, "optimizer": "sgd", "lr": 100}
        run = train(tmp_path, {"model": "lenet", "dataset": "synthetic:28x28x1", "params": params}, job_dir)
        if run.returncode == EXIT_DIVERGED:  # (its log says where: "the training loss became nan at step N")
            assert "became nan" in run.stdout, run.stdout[-3000:]
            continue
        assert run.returncode == 0, run.stdout[-3000:]
        result = json.loads((job_dir / "result.json").read_text())
        assert "training diverged without reaching NaN" in result.get("warning", ""), (seed, result)
