"""A real worker process runs real (tiny) training jobs submitted through the API."""

import json
from pathlib import Path

import pytest

from tests.support.live import wait_job

pytestmark = pytest.mark.slow

SPEC = {"model": "resnet20", "dataset": "synthetic:16x16x3", "params": {"steps": 8, "batch_size": 16, "log_every": 2}}


def test_job_goes_queued_to_succeeded_with_logs_metrics_and_job_dir(client, worker, settings):
    job_id = client.post("/api/v1/jobs", json=SPEC).json["id"]
    job, seen = wait_job(client, job_id)
    assert job["status"] == "succeeded", (job, worker.output()[-3000:])
    assert seen[0] == "queued" and seen[-1] == "succeeded"
    assert "running" in seen
    assert job["progress"]["step"] == job["progress"]["total_steps"] == 8 and job["progress"]["fraction"] == 1
    assert job["metrics"]["step"] == 8 and job["metrics"]["loss"] > 0
    assert set(job["result"]) >= {"test_accuracy", "test_top5", "test_loss", "steps", "epochs", "images_per_sec"}
    assert job["worker"].endswith(".cpu." + str(worker.proc.pid)) and job["gpu_ids"] == []
    # The worker itself never loaded TensorFlow: only the trainer process did, and it is gone.
    maps = Path(f"/proc/{worker.proc.pid}/maps").read_text()
    assert "tensorflow" not in maps and "libtensorflow" not in maps
    assert job["elapsed_s"] > 0 and job["eta_s"] == 0

    metrics = client.get(f"/api/v1/jobs/{job_id}/metrics").json
    assert [p["step"] for p in metrics["train"]] == [2, 4, 6, 8]  # one point per logged step
    assert metrics["validation"] and "val_accuracy" in metrics["validation"][-1]
    csv = client.get(f"/api/v1/jobs/{job_id}/metrics?format=csv").text.splitlines()
    assert csv[0].startswith("step,epoch,loss") and len(csv) == 1 + 4 + len(metrics["validation"])

    logs = client.get(f"/api/v1/jobs/{job_id}/logs")
    assert "train step 8" in logs.text and "CUDA_VISIBLE_DEVICES=" in logs.text
    total = int(logs.headers["X-Next-Offset"])
    assert total == len(logs.text.splitlines())
    # Resuming from an offset gives the rest, with no gap and no duplicate.
    head = client.get(f"/api/v1/jobs/{job_id}/logs?offset=3")
    assert head.text.splitlines() == logs.text.splitlines()[3:]
    assert client.get(f"/api/v1/jobs/{job_id}/logs?offset={total}").text == ""

    job_dir = settings.job_dir(job_id)
    assert json.loads((job_dir / "spec.json").read_text())["model"] == "resnet20"
    assert (job_dir / "log.txt").read_text().splitlines() == logs.text.splitlines()
    assert len((job_dir / "metrics.jsonl").read_text().splitlines()) == len(metrics["train"]) + len(
        metrics["validation"]
    )
    assert list((job_dir / "tensorboard").rglob("events.out.tfevents.*"))
    assert (job_dir / "result.json").exists() and (job_dir / "model.keras").exists()
