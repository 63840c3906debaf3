"""Schedules, recipes, augmentation and the training switches (mixed precision, XLA, accumulation, remat)."""

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from jobs.run.proc import python_module
from models import params
from models.datasets import load


@pytest.mark.xdist_group("tensorflow")
def test_piecewise_divides_by_ten_at_the_fractions():
    from models.schedules import Schedule  # (TensorFlow: imported by the tests that use it)

    s = Schedule(0.1, "piecewise", 100, 10, [0.5, 0.75])
    assert [round(s.value(x), 6) for x in (0, 49, 50, 74, 75, 99)] == [0.1, 0.1, 0.01, 0.01, 0.001, 0.001]


@pytest.mark.xdist_group("tensorflow")
def test_exponential_is_slims_staircase():
    from models.schedules import Schedule  # (TensorFlow: imported by the tests that use it)

    s = Schedule(0.01, "exponential", 1000, 10, decay_rate=0.94, decay_epochs=2.0)
    assert s.value(19) == pytest.approx(0.01) and s.value(20) == pytest.approx(0.0094)
    assert s.value(45) == pytest.approx(0.01 * 0.94**2)


@pytest.mark.xdist_group("tensorflow")
def test_cosine_with_warmup():
    from models.schedules import Schedule  # (TensorFlow: imported by the tests that use it)

    s = Schedule(1.0, "cosine", 110, 10, warmup_steps=10)
    assert s.value(0) == pytest.approx(0.1) and s.value(9) == pytest.approx(1.0)
    assert s.value(60) == pytest.approx(0.5, abs=1e-6) and s.value(110) == pytest.approx(0.0, abs=1e-6)


def test_recipes_fill_in_and_explicit_params_win():
    p = params.resolve({"recipe": "slim", "lr": 0.5})
    assert (p["optimizer"], p["lr"], p["label_smoothing"], p["moving_average"]) == ("rmsprop", 0.5, 0.1, 0.9999)
    p = params.resolve({"recipe": "resnet-paper"})
    assert (p["weight_decay"], p["boundaries"], p["augment"]) == (1e-4, [0.5, 0.75], "crop_flip")
    assert params.resolve({"recipe": "cifar10-estimator"})["weight_decay"] == 2e-4


def test_augment_names_and_combinations():
    assert params.parse_augment("standard") == ("crop", "flip", "standardize")
    assert params.parse_augment("crop_flip+color") == ("crop", "flip", "color")
    with pytest.raises(ValueError, match="unknown augment 'blur'"):
        params.parse_augment("flip+blur")


@pytest.mark.xdist_group("tensorflow")
def test_augmentation_keeps_shapes_and_standardizes():
    import tensorflow as tf

    from models.pipeline import Preprocess

    src = load("synthetic:16x16x3")
    batch = tf.constant(src.train.x[:8])
    pre = Preprocess(src, params.parse_augment("standard+color"), (16, 16, 3), seed=1)
    x, y = pre.augment(batch, tf.range(8))
    assert x.shape == (8, 16, 16, 3) and float(tf.reduce_min(x)) >= 0 and float(tf.reduce_max(x)) <= 1
    z, _ = pre.train_batch(batch, y)
    assert z.shape == (8, 16, 16, 3) and np.allclose(tf.reduce_mean(z, axis=[1, 2, 3]), 0, atol=1e-4)


@pytest.mark.xdist_group("tensorflow")
def test_crop_and_flip_move_whole_pixels():
    import tensorflow as tf

    from models.pipeline import Preprocess

    src = load("synthetic:16x16x3")
    batch = tf.constant(src.train.x[:64])
    pre = Preprocess(src, params.parse_augment("crop_flip"), (16, 16, 3), seed=2)
    out = pre.augment(batch, tf.range(64))[0].numpy()
    orig = src.train.x[:64] / 255.0
    changed = [not np.allclose(o, i, atol=1e-5) for o, i in zip(out, orig)]
    assert sum(changed) > 48  # an image stays put only for offset (2, 2) without a flip: 1 in 50
    # every output pixel is an input pixel value or the zero padding: a crop, not a blur
    for o, i in zip(out, orig):
        values = set(np.round(i.ravel() * 255).astype(int)) | {0}
        assert set(np.round(o.ravel() * 255).astype(int)) <= values


def _run(tmp_path, spec, job="job", wait=True):
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    argv = python_module("models.train", "--spec", str(tmp_path / "spec.json"), "--job-dir", str(tmp_path / job))
    if not wait:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_every_switch_at_once_trains(tmp_path):
    """The switches wrap any model's step alike; LeNet keeps XLA's compile of it to seconds."""
    spec = {
        "model": "lenet",
        "dataset": "synthetic:16x16x3:4",
        "params": {
            "steps": 4,
            "batch_size": 8,
            "recipe": "slim",
            "augment": "standard+color",
            "mixed_precision": True,
            "xla": True,
            "grad_accum": 2,
            "remat": True,
            "schedule": "cosine",
            "warmup_epochs": 0.01,
        },
    }
    run = _run(tmp_path, spec)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "moving average of the weights" in run.stdout
    result = json.loads((tmp_path / "job" / "result.json").read_text())
    assert result["steps"] == 4 and np.isfinite(result["test_loss"])


@pytest.mark.slow
def test_small_images_are_resized_to_the_nets_minimum_and_the_log_says_so(tmp_path):
    run = _run(tmp_path, {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2, "batch_size": 8}})
    assert run.returncode == 0, run.stdout[-3000:]
    assert "resizing 8x8 images to 28x28: lenet takes at least 28x28" in run.stdout
    assert "input 28x28x1" in run.stdout


@pytest.mark.slow
def test_sigterm_checkpoints_and_a_rerun_resumes(tmp_path):
    spec = {
        "model": "resnet20",
        "dataset": "synthetic:16x16x3",
        "params": {"steps": 100000, "batch_size": 16, "log_every": 5},
    }
    proc = _run(tmp_path, spec, wait=False)
    metrics = tmp_path / "job" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out[-2000:]
    stopped = int(out.split("stopped at step ")[1].split(";")[0])
    assert (tmp_path / "job" / "checkpoints" / f"ckpt-{stopped}.index").exists()
    spec["params"]["steps"] = stopped + 5
    run = _run(tmp_path, spec)
    assert run.returncode == 0 and f"at step {stopped}" in run.stdout
    points = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [p["step"] for p in points if "loss" in p]
    assert steps[-1] == stopped + 5 and steps == sorted(steps)


@pytest.mark.slow
def test_old_checkpoints_are_pruned_as_the_job_trains(tmp_path):
    """GPUDECK_KEEP_CHECKPOINTS=2: of the checkpoints saved as the job trains (every 2 steps here, and at the end),
    the newest two stay. (Steps of 8 images: saving at each epoch's validation instead took epochs of 512-image
    steps, ~6 CPU-s more for the same check.)"""
    spec = {
        "model": "lenet",
        "dataset": "synthetic:8x8x1:4",
        "checkpoint_every": 2,
        "params": {"steps": 10, "batch_size": 8},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    argv = python_module("models.train", "--spec", str(tmp_path / "spec.json"), "--job-dir", str(tmp_path / "job"))
    run = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, env={**os.environ, "GPUDECK_KEEP_CHECKPOINTS": "2"}
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    kept = sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "job" / "checkpoints").glob("ckpt-*.index"))
    assert kept == [8, 10]  # (saved at 2, 4, 6, 8 and 10)
