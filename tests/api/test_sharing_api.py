"""Steering the line through the API (Flask's test client, a real Redis, workers registered but not started):
priorities, moves, dependencies, who may do what, expected starts and the fair-share table; bad input changes
nothing."""

import time

import pytest

from jobs import lifecycle, outcome, tokens
from jobs.keys import line_key
from jobs.store import JobStore
from tests.support.workers import register

JOB = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}}


@pytest.fixture
def users(redis):
    made = {
        "root": tokens.create(redis, "root", admin=True),
        "alice": tokens.create(redis, "alice"),
        "bob": tokens.create(redis, "bob", max_priority="normal"),
    }
    return {name: {"Authorization": f"Bearer {token}"} for name, token in made.items()}


def post(client, body=JOB, who=None):
    resp = client.post("/api/v1/jobs", json=body, headers=who or {})
    assert resp.status_code == 201, resp.json
    return resp.json["id"]


def test_a_queued_jobs_priority_and_place_change_and_ended_jobs_refuse(client, redis):
    a, b, c = post(client), post(client), post(client)  # no worker: they wait
    resp = client.patch(f"/api/v1/jobs/{c}", json={"priority": "high"})
    assert resp.status_code == 200 and resp.json["spec"]["priority"] == "high" and resp.json["queue"] == "cpu-high"
    assert resp.json["queue_position"] == 1
    assert redis.zrange(line_key("high", None), 0, -1) == [str(c).encode()]
    moved = client.post(f"/api/v1/jobs/{b}/move", json={"before": a})
    assert moved.status_code == 200 and moved.json["queue_position"] == 2
    assert client.get(f"/api/v1/jobs/{a}").json["queue_position"] == 3
    assert client.post(f"/api/v1/jobs/{a}/move", json={"top": True}).json["queue_position"] == 2
    after = client.post(f"/api/v1/jobs/{a}/move", json={"after": b}).json
    assert after["queue_position"] == 3
    # bad input: the field named, nothing changed
    for body, field in (
        ({"priority": "urgent"}, "priority"),
        ({"priority": "high", "x": 1}, "body"),
        ({}, "body"),
    ):
        resp = client.patch(f"/api/v1/jobs/{a}", json=body)
        assert resp.status_code == 400 and resp.json["details"]["field"] == field
    for body, status, field in (
        ({"before": 999}, 404, "before"),
        ({"before": c}, 409, "before"),  # another line (high): a job moves within its own
        ({"before": a}, 409, "before"),
        ({"top": False}, 400, "top"),
        ({"before": 1, "after": 2}, 400, "body"),
        ({"after": "x"}, 400, "after"),
    ):
        resp = client.post(f"/api/v1/jobs/{a}/move", json=body)
        assert resp.status_code == status and resp.json["details"]["field"] == field, (body, resp.json)
    assert client.get(f"/api/v1/jobs/{a}").json["queue_position"] == 3
    client.post(f"/api/v1/jobs/{c}/cancel")
    for resp in (
        client.patch(f"/api/v1/jobs/{c}", json={"priority": "low"}),
        client.post(f"/api/v1/jobs/{c}/move", json={"top": True}),
    ):
        assert resp.status_code == 409 and "only a queued job" in resp.json["message"]
    assert client.get(f"/api/v1/jobs/{c}").json["spec"]["priority"] == "high"
    assert client.patch("/api/v1/jobs/999", json={"priority": "low"}).status_code == 404


def test_owners_steer_their_own_and_tokens_cap_priority_and_preemptibility(client, users):
    mine = post(client, who=users["alice"])
    resp = client.patch(f"/api/v1/jobs/{mine}", json={"priority": "high"}, headers=users["bob"])
    assert resp.status_code == 403 and resp.json["details"]["rule"] == "owner_or_admin"
    assert client.post(f"/api/v1/jobs/{mine}/move", json={"top": True}, headers=users["bob"]).status_code == 403
    bobs = post(client, who=users["bob"])
    resp = client.patch(f"/api/v1/jobs/{bobs}", json={"priority": "high"}, headers=users["bob"])
    assert resp.status_code == 403 and resp.json["details"]["rule"] == "max_priority"
    resp = client.post("/api/v1/jobs", json={**JOB, "priority": "high"}, headers=users["bob"])
    assert resp.status_code == 403 and resp.json["details"]["rule"] == "max_priority"
    resp = client.post("/api/v1/jobs", json={**JOB, "preemptible": False}, headers=users["alice"])
    assert resp.status_code == 403 and resp.json["details"]["field"] == "preemptible"
    assert client.get("/api/v1/jobs", headers=users["root"]).json["jobs"] == [
        client.get(f"/api/v1/jobs/{i}", headers=users["root"]).json for i in (bobs, mine)
    ]  # nothing else was stored
    assert client.patch(f"/api/v1/jobs/{mine}", json={"priority": "high"}, headers=users["root"]).status_code == 200
    assert post(client, {**JOB, "preemptible": False}, users["root"])


def test_dependencies_through_the_api(client, redis):
    first = post(client)
    resp = client.post("/api/v1/jobs", json={**JOB, "after": [first, 999]})
    assert resp.status_code == 404 and "after" in resp.json["details"]["fields"]
    resp = client.post("/api/v1/jobs", json={**JOB, "after": ["x"]})
    assert resp.status_code == 400 and "after" in resp.json["details"]["fields"]
    waiting = client.post("/api/v1/jobs", json={**JOB, "after": [first]}).json
    assert waiting["message"] == f"waiting for job {first}" and waiting["queue_position"] is None
    assert waiting["expected_start"] is None and waiting["expected_start_reason"] == f"waiting for job {first}"
    assert [j["id"] for j in client.get("/api/v1/jobs").json["jobs"]] == [waiting["id"], first]


def test_expected_start_from_the_running_jobs_and_the_jobs_ahead(client, redis):
    register(redis, "w")
    running = post(client, {**JOB, "timeout": 600})
    store = JobStore(redis)
    assert store.get(running)["status"] == "starting"
    started = time.time() - 100
    store.transition(running, ("starting",), status="running", started_at=started, running_at=started)
    nxt = post(client, {**JOB, "timeout": 300})
    last = post(client)
    job = client.get(f"/api/v1/jobs/{nxt}").json
    from datetime import datetime

    at = datetime.fromisoformat(job["expected_start"].replace("Z", "+00:00")).timestamp()
    assert abs(at - (started + 600)) < 5 and job["expected_start_reason"] is None  # when the running one times out
    behind = client.get(f"/api/v1/jobs/{last}").json
    at = datetime.fromisoformat(behind["expected_start"].replace("Z", "+00:00")).timestamp()
    assert abs(at - (started + 900)) < 5  # and the one ahead of it takes its timeout
    store.update(running, progress={"step": 50, "total_steps": 100, "first_step": 0})
    job = client.get(f"/api/v1/jobs/{nxt}").json  # half way after 100 s: 100 s to go
    at = datetime.fromisoformat(job["expected_start"].replace("Z", "+00:00")).timestamp()
    assert abs(at - (time.time() + 100)) < 5
    store.update(running, progress=None)
    store.transition(running, ("running",), spec={**store.get(running)["spec"], "timeout": None})
    job = client.get(f"/api/v1/jobs/{nxt}").json
    assert job["expected_start"] is None and "nothing to estimate from" in job["expected_start_reason"]


def test_the_share_table_says_who_used_what(client, redis, users):
    register(redis, "w")
    mine = post(client, who=users["alice"])
    queued = post(client, who=users["bob"])
    store = JobStore(redis)
    store.transition(mine, ("starting",), status="running", started_at=time.time() - 7200)
    lifecycle.end(redis, mine, outcome.SUCCEEDED)
    table = client.get("/api/v1/share", headers=users["bob"]).json
    rows = {o["owner"]: o for o in table["owners"]}
    assert rows["alice"]["usage_gpu_hours"] == pytest.approx(2.0, abs=0.01) and rows["alice"]["share"] > 0.99
    assert store.get(queued)["status"] in ("starting", "queued") and table["fairshare"] is True
    assert table["halflife_s"] == 7 * 86400
