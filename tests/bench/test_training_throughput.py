"""Benchmarks (not run by `make test`): trainer throughput against baselines measured in the same run.

Run: make bench PYTEST_ARGS="-k throughput"
1. resnet20 images/s through models.train vs a plain model.fit script (same model, batch size, data). Target >= 0.97x.
2. images/s with the on-disk CIFAR pipeline plus augmentation vs in-memory tensors. Target >= 0.95x.
"""

import json
import subprocess
import sys

import numpy as np

from jobs.proc import python_module
from tests.support import formats

STEPS, BATCH, WARMUP = 120, 128, 10


def ours(tmp_path, name, dataset, **params):
    spec = {
        "model": "resnet20",
        "dataset": dataset,
        "params": {"steps": STEPS, "batch_size": BATCH, "log_every": WARMUP, "seed": 0, **params},
    }
    (tmp_path / f"{name}.json").write_text(json.dumps(spec))
    run = subprocess.run(
        python_module("models.train", "--spec", str(tmp_path / f"{name}.json"), "--job-dir", str(tmp_path / name)),
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:]
    # result.json's images_per_sec leaves out the first log window (tracing) and the evaluations
    return json.loads((tmp_path / name / "result.json").read_text())["images_per_sec"]


def plain(dataset):
    run = subprocess.run(
        [sys.executable, "-m", "tests.bench.plain_fit", "resnet20", dataset, str(STEPS), str(BATCH), str(WARMUP)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])["images_per_sec"]


def test_throughput_vs_model_fit(tmp_path):
    a = [plain("synthetic"), ours(tmp_path, "t1", "synthetic"), plain("synthetic"), ours(tmp_path, "t2", "synthetic")]
    base, mine = np.mean(a[0::2]), np.mean(a[1::2])
    print(
        f"\nresnet20 b{BATCH}: plain model.fit {base:.1f} img/s, models.train {mine:.1f} img/s, "
        f"ratio {mine / base:.3f} (runs {a})"
    )


def test_throughput_on_disk_pipeline_vs_in_memory(tmp_path):
    train, test = formats.images(10_000), formats.images(1_000, seed=1)
    cifar = formats.cifar_binary(tmp_path / "cifar", train, test, tar=True)
    tfrec = formats.estimator_tfrecords(tmp_path / "tfrecords", train, test)
    mem = ours(tmp_path, "mem", "synthetic")
    disk = ours(tmp_path, "disk", str(cifar), augment="crop_flip")
    rec = ours(tmp_path, "rec", str(tfrec), augment="crop_flip")
    mem2 = ours(tmp_path, "mem2", "synthetic")
    base = (mem + mem2) / 2
    print(
        f"\nin-memory {base:.1f} img/s; CIFAR binary .tar.gz + crop_flip {disk:.1f} ({disk / base:.3f}x); "
        f"estimator TFRecords + crop_flip {rec:.1f} ({rec / base:.3f}x)"
    )
