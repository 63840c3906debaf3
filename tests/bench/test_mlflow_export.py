"""Benchmark (issue 46 §2): exporting a job to MLflow, per 10,000 metric points. Not run by `make test`.

Run: make bench PYTEST_ARGS="-k mlflow_export -s"
A job of GPUDECK_EXPORT_BENCH_POINTS (10,000) points of three metrics each, exported by jobs.export (read from
Redis, params, tags, 1,000 points a batch, the model and result files) into a fresh MLflow file store, against
the baseline of the same points logged by mlflow's own client straight from memory (log_batch of 1,000), five
rounds interleaved; the median of each and their ratio. Then a second export of the same job (nothing new: the
run's history is read to skip what it has).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace

from mlflow import MlflowClient
from mlflow.entities import Metric

from jobs import export
from jobs.store import JobStore
from tests.support.runs import T0, ran

POINTS = int(os.environ.get("GPUDECK_EXPORT_BENCH_POINTS", "10000"))


def test_mlflow_export_per_10000_points(redis, settings, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    points = [
        {"step": s, "time": T0 + s * 0.1, "loss": 1 / s, "accuracy": s / POINTS, "lr": 0.1}
        for s in range(1, POINTS + 1)
    ]
    ours, theirs, again = [], [], []
    for n in range(5):
        job_id = n + 1
        JobStore(redis).create(
            job_id, {"model": "lenet", "dataset": "synthetic", "gpus": 0, "export": ["mlflow"]}, "gpus-0"
        )
        ran(redis, job_id, points, [], {"status": "succeeded", "result": {"test_accuracy": 0.9}})
        s = replace(settings, mlflow_uri=f"file://{tmp_path / f'ours{n}'}")
        export.enqueue(redis, JobStore(redis).get(job_id))
        t = time.perf_counter()
        assert export.deliver(redis, s) == 1
        ours.append(time.perf_counter() - t)
        assert JobStore(redis).get(job_id)["export"]["mlflow"]["points"] == 3 * POINTS
        export.enqueue(redis, JobStore(redis).get(job_id), asked=True)
        t = time.perf_counter()
        export.deliver(redis, s)
        again.append(time.perf_counter() - t)

        client = MlflowClient(tracking_uri=f"file://{tmp_path / f'theirs{n}'}")
        t = time.perf_counter()
        run = client.create_run(client.create_experiment("plain"))
        metrics = [
            Metric(k, float(p[k]), int(p["time"] * 1000), p["step"]) for p in points for k in ("loss", "accuracy", "lr")
        ]
        for i in range(0, len(metrics), 1000):
            client.log_batch(run.info.run_id, metrics=metrics[i : i + 1000])
        client.set_terminated(run.info.run_id)
        theirs.append(time.perf_counter() - t)
    per = 10_000 / POINTS
    o, b, a = (statistics.median(x) * per for x in (ours, theirs, again))
    print(
        f"\nMLflow file store, per 10,000 points (3 metrics each), median of 5: gpudeck export {o:.2f} s, "
        f"mlflow's own log_batch {b:.2f} s (ratio {o / b:.2f}); exported again (nothing new) {a:.2f} s"
    )
