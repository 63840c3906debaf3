"""Getting a job's results out over real HTTP (a live API and worker, a real trained model): the listing, a file
with ranges and an ETag, a folder as a streamed .tar.gz that TensorFlow reads back, `gpudeck download`, every path
that would leave the job dir refused; and the job exported to MLflow (issue 46 §2) by the API when it ended (it
asked: `export`), and by the README's commands (a real MLflow file store, read back with mlflow's client)."""

from __future__ import annotations

import http.client
import io
import os
import subprocess
import sys
import tarfile

import pytest
import requests

from jobs.run.proc import python_module
from models.sourcetree import human
from tests.support.live import start_api, submit_job, until, wait_succeeded
from tests.support.readme import run_block

pytestmark = pytest.mark.slow

TINY = {"model": "lenet", "dataset": "synthetic:16x16x3", "params": {"steps": 4, "batch_size": 8}, "gpus": 0}

LOADS = """
import sys, keras, tensorflow as tf
model = keras.models.load_model(sys.argv[1])
print("model", model.count_params())
print("checkpoint", sorted(name for name, _ in tf.train.list_variables(tf.train.latest_checkpoint(sys.argv[2])))[0])
"""
"""Loads the downloaded model and the newest checkpoint of the downloaded folder, as a user would."""


def raw_get(url: str, path: str) -> int:
    """The status of GET `path` sent as written (requests would resolve `..` before sending it)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", path)
    status = conn.getresponse().status
    conn.close()
    return status


def _exported(url: str, job: int, after: float = 0) -> dict | None:
    """The job's export to the operator's MLflow once it was made (after `after`), else None."""
    state = (requests.get(f"{url}/api/v1/jobs/{job}", timeout=30).json().get("export") or {}).get("mlflow") or {}
    assert state.get("status") != "failed", state
    return state if state.get("status") == "exported" and state["at"] > after else None


def test_a_jobs_model_and_checkpoints_come_out_whole_and_nothing_else_does(
    spawn, child_env, settings, tmp_path, monkeypatch
):
    (tmp_path / "readme").mkdir()
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # (this test reads the MLflow file stores back)
    server_mlflow = f"file://{tmp_path / 'server-mlruns'}"  # (the operator's MLflow: a file store here)
    api_env = {**child_env, "GPUDECK_MLFLOW_URI": server_mlflow, "MLFLOW_ALLOW_FILE_STORE": "true"}
    url = start_api(spawn, api_env)
    spawn("worker", "--cpu", env=child_env)
    job = submit_job(url, {**TINY, "export": ["mlflow"]})
    wait_succeeded(url, job)
    exported = until(lambda: _exported(url, job), 60, "the export at the job's end")
    from mlflow import MlflowClient  # (a second of imports: here, not where every test is collected)

    mlflow = MlflowClient(tracking_uri=server_mlflow)
    run = mlflow.get_run(exported["run_id"])
    points = requests.get(f"{url}/api/v1/jobs/{job}/metrics", timeout=30).json()["train"]
    history = mlflow.get_metric_history(run.info.run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(p["step"], p["loss"]) for p in points]
    assert run.info.status == "FINISHED" and run.data.params["model"] == "lenet" and run.data.tags["gpudeck.job"] == "1"
    assert {a.path for a in mlflow.list_artifacts(run.info.run_id)} == {"model.keras", "result.json"}
    job_dir = settings.job_dir(job)
    (job_dir / "leak").symlink_to("/etc")  # a script may leave a symlink pointing out of its dir
    files = f"{url}/api/v1/jobs/{job}/files"

    listing = requests.get(files, timeout=30).json()
    paths = {f["path"]: f["size"] for f in listing["files"]}
    assert paths["model.keras"] == (job_dir / "model.keras").stat().st_size
    assert any(p.startswith("checkpoints/") for p in paths) and not any(p.startswith("leak") for p in paths)
    assert listing["total_bytes"] == sum(paths.values()) and not listing["truncated"]
    only = requests.get(files, params={"prefix": "checkpoints/"}, timeout=30).json()["files"]
    assert only and all(f["path"].startswith("checkpoints/") for f in only)

    # One file: whole, then in two ranges (a broken download resumed), then unchanged by its ETag.
    whole = requests.get(f"{files}/model.keras", timeout=30)
    assert whole.status_code == 200 and whole.content == (job_dir / "model.keras").read_bytes()
    assert int(whole.headers["Content-Length"]) == len(whole.content) and whole.headers["Accept-Ranges"] == "bytes"
    head = requests.get(f"{files}/model.keras", headers={"Range": "bytes=0-999"}, timeout=30)
    rest = requests.get(f"{files}/model.keras", headers={"Range": "bytes=1000-"}, timeout=30)
    assert (head.status_code, rest.status_code) == (206, 206) and head.content + rest.content == whole.content
    same = requests.get(f"{files}/model.keras", headers={"If-None-Match": whole.headers["ETag"]}, timeout=30)
    assert same.status_code == 304
    past = requests.get(f"{files}/model.keras", headers={"Range": f"bytes={len(whole.content) + 10}-"}, timeout=30)
    assert past.status_code == 416

    # A folder: streamed as .tar.gz; its files are the job dir's.
    archive = requests.get(f"{files}/checkpoints", params={"archive": "tar.gz"}, timeout=60)
    assert archive.status_code == 200 and archive.headers["Content-Type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
        assert names == sorted(f"checkpoints/{p.removeprefix('checkpoints/')}" for p in paths if "checkpoints/" in p)
        tar.extractall(tmp_path / "got", filter="data")

    # The CLI: the exported model by default; a folder as NAME.tar.gz. Both load as a user would load them.
    env = {**child_env, "GPUDECK_API": url}
    cli = subprocess.run(
        python_module("tui.cli", "download", str(job), "-o", str(tmp_path / "m.keras")),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0 and cli.stdout.startswith(f"{tmp_path / 'm.keras'}: "), cli.stderr
    assert (tmp_path / "m.keras").read_bytes() == whole.content and not (tmp_path / "m.keras.part").exists()
    folder = subprocess.run(  # a folder: NAME.tar.gz
        python_module("tui.cli", "download", str(job), "tensorboard"),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert folder.returncode == 0 and tarfile.is_tarfile(tmp_path / "tensorboard.tar.gz"), folder.stderr
    loaded = subprocess.run(
        [sys.executable, "-c", LOADS, str(tmp_path / "m.keras"), str(tmp_path / "got" / "checkpoints")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert "model " in loaded.stdout and "checkpoint " in loaded.stdout
    missing = subprocess.run(
        python_module("tui.cli", "download", str(job), "nothing-here"), env=env, capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no file or folder 'nothing-here'" in missing.stderr

    # Nothing outside the job dir, however the path is written.
    base = f"/api/v1/jobs/{job}/files"
    for path in (
        f"{base}/..%2F..%2F..%2Fetc%2Fpasswd",
        f"{base}/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        f"{base}/%2Fetc%2Fpasswd",
        f"{base}/leak/passwd",
        f"{base}/leak",
    ):
        assert raw_get(url, path) in (400, 404), path
    assert requests.get(f"{files}/checkpoints", timeout=30).status_code == 400  # a folder needs ?archive
    assert requests.get(f"{files}/model.keras", params={"archive": "tar.gz"}, timeout=30).status_code == 400
    gone = requests.get(f"{files}/no-such-file", timeout=30)
    assert gone.status_code == 404 and "does not exist" in gone.json()["message"]
    assert requests.get(f"{url}/api/v1/jobs/999/files", timeout=30).status_code == 404

    # The README's commands, as written (job 1 is this job).
    assert job == 1
    port = int(url.rsplit(":", 1)[1])
    readme_env = {**env, "PATH": f"{os.path.dirname(sys.executable)}:{env['PATH']}"}
    listed, _, _, extracted, cli_list, cli_get = run_block("walkthrough-files", port, tmp_path / "readme", readme_env)
    assert '"path": "checkpoints/' in listed.replace('":"', '": "') and "model.keras" not in listed
    assert (tmp_path / "readme" / "model.keras").read_bytes() == whole.content
    assert "train" in extracted.split() and "model.keras" in cli_list
    assert cli_get.startswith("ckpt.tar.gz: ") and tarfile.is_tarfile(tmp_path / "readme" / "ckpt.tar.gz")

    # Export to MLflow, as the README says: from this machine into another store, then again by the server (the
    # same run as at the job's end: no point twice), which `gpudeck show` reports.
    mine, asked, shown = run_block("mlflow", port, tmp_path / "readme", readme_env)
    run_id = mine.split("MLflow run ")[1].split()[0]
    local = MlflowClient(tracking_uri=f"file:{tmp_path / 'readme' / 'mlruns'}")
    assert len(local.get_metric_history(run_id, "loss")) == len(points) and "new points)" in mine
    assert asked.startswith("job 1: export to the operator's MLflow queued") and shown.startswith("   export  mlflow ")
    again = until(lambda: _exported(url, job, after=exported["at"]), 60, "the export asked for")
    assert again["run_id"] == run.info.run_id and again["points"] == 0

    # Done with it: gpudeck rm (a dry run names it first), and nothing of it is left to the API or on disk.
    def rm(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(python_module("tui.cli", "rm", *args), env=env, capture_output=True, text=True)

    assert rm("--status", "succeeded", "--older-than", "30d").stdout.startswith("deleted 0 jobs")  # too young
    assert rm("--status", "running").returncode == 2  # only ended jobs can go
    size = requests.get(f"{url}/api/v1/jobs/{job}", timeout=30).json()["disk_bytes"]
    health, metrics, shown, dry, gone = run_block("walkthrough-space", port, tmp_path / "readme", readme_env)
    assert "'free_bytes': " in health and "'low': False" in health
    assert 'gpudeck_disk_used_bytes{kind="jobs"}' in metrics and "gpudeck_disk_free_bytes " in metrics
    assert shown.split() == ["disk", *human(size).split()] and size > 1 << 20
    assert dry.strip() == str(job)  # one id a line (the count goes to stderr)
    assert gone.startswith(f"deleted 1 job: {job} (") and "MiB freed" in gone
    assert requests.get(f"{url}/api/v1/jobs/{job}", timeout=30).status_code == 404
    assert requests.get(files, timeout=30).status_code == 404 and not job_dir.exists()
    assert requests.get(f"{url}/api/v1/jobs", timeout=30).json()["jobs"] == []
