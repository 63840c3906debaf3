"""Issue 46 §2: ended jobs exported to MLflow (jobs.export, models.mlflowrun) on a real Redis and a real MLflow
tracking store (mlflow's own file store, in a temporary folder, read back with mlflow's client): one run a job,
params from the spec, every metric point with its step and time, tags, the model and result; exporting twice
updates the same run; a search's trials nested under one parent; an unreachable server leaves the job as it
was, the error recorded, the export retried; the API's route and the spec's field."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from jobs import export
from jobs.keys import EXPORT_DUE_KEY
from jobs.redis_server import free_port
from jobs.store import JobStore
from tests.support.runs import T0, ran

LENET = {"model": "lenet", "dataset": "synthetic", "gpus": 0, "params": {"lr": 0.1, "steps": 200}, "name": "lenet a"}


@pytest.fixture
def mlflow_settings(settings, tmp_path, monkeypatch):
    """Settings whose GPUDECK_MLFLOW_URI is a fresh MLflow file store (the backend mlflow keeps for tests and
    single users: MLFLOW_ALLOW_FILE_STORE)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return replace(settings, mlflow_uri=f"file://{tmp_path / 'mlruns'}")


def _ended(redis, settings, job_id: int, spec: dict, points: list[dict], status: str = "succeeded", **more) -> dict:
    """A job whose run is written as a worker writes it, with its model and result in its job dir."""
    JobStore(redis).create(job_id, spec, "gpus-0")
    result = {"test_accuracy": 0.75, "test_loss": 0.6}
    ran(redis, job_id, points, [], {"status": status, "result": result}, **more)
    job_dir = settings.job_dir(job_id)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "model.keras").write_bytes(b"weights " * 100)
    (job_dir / "result.json").write_text(json.dumps(result))
    return JobStore(redis).get(job_id)


def mlflow_client(settings):
    """The MLflow client reading the store gpudeck exported to (imported here: mlflow takes most of a second to
    import, and every test process collects this module)."""
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=settings.mlflow_uri)


def _points(n: int, lr: float = 0.1) -> list[dict]:
    return [
        {"step": s, "epoch": s / 50, "time": T0 + 5 + s * 0.25, "loss": 2.3 / (1 + lr * s), "lr": lr}
        for s in range(1, n + 1)
    ]


def test_a_job_becomes_one_mlflow_run_with_every_point_and_again_the_same_run(redis, mlflow_settings):
    spec = {**LENET, "export": ["mlflow"], "tags": ["paper"], "project": "vision"}
    rec = _ended(redis, mlflow_settings, 1, spec, _points(1500))
    assert export.enqueue(redis, rec) and JobStore(redis).get(1)["export"]["mlflow"]["status"] == "pending"
    assert export.deliver(redis, mlflow_settings) == 1
    state = JobStore(redis).get(1)["export"]["mlflow"]
    assert state["status"] == "exported" and state["points"] == 3000 and state["attempts"] == 1, state
    assert not redis.zcard(EXPORT_DUE_KEY)

    client = mlflow_client(mlflow_settings)
    run = client.get_run(state["run_id"])
    assert client.get_experiment(run.info.experiment_id).name == "gpudeck" and run.info.status == "FINISHED"
    assert run.info.run_name == "lenet a" and run.info.end_time == int((T0 + 95) * 1000)
    assert run.info.start_time == int(T0 * 1000)  # (when the job began, not the export: issue 67 #3)
    params = run.data.params
    assert params["model"] == "lenet" and params["params.lr"] == "0.1" and params["gpus"] == "0"
    assert "name" not in params and "export" not in params
    tags = run.data.tags
    assert (tags["gpudeck.job"], tags["gpudeck.status"], tags["gpudeck.tag.paper"]) == ("1", "succeeded", "1")
    assert tags["gpudeck.project"] == "vision" and "project" not in params  # (who it counts against: a tag)
    history = sorted(client.get_metric_history(run.info.run_id, "loss"), key=lambda m: m.step)
    assert [(m.step, m.value, m.timestamp) for m in history] == [
        (p["step"], p["loss"], int(p["time"] * 1000)) for p in _points(1500)
    ]  # every point, with its step and its time, not a summary
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"model.keras", "result.json"}

    # Twice: the same run, no point twice; a point added since (a retried export of a longer log) goes in.
    with redis.pipeline() as pipe:
        JobStore(redis).append_point(1, 1501, {"step": 1501, "time": T0 + 400, "loss": 0.01}, pipe)
        pipe.execute()
    export.enqueue(redis, JobStore(redis).get(1), asked=True)
    export.deliver(redis, mlflow_settings)
    again = JobStore(redis).get(1)["export"]["mlflow"]
    assert again["run_id"] == state["run_id"] and again["points"] == 1, again
    assert len(client.get_metric_history(run.info.run_id, "loss")) == 1501
    assert len(client.search_runs([run.info.experiment_id])) == 1


def test_a_search_is_a_parent_run_with_its_trials_nested(redis, mlflow_settings):
    redis.set("gpudeck:sweep:7", json.dumps({"id": 7, "search": "grid", "job_ids": [1, 2], "created_at": T0 - 10}))
    for job_id, lr in ((1, 0.1), (2, 0.01)):
        spec = {**LENET, "params": {"lr": lr, "steps": 20}, "tags": ["sweep:7"], "export": ["mlflow"]}
        export.enqueue(redis, _ended(redis, mlflow_settings, job_id, spec, _points(20, lr), sweep_id=7))
    assert export.deliver(redis, mlflow_settings) == 2
    client = mlflow_client(mlflow_settings)
    runs = {r.info.run_id: r for r in client.search_runs([client.get_experiment_by_name("gpudeck").experiment_id])}
    parent = [r for r in runs.values() if r.data.tags.get("gpudeck.sweep_parent") == "7"]
    assert len(parent) == 1 and parent[0].info.run_name == "sweep 7"
    trials = [r for r in runs.values() if r.data.tags.get("gpudeck.sweep") == "7"]
    assert len(trials) == 2 and {r.data.tags["mlflow.parentRunId"] for r in trials} == {parent[0].info.run_id}
    assert sorted(r.data.params["params.lr"] for r in trials) == ["0.01", "0.1"]
    # every job of the sweep ended: its parent run ended with the last (issue 67 #3: it stayed RUNNING)
    assert (parent[0].info.status, parent[0].info.end_time) == ("FINISHED", int((T0 + 95) * 1000))
    assert parent[0].info.start_time == int((T0 - 10) * 1000)  # (when the sweep was made)


def test_a_scripts_points_keep_their_names_and_times(redis, mlflow_settings):
    """Issue 67 #3: a script that trained once exports `loss`, not `tensorboard/loss`; one that trained twice keeps
    each run's name; every point at its own time (a script's points were all at the job's start)."""
    spec = {"command": "python train.py", "gpus": 0, "export": ["mlflow"]}
    once = [{"step": s, "run": "tensorboard", "loss": 1.0 / s, "time": T0 + 10 + s} for s in (1, 2)]
    twice = [*once, *({**p, "run": "fit-2"} for p in once)]
    for job_id, points in ((1, once), (2, twice)):
        export.enqueue(redis, _ended(redis, mlflow_settings, job_id, spec, points))
    assert export.deliver(redis, mlflow_settings) == 2
    client = mlflow_client(mlflow_settings)
    runs = {
        r.data.tags["gpudeck.job"]: r
        for r in client.search_runs([client.get_experiment_by_name("gpudeck").experiment_id])
    }
    assert set(runs["1"].data.metrics) == {"loss"}
    history = client.get_metric_history(runs["1"].info.run_id, "loss")
    assert sorted(m.timestamp for m in history) == [int((T0 + 11) * 1000), int((T0 + 12) * 1000)]
    assert set(runs["2"].data.metrics) == {"tensorboard/loss", "fit-2/loss"}


def test_an_unreachable_mlflow_leaves_the_job_as_it_was_and_is_retried(redis, settings, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    down = replace(settings, mlflow_uri=f"http://127.0.0.1:{free_port()}")
    rec = _ended(redis, down, 1, {**LENET, "export": ["mlflow"]}, _points(5))
    export.enqueue(redis, rec)
    started = time.time()
    assert export.deliver(redis, down) == 0
    job = JobStore(redis).get(1)
    state = job["export"]["mlflow"]
    assert job["status"] == "succeeded" and job["result"]["test_accuracy"] == 0.75  # (nothing of the job changed)
    assert state["status"] == "retrying" and state["attempts"] == 1 and "Connection" in state["error"], state
    due = redis.zscore(EXPORT_DUE_KEY, "1")
    assert due == pytest.approx(state["next_at"]) and due >= started + export.FIRST_RETRY_S
    assert export.deliver(redis, down, now=due - 1) == 0 and JobStore(redis).get(1)["export"]["mlflow"]["attempts"] == 1
    export.deliver(redis, down, now=due)
    assert JobStore(redis).get(1)["export"]["mlflow"]["attempts"] == 2  # (and the next wait twice as long)


def test_the_api_exports_on_request_and_the_spec_asks_only_where_the_operator_set_a_uri(
    client, redis, settings, mlflow_settings
):
    spec = {"model": "lenet", "dataset": "synthetic", "export": ["mlflow"]}
    refused = client.post("/api/v1/jobs", json=spec)  # (this app's settings: no GPUDECK_MLFLOW_URI)
    assert refused.status_code == 400 and "GPUDECK_MLFLOW_URI" in refused.json["details"]["fields"]["export"]
    bad = client.post("/api/v1/jobs", json={**spec, "export": ["wandb"]})
    assert "'wandb' is no export target; the targets: mlflow" in bad.json["details"]["fields"]["export"]
    job = client.post("/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic"}).json["id"]
    said = client.post(f"/api/v1/jobs/{job}/export")
    assert said.status_code == 422 and "GPUDECK_MLFLOW_URI" in said.json["message"]

    from api import create_app

    exporting = create_app({"SETTINGS": mlflow_settings, "REDIS": redis, "TESTING": True}).test_client()
    assert exporting.post("/api/v1/jobs", json=spec).status_code == 201
    assert exporting.post(f"/api/v1/jobs/{job}/export").status_code == 409  # queued: nothing to export yet
    ran(redis, job, _points(3), [], {"status": "succeeded"})
    assert exporting.post(f"/api/v1/jobs/{job}/export", json={"target": "s3"}).status_code == 400
    queued = exporting.post(f"/api/v1/jobs/{job}/export")
    assert queued.status_code == 202 and queued.json["export"]["mlflow"]["status"] == "pending"
    export.deliver(redis, mlflow_settings)
    assert exporting.get(f"/api/v1/jobs/{job}").json["export"]["mlflow"]["status"] == "exported"

    # A token made with --export mlflow: its jobs that say nothing of it are exported; one that says [] is not.
    from jobs import tokens

    carol = {"Authorization": f"Bearer {tokens.create(redis, 'carol', export=('mlflow',))}"}
    plain = {"model": "lenet", "dataset": "synthetic"}
    assert exporting.post("/api/v1/jobs", json=plain, headers=carol).json["spec"]["export"] == ["mlflow"]
    assert "export" not in exporting.post("/api/v1/jobs", json={**plain, "export": []}, headers=carol).json["spec"]
    with pytest.raises(Exception, match="'wandb' is no export target"):
        tokens.create(redis, "dave", export=("wandb",))
