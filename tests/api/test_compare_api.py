"""Issue 46 §1: GET /api/v1/compare — what differs between runs, their results with each column's best, one metric's
curves overlaid — for zoo jobs, command jobs (a curve per run) and a sweep's trials; JSON and CSV; bad input named.
The runs are written into Redis as a worker writes them (tests.support.runs), on a real Redis, through the API."""

from __future__ import annotations

import csv
import io

import pytest

from jobs.store import JobStore
from tests.support.runs import T0, ran

ZOO = {"model": "lenet", "dataset": "synthetic", "gpus": 2, "params": {"steps": 300}}


def _zoo_runs(client, redis) -> list[int]:
    """Three lenet runs that differ in lr alone (and in name, which is not configuration): lr 0.1 learns best."""
    ids = []
    for lr, accuracy, speed in ((0.1, 0.83, 410.0), (0.05, 0.71, 395.5), (0.01, 0.52, 402.0)):
        spec = {**ZOO, "name": f"lenet lr {lr}", "params": {**ZOO["params"], "lr": lr}}
        job_id = client.post("/api/v1/jobs", json=spec).json["id"]
        points = [
            {"step": s, "epoch": s / 100, "time": T0 + 5 + s / 10, "loss": 2.3 * (1 - accuracy * s / 300)}
            for s in range(10, 310, 10)
        ]
        points += [{"step": 300, "epoch": 3.0, "time": T0 + 40, "val_loss": 1.2 - accuracy, "val_accuracy": accuracy}]
        result = {"test_accuracy": accuracy, "test_top5": 0.99, "test_loss": 1.2 - accuracy, "steps": 300}
        result |= {"images_per_sec": speed, "duration_s": 90.0 - accuracy * 10}
        ran(redis, job_id, points, ["train step 300"], {"status": "succeeded", "result": result}, gpu_seconds=180.0)
        ids.append(job_id)
    return ids


def test_three_runs_side_by_side_show_only_what_differs_their_best_and_their_curves(client, redis):
    a, b, c = _zoo_runs(client, redis)
    doc = client.get(f"/api/v1/compare?jobs={a},{b},{c}").json
    assert [j["id"] for j in doc["jobs"]] == [a, b, c]
    assert [j["name"] for j in doc["jobs"]] == ["lenet lr 0.1", "lenet lr 0.05", "lenet lr 0.01"]
    assert doc["differs"] == [{"field": "params.lr", "values": [0.1, 0.05, 0.01]}]  # exactly: names are no config
    assert doc["same"] > 10  # (model, dataset, gpus, every other param…)

    rows = {r["job_id"]: r for r in doc["results"]}
    assert rows[a]["test_accuracy"] == 0.83 and rows[b]["images_per_sec"] == 395.5 and rows[c]["gpu_hours"] == 0.05
    assert "steps" not in doc["result_columns"]  # (counts, not measures)
    assert doc["best"]["test_accuracy"] == a and doc["best"]["test_loss"] == a  # (the largest; the smallest)
    assert doc["best"]["images_per_sec"] == a and doc["best"]["duration_s"] == a and doc["best"]["last_loss"] == a
    assert "test_top5" not in doc["best"] and "gpu_hours" not in doc["best"]  # all equal: nothing to mark

    # The curves: loss by default, every point as the job reported it, in the order asked.
    assert doc["metric"] == "loss" and doc["x"] == "step"
    assert doc["metrics"] == ["loss", "val_loss", "val_accuracy"]
    assert [c_["job_id"] for c_ in doc["curves"]] == [a, b, c]
    points = JobStore(redis).read_points(b)
    assert doc["curves"][1]["points"] == [[p["step"], p["loss"]] for p in points if "loss" in p]

    # Another metric over time (seconds since the job's first point) or epochs; a long curve thinned, ends kept.
    doc = client.get(f"/api/v1/compare?jobs={a},{b}&metric=val_accuracy&x=epoch").json
    assert [c_["points"] for c_ in doc["curves"]] == [[[3.0, 0.83]], [[3.0, 0.71]]]
    doc = client.get(f"/api/v1/compare?jobs={a},{b}&x=time&points=3").json
    assert [x for x, _ in doc["curves"][0]["points"]] == [0, 14, 29]


def test_a_command_runs_curves_and_its_source_commit_and_environment_differ(client, redis):
    """Two command jobs of the same command: another source snapshot (another commit), another environment; one
    trained twice (two runs: two curves). Env values show as their owner's view shows them."""
    store = JobStore(redis)
    spec = {"command": ["python", "train.py"], "gpus": 0, "env": {"SEED": "1"}, "secret_env": {"TOKEN": "s3cret"}}
    for job_id, sha, commit in ((1, "a" * 64, "1a2b3c4"), (2, "b" * 64, "5d6e7f8")):
        source = {"ref": f"src:{sha[:12]}", "sha256": sha, "files": 1, "size_bytes": 10, "created_at": T0}
        store.create(job_id, {**spec, "source": f"src:{sha[:12]}"}, "gpus-0", source={**source, "git_commit": commit})
    runs = [{"step": s, "run": "fit/1", "loss": 1 / s} for s in (1, 2)] + [{"step": 1, "run": "fit/2", "loss": 0.7}]
    ran(redis, 1, runs, [], {"status": "succeeded", "result": {"accuracy": 0.5}}, env_digest="e1" * 16)
    ran(redis, 2, [{"step": 1, "loss": 0.9}], [], {"status": "failed", "reason": "exit_nonzero"}, env_digest="e2" * 16)
    doc = client.get("/api/v1/compare?jobs=1,2").json
    assert [r["field"] for r in doc["differs"]] == ["source", "source.git_commit", "environment digest"]
    assert doc["differs"][1]["values"] == ["1a2b3c4", "5d6e7f8"]
    assert "s3cret" not in str(doc) and doc["jobs"][1]["status"] == "failed"
    assert [(c["job_id"], c["run"], len(c["points"])) for c in doc["curves"]] == [
        (1, "fit/1", 2),
        (1, "fit/2", 1),
        (2, None, 1),
    ]
    assert doc["result_columns"][0] == "accuracy" and doc["results"][1]["accuracy"] is None

    # CSV: a row a job, the differing fields, then the results.
    text = client.get("/api/v1/compare?jobs=1,2&format=csv").text
    table = list(csv.reader(io.StringIO(text)))
    assert table[0][:6] == ["id", "name", "status", "source", "source.git_commit", "environment digest"]
    assert table[1][:5] == ["1", "", "succeeded", "src:aaaaaaaaaaaa", "1a2b3c4"] and table[2][2] == "failed"
    assert table[0][6:] == doc["result_columns"] and table[1][6] == "0.5"


@pytest.mark.parametrize(
    "query, status, words",
    [
        ("", 400, "name at least two job ids"),
        ("jobs=1", 400, "name at least two job ids"),
        ("jobs=1,one", 400, "'one' is not a job id"),
        ("jobs=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21", 400, "at most 20 jobs"),
        ("jobs=1,999", 404, "job 999 does not exist"),
        ("jobs=1,2&metric=nope", 400, "none of these jobs reports 'nope'; they report: loss"),
        ("jobs=1,2&x=wall", 400, "x must be one of step, epoch, time"),
        ("jobs=1,2&points=1", 400, "points must be between 2 and 100000"),
        ("jobs=1,2&format=xml", 400, "format must be json or csv"),
        ("jobs=1,2&colour=red", 400, "colour"),
    ],
)
def test_bad_comparisons_are_named(client, redis, query, status, words):
    for job_id in (1, 2):
        JobStore(redis).create(job_id, dict(ZOO), "gpus-2")
        ran(redis, job_id, [{"step": 1, "loss": 1.0}], [], {"status": "succeeded"})
    resp = client.get(f"/api/v1/compare?{query}")
    assert resp.status_code == status and words in resp.json["message"], resp.json


def test_a_param_at_its_default_shows_the_default_and_sizes_read_as_sizes(client, redis):
    """Issue 67 #7: a run that left lr at its default showed `-` beside another's lr; gpu_memory showed 8589934592."""
    from models import params

    ids = []
    for spec in ({**ZOO, "gpus": 1, "gpu_memory": "8G"}, {**ZOO, "gpus": 1, "params": {"steps": 300, "lr": 0.05}}):
        job_id = client.post("/api/v1/jobs", json=spec).json["id"]
        ran(redis, job_id, [], [], {"status": "succeeded", "result": {"test_accuracy": 0.5}})
        ids.append(job_id)
    rows = {r["field"]: r["values"] for r in client.get(f"/api/v1/compare?jobs={ids[0]},{ids[1]}").json["differs"]}
    assert rows["params.lr"] == [params.defaults("lenet")["lr"], 0.05]
    assert rows["gpu_memory"] == ["8G", None]
