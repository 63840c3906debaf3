"""Idempotency, cancel of queued jobs, retry, sweeps: through Flask's test client on a real Redis."""

import pytest

from jobs.keys import line_key

GOOD = {"model": "resnet20", "dataset": "synthetic", "params": {"steps": 20, "batch_size": 32}}


def test_idempotency_key_returns_the_first_job_and_creates_nothing(client, redis):
    h = {"Idempotency-Key": "ci-build-1234"}
    first = client.post("/api/v1/jobs", json=GOOD, headers=h)
    again = client.post("/api/v1/jobs", json=GOOD, headers=h)
    assert first.status_code == 201 and again.status_code == 200
    assert again.json["id"] == first.json["id"] == 1 and again.headers["Idempotent-Replayed"] == "true"
    assert redis.zcard(line_key("normal", None)) == 1 and redis.get("gpudeck:next_id") == b"1"
    other = client.post("/api/v1/jobs", json={**GOOD, "name": "x"}, headers=h)
    assert other.status_code == 422 and other.json["error"] == "unprocessable"
    assert client.post("/api/v1/jobs", json=GOOD, headers={"Idempotency-Key": "other"}).json["id"] == 2


def test_a_refused_submission_does_not_use_up_its_key(client):
    h = {"Idempotency-Key": "k"}
    assert client.post("/api/v1/jobs", json={**GOOD, "model": "nope"}, headers=h).status_code == 400
    assert client.post("/api/v1/jobs", json=GOOD, headers=h).status_code == 201


def test_cancel_a_queued_job_takes_it_off_the_queue(client, redis):
    client.post("/api/v1/jobs", json=GOOD)
    resp = client.post("/api/v1/jobs/1/cancel")
    assert resp.status_code == 200 and resp.json["status"] == "canceled" and resp.json["reason"] == "canceled"
    assert redis.zcard(line_key("normal", None)) == 0
    again = client.post("/api/v1/jobs/1/cancel")
    assert (
        again.status_code == 409 and again.json["error"] == "conflict" and "already canceled" in again.json["message"]
    )
    assert client.post("/api/v1/jobs/7/cancel").status_code == 404


def test_retry_makes_a_new_job_of_an_ended_one(client):
    client.post("/api/v1/jobs", json=GOOD)
    assert client.post("/api/v1/jobs/1/retry").status_code == 409  # still queued
    client.post("/api/v1/jobs/1/cancel")
    resp = client.post("/api/v1/jobs/1/retry")
    assert (
        resp.status_code == 201
        and resp.json["id"] == 2
        and resp.json["spec"] == client.get("/api/v1/jobs/1").json["spec"]
    )


def test_sweep_expands_the_grid_into_one_job_each(client, redis):
    body = {"base": GOOD, "grid": {"params.lr": [0.1, 0.05], "model": ["resnet20", "lenet"]}}
    resp = client.post("/api/v1/sweeps", json=body)
    assert resp.status_code == 201
    sweep = resp.json
    assert sweep["id"] == 1 and len(sweep["jobs"]) == 4 and sweep["job_ids"] == [1, 2, 3, 4]
    combos = {(j["spec"]["params"]["lr"], j["spec"]["model"]) for j in sweep["jobs"]}
    assert combos == {(0.1, "resnet20"), (0.1, "lenet"), (0.05, "resnet20"), (0.05, "lenet")}
    assert all("sweep:1" in j["spec"]["tags"] and j["spec"]["params"]["steps"] == 20 for j in sweep["jobs"])
    summary = client.get("/api/v1/sweeps/1").json
    assert summary["total"] == 4 and summary["ended"] == 0 and summary["best"] is None
    assert {r["model"] for r in summary["jobs"]} == {"resnet20", "lenet"} and "params.lr" in summary["jobs"][0]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"base": GOOD, "grid": {"params.lr": []}}, "grid.params.lr"),
        ({"base": GOOD, "grid": {"colour": [1]}}, "grid.colour"),
        ({"base": GOOD, "grid": {"params": [1]}}, "grid.params"),
        ({"base": GOOD, "grid": {}}, "grid"),
    ],
)
def test_bad_sweeps_are_refused_by_field_and_create_nothing(client, redis, body, field):
    resp = client.post("/api/v1/sweeps", json=body)
    assert resp.status_code == 400 and field in resp.json["details"]["fields"]
    assert redis.keys("gpudeck:*") == []


def test_a_grid_of_more_than_500_combinations_is_over_a_limit(client, redis):
    body = {"base": GOOD, "grid": {"params.lr": list(range(1, 30)), "params.seed": list(range(30))}}
    resp = client.post("/api/v1/sweeps", json=body)
    assert resp.status_code == 413 and resp.json["details"] == {"field": "grid", "jobs": 870}
    assert "expands to 870 jobs; at most 500" in resp.json["message"]
    assert redis.keys("gpudeck:*") == []


def test_a_sweep_with_one_bad_combination_creates_no_job(client, redis):
    resp = client.post("/api/v1/sweeps", json={"base": GOOD, "grid": {"params.batch_size": [32, "64"]}})
    assert resp.status_code == 400
    assert any("params.batch_size" in k and "combination 2" in k for k in resp.json["details"]["fields"])
    assert redis.keys("gpudeck:*") == []
    assert client.get("/api/v1/sweeps/1").status_code == 404


def test_a_sweeps_dry_run_validates_every_trial_and_stores_nothing(client, redis):
    """POST /sweeps?dry_run=true (an agent's dry run, issue 47): a grid's jobs as they would be; a search's rules;
    the same refusals; nothing in Redis."""
    body = {"base": GOOD, "grid": {"params.lr": [0.1, 0.05], "model": ["resnet20", "lenet"]}}
    resp = client.post("/api/v1/sweeps?dry_run=true", json=body)
    assert resp.status_code == 200 and resp.json["dry_run"] is True and resp.json["jobs"] == 4
    assert {(s["params"]["lr"], s["model"]) for s in resp.json["specs"]} == {
        (0.1, "resnet20"), (0.1, "lenet"), (0.05, "resnet20"), (0.05, "lenet")
    }  # fmt: skip
    search = {"search": "random", "base": GOOD, "space": {"params.lr": {"loguniform": [0.001, 0.1]}}, "max_trials": 8}
    resp = client.post("/api/v1/sweeps?dry_run=1", json=search)
    assert resp.status_code == 200 and resp.json["search"] == "random" and resp.json["max_trials"] == 8
    bad = client.post("/api/v1/sweeps?dry_run=true", json={"base": GOOD, "grid": {"params.batch_size": [32, "64"]}})
    assert bad.status_code == 400
    assert client.post("/api/v1/sweeps?dry_run=perhaps", json=body).status_code == 400
    assert redis.keys("gpudeck:*") == []


def test_a_dry_run_says_the_gpus_its_jobs_will_get(client, redis):
    """Issue 67 #5: with a GPU worker live, a sweep's jobs that name no `gpus` get 1 each; the dry run said 0."""
    from tests.support.workers import register

    register(redis, "box.gpu0", gpus=("0",))
    base = {k: v for k, v in GOOD.items() if k != "gpus"}
    grid = client.post("/api/v1/sweeps?dry_run=true", json={"base": base, "grid": {"params.lr": [0.1, 0.05]}})
    assert [s["gpus"] for s in grid.json["specs"]] == [1, 1], grid.json
    search = {"search": "random", "base": base, "space": {"params.lr": {"loguniform": [0.001, 0.1]}}}
    assert client.post("/api/v1/sweeps?dry_run=true", json=search).json["base"]["gpus"] == 1
    made = client.post("/api/v1/sweeps", json={"base": base, "grid": {"params.lr": [0.1]}}).json
    assert [j["spec"]["gpus"] for j in made["jobs"]] == [1]  # (what they do get)


def test_workers_and_gpus_are_empty_without_workers(client):
    assert client.get("/api/v1/workers").json["workers"] == []
    assert client.get("/api/v1/gpus").json["hosts"] == []
    assert client.post("/api/v1/workers/nobody/drain").status_code == 404


def test_the_line_is_read_in_the_schedulers_order_and_counted_whole(client, redis):
    """Issue 64 #3: GET /api/v1/line — the first jobs as the scheduler reads them (a high one first, then the
    oldest), how many are in line (not the 500 a page holds), how many wait for their dependencies."""
    ids = [client.post("/api/v1/jobs", json=GOOD).json["id"] for _ in range(3)]
    urgent = client.post("/api/v1/jobs", json={**GOOD, "priority": "high"}).json["id"]
    after = client.post("/api/v1/jobs", json={**GOOD, "after": [ids[0]]}).json["id"]
    line = client.get("/api/v1/line?limit=2").json
    assert (line["queued"], line["waiting_for_dependencies"]) == (4, 1)
    assert [(j["id"], j["queue_position"]) for j in line["jobs"]] == [(urgent, 1), (ids[0], 2)]
    assert after not in [j["id"] for j in client.get("/api/v1/line?limit=500").json["jobs"]]
    refused = client.get("/api/v1/line?limit=0")
    assert refused.status_code == 400 and "limit" in refused.get_data(as_text=True)
