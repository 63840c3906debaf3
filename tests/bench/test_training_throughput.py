"""Benchmarks (not run by `make test`): trainer throughput against baselines measured in the same run.

Run: make bench PYTEST_ARGS="-k throughput"
1. resnet20 images/s through models.train vs a plain model.fit script (same model, batch size, data). Target >= 0.97x.
2. images/s with the on-disk CIFAR pipeline plus augmentation vs in-memory tensors. Target >= 0.95x.
Each side interleaved with the other over GPUDECK_BENCH_PAIRS (5) pairs; the median ratio and its min-max.
Each run trains 120 steps of 128 images (about 50 s with TensorFlow's start on 2 cores): the first benchmark takes
about 9 minutes, the second about 12; both within the benchmarks' own budget (tests/bench/conftest.py), not
pytest's 300 s.
"""

import json
import subprocess
import sys

from jobs.run.proc import python_module
from tests.support import formats, ratio

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
    runs = iter(range(10**6))
    samples = ratio.interleave(lambda: plain("synthetic"), lambda: ours(tmp_path, f"t{next(runs)}", "synthetic"))
    print(f"\nresnet20 b{BATCH} images/s, models.train vs plain model.fit: {ratio.summary(samples)}")


def test_throughput_on_disk_pipeline_vs_in_memory(tmp_path):
    train, test = formats.images(10_000), formats.images(1_000, seed=1)
    cifar = formats.cifar_binary(tmp_path / "cifar", train, test, tar=True)
    tfrec = formats.estimator_tfrecords(tmp_path / "tfrecords", train, test)
    runs = iter(range(10**6))

    def run(dataset: str, **params) -> float:
        return ours(tmp_path, f"r{next(runs)}", dataset, **params)

    disk = ratio.interleave(lambda: run("synthetic"), lambda: run(str(cifar), augment="crop_flip"))
    rec = ratio.interleave(lambda: run("synthetic"), lambda: run(str(tfrec), augment="crop_flip"))
    print(f"\nCIFAR binary .tar.gz + crop_flip vs in-memory tensors: {ratio.summary(disk)}")
    print(f"estimator TFRecords + crop_flip vs in-memory tensors: {ratio.summary(rec)}")
