"""Benchmarks of command jobs (not run by `make test`; `make bench PYTEST_ARGS="-k command"`):

- the event-file reader's cost on a script's training throughput: the same Keras script (TensorBoard callback
  writing every 5 batches) alone, and with a ScalarReader polling its job dir every second from another
  process, as the work-horse does; interleaved pairs, median ratio (target: reader on >= 0.98 of off);
- `gpudeck run` of a folder of 2,000 files / 50 MB to the script's first line of output, and the same again
  (the server holds the tree: no upload), against a `--no-source` job's own start-up (target: the second run
  at most 1 s above that);
- GET /api/v1/jobs/ID/metrics of a job with 100,000 points, p50/p95 over 50 reads (target: p95 <= 50 ms).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import requests

from jobs.keys import metrics_key
from jobs.scalars import ScalarReader
from jobs.store import JobStore
from tests.support import ratio
from tests.support.stack import Up

SCRIPTS = Path(__file__).parents[1] / "support" / "scripts"

THROUGHPUT = r"""
import json, os, sys, time
import numpy as np, keras
x = np.random.default_rng(0).random((4096, 32, 32, 3), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 4096)
i = keras.Input((32, 32, 3))
h = keras.layers.Conv2D(32, 3, activation="relu")(i)
h = keras.layers.Conv2D(32, 3, activation="relu")(h)
o = keras.layers.Dense(10, activation="softmax")(keras.layers.GlobalAveragePooling2D()(h))
m = keras.Model(i, o)
m.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
m.fit(x[:256], y[:256], epochs=1, batch_size=64, verbose=0)  # warm up
t0 = time.perf_counter()
m.fit(x, y, epochs=3, batch_size=64, verbose=0,
      callbacks=[keras.callbacks.TensorBoard(os.path.join(sys.argv[1], "tensorboard"), update_freq=5)])
print(json.dumps({"images_per_sec": 3 * len(x) / (time.perf_counter() - t0)}))
"""


def _train(job_dir: Path, reader_on: bool) -> float:
    shutil.rmtree(job_dir, ignore_errors=True)
    job_dir.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", THROUGHPUT, str(job_dir)], stdout=subprocess.PIPE, text=True)
    points, cpu, t0 = 0, 0.0, time.perf_counter()
    if reader_on:
        reader = ScalarReader(job_dir)
        while proc.poll() is None:
            c0 = time.process_time()
            points += len(reader.poll())
            cpu += time.process_time() - c0
            time.sleep(1.0)
        points += len(reader.poll())
        assert points > 20, points  # it did read the curve (a batch point every 5 batches)
        READER_CPU.append((cpu, time.perf_counter() - t0, points))
    out, _ = proc.communicate()
    return json.loads(out.strip().splitlines()[-1])["images_per_sec"]


READER_CPU: list[tuple[float, float, int]] = []
"""(reader CPU seconds, run seconds, points) of each run with the reader on."""


def test_command_reader_cost_on_training_throughput(tmp_path):
    samples = ratio.interleave(lambda: _train(tmp_path / "off", False), lambda: _train(tmp_path / "on", True))
    print("\nevent-file reader on/off, images/s:", ratio.summary(samples, "on/off"))
    share = [c / w for c, w, _ in READER_CPU]
    print(
        f"reader CPU per run: {', '.join(f'{c * 1000:.0f} ms for {p} points in {w:.1f} s' for c, w, p in READER_CPU)}"
        f" = {100 * statistics.median(share):.2f} % of one core (median)"
    )
    assert statistics.median(o / b for b, o in samples) > 0.9  # the target is 0.98; this only catches a collapse


def _first_line(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Seconds from starting `cmd` to its first line on stdout (the script's), then it is left to finish."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    took = time.perf_counter() - t0
    assert "first line" in line, line
    proc.communicate(timeout=120)
    return took


def test_command_gpudeck_run_of_a_big_folder_and_again(tmp_path, child_env):
    project = tmp_path / "project"
    rng = os.urandom
    for i in range(2000):
        folder = project / f"pkg{i % 40}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"m{i}.py").write_bytes(rng(25_000))  # 2,000 files, 50 MB, not compressible
    (project / "hello.py").write_text("print('first line', flush=True)\n")
    env = {
        **child_env,
        "GPUDECK_COMMAND_JOBS": "1",
        "PATH": f"{Path(sys.executable).parent}:{child_env['PATH']}",
    }
    stack = Up(tmp_path / "home", env, tmp_path / "up.log")
    env["GPUDECK_API"] = stack.url
    try:
        run = ["gpudeck", "run", "--", "python", "hello.py"]
        no_source = ["gpudeck", "run", "--no-source", "--", "python", "-c", "'print(\"first line\", flush=True)'"]
        first = _first_line(run, project, env)
        again = [_first_line(run, project, env) for _ in range(3)]
        bare = [_first_line(no_source, project, env) for _ in range(3)]
        print(
            f"\ngpudeck run, 2,000 files / 50 MB: first {first:.2f} s (upload); again "
            f"{', '.join(f'{t:.2f}' for t in again)} s; a --no-source job {', '.join(f'{t:.2f}' for t in bare)} s; "
            f"again minus --no-source (medians): {statistics.median(again) - statistics.median(bare):.2f} s"
        )
        assert statistics.median(again) < first
    finally:
        stack.kill()


def test_command_metrics_read_of_100000_points(tmp_path, child_env, redis, spawn):
    from tests.support.live import start_api

    api = start_api(spawn, child_env)
    job_id = requests.post(f"{api}/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic"}, timeout=10).json()[
        "id"
    ]
    store = JobStore(redis)
    n = 100_000
    for start in range(0, n, 10_000):
        with redis.pipeline(transaction=False) as pipe:
            for i in range(start + 1, start + 10_001):
                point = {"step": i, "loss": 1.0 / i, "accuracy": i / n, "custom/scalar": 0.5}
                if i % 100 == 0:
                    point = {"step": i, "val_loss": 1.0 / i, "val_accuracy": i / n}
                store.append_point(job_id, i, point, pipe)
            pipe.execute()
    assert redis.xlen(metrics_key(job_id)) >= n * 0.99
    session = requests.Session()
    url = f"{api}/api/v1/jobs/{job_id}/metrics"
    cold = time.perf_counter()
    body = session.get(url, timeout=60).json()
    cold = (time.perf_counter() - cold) * 1000
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        resp = session.get(url, timeout=60)
        times.append((time.perf_counter() - t0) * 1000)
        assert resp.status_code == 200
    times.sort()
    print(
        f"\nGET metrics of {len(body['train']) + len(body['validation'])} points ({len(resp.content) >> 20} MiB): "
        f"first read {cold:.0f} ms, then p50 {times[24]:.1f} ms, p95 {times[47]:.1f} ms"
    )
    assert len(body["validation"]) == n // 100
