"""POST/GET /api/v1/jobs through Flask's test client on a real Redis: ids, listing, bad input."""

import shutil

import pytest

from jobs.keys import line_key

GOOD = {"model": "resnet20", "dataset": "synthetic", "params": {"steps": 20, "batch_size": 32}}


def test_submit_answers_201_with_sequential_ids_and_queues_the_job(client, redis):
    first = client.post("/api/v1/jobs", json=GOOD)
    second = client.post("/api/v1/jobs", json={**GOOD, "name": "second", "tags": ["a"]})
    assert first.status_code == second.status_code == 201
    assert (first.json["id"], second.json["id"]) == (1, 2)
    assert first.headers["Location"] == "/api/v1/jobs/1"
    job = first.json
    assert job["status"] == "queued" and job["spec"]["model"] == "resnet20"
    assert job["spec"]["gpus"] == 0  # no live GPU worker: the job runs on a CPU worker
    assert job["queue"] == "cpu" and job["name"] == "resnet20"
    assert redis.zrange(line_key("normal", None), 0, -1) == [b"1", b"2"]  # in line, in order


def test_priority_picks_the_line(client, redis):
    job = client.post("/api/v1/jobs", json={**GOOD, "priority": "high", "gpus": 2}).json
    assert redis.zrange(line_key("high", None), 0, -1) == [b"1"] and job["queue"] == "gpus-2-high"


def test_get_and_list_newest_first_with_a_cursor(client):
    for _ in range(5):
        client.post("/api/v1/jobs", json=GOOD)
    assert client.get("/api/v1/jobs/3").json["id"] == 3
    page = client.get("/api/v1/jobs?limit=2").json
    assert [j["id"] for j in page["jobs"]] == [5, 4] and page["next_cursor"] == 4
    page = client.get(f"/api/v1/jobs?limit=2&cursor={page['next_cursor']}").json
    assert [j["id"] for j in page["jobs"]] == [3, 2]
    page = client.get(f"/api/v1/jobs?limit=2&cursor={page['next_cursor']}").json
    assert [j["id"] for j in page["jobs"]] == [1] and page["next_cursor"] is None


def test_a_queued_job_has_no_logs_or_metrics_yet(client):
    client.post("/api/v1/jobs", json=GOOD)
    logs = client.get("/api/v1/jobs/1/logs")
    assert logs.status_code == 200 and logs.text == "" and logs.headers["X-Next-Offset"] == "0"
    assert client.get("/api/v1/jobs/1/metrics").json == {"job_id": 1, "train": [], "validation": []}


BAD = [
    ({**GOOD, "model": "resnet21"}, "model", "unknown model 'resnet21'; did you mean 'resnet20'? known:"),
    ({**GOOD, "gpu": 1}, "gpu", "unknown field; did you mean 'gpus'? accepted:"),
    ({**GOOD, "params": {"stpes": 5}}, "params.stpes", "unknown param; did you mean 'steps'? accepted:"),
    ({**GOOD, "dataset": "my data"}, "dataset", "unknown dataset"),
    ({"dataset": "synthetic"}, "model", "is required"),
    ({"model": "resnet20"}, "dataset", "is required"),
    ({**GOOD, "colour": "red"}, "colour", "unknown field"),
    ({**GOOD, "gpus": "1"}, "gpus", "integer"),
    ({**GOOD, "gpus": -1}, "gpus", "between"),
    ({**GOOD, "priority": "urgent"}, "priority", "one of"),
    ({**GOOD, "tags": "a,b"}, "tags", "list"),
    ({**GOOD, "params": {"batch_size": "32"}}, "params.batch_size", "integer"),
    ({**GOOD, "params": {"learning_rate": 0.1}}, "params.learning_rate", "unknown param"),
    ({**GOOD, "params": [1]}, "params", "object"),
    ([GOOD], "body", "JSON object"),
]


def test_a_spec_whose_one_problem_is_a_missing_dataset_is_404_and_a_bad_shape_400_first(client, redis):
    """Well-formed, but it names an uploaded dataset that does not exist: 404, the field named as in a 400."""
    resp = client.post("/api/v1/jobs", json={**GOOD, "dataset": "cifar11"})
    assert resp.status_code == 404 and resp.json["error"] == "not_found"
    assert "no dataset named 'cifar11' has been uploaded" in resp.json["details"]["fields"]["dataset"]
    resp = client.post("/api/v1/jobs", json={**GOOD, "dataset": "cifar11", "gpus": -1})
    # A second step (issue 38): the references of a spec are looked up once its shape is right.
    assert resp.status_code == 400 and set(resp.json["details"]["fields"]) == {"gpus"}
    sweep = client.post("/api/v1/sweeps", json={"base": GOOD, "grid": {"dataset": ["synthetic", "cifar11"]}})
    assert sweep.status_code == 404 and "combination 2" in sweep.json["message"]
    assert redis.keys("*") == []


@pytest.mark.parametrize("body, field, words", BAD)
def test_bad_specs_get_400_naming_the_field_and_leave_nothing_behind(client, redis, body, field, words):
    resp = client.post("/api/v1/jobs", json=body)
    assert resp.status_code == 400
    err = resp.json
    assert err["error"] == "validation_error"
    assert words in err["details"]["fields"][field]
    assert field in err["message"]
    assert redis.keys("*") == []  # no id used, no record, nothing queued


def test_body_that_is_not_json(client, redis):
    resp = client.post("/api/v1/jobs", data="{model: resnet20", content_type="application/json")
    assert resp.status_code == 400 and resp.json["error"] == "bad_request" and "not valid JSON" in resp.json["message"]
    resp = client.post("/api/v1/jobs", data="model=resnet20", content_type="application/x-www-form-urlencoded")
    assert resp.status_code == 400 and "Content-Type: application/json" in resp.json["message"]
    assert redis.keys("*") == []


def test_unknown_job_is_404_everywhere(client):
    for path in (
        "/api/v1/jobs/99",
        "/api/v1/jobs/99/logs",
        "/api/v1/jobs/99/metrics",
        "/api/v1/jobs/99/wait?timeout=0",
    ):
        resp = client.get(path)
        assert resp.status_code == 404, path
        assert resp.json == {"error": "not_found", "message": "job 99 does not exist", "details": {"id": 99}}


def test_bad_query_arguments(client):
    client.post("/api/v1/jobs", json=GOOD)
    for path, field in (
        ("/api/v1/jobs?limit=x", "limit"),
        ("/api/v1/jobs?limit=0", "limit"),
        ("/api/v1/jobs/1/logs?offset=-1", "offset"),
        ("/api/v1/jobs/1/metrics?format=xml", "format"),
        ("/api/v1/jobs?limit=501", "limit"),
        ("/api/v1/jobs?status=done", "status"),
        ("/api/v1/jobs?state=queued", "state"),
        ("/api/v1/jobs/1/logs?follow=2", "follow"),
        ("/api/v1/jobs/1/logs?ofset=3", "ofset"),
        ("/api/v1/jobs/1/wait?timeout=3601", "timeout"),
    ):
        resp = client.get(path)
        assert resp.status_code == 400 and resp.json["details"]["field"] == field, path


def test_unknown_routes_and_methods_use_the_error_shape(client):
    resp = client.get("/api/v1/nope")
    assert resp.status_code == 404 and resp.json["error"] == "not_found"
    resp = client.delete("/api/v1/jobs")
    assert resp.status_code == 405 and resp.json["error"] == "method_not_allowed"


def test_wait_times_out_on_a_job_that_is_still_queued(client):
    client.post("/api/v1/jobs", json=GOOD)
    resp = client.get("/api/v1/jobs/1/wait?timeout=1")
    assert resp.status_code == 200 and resp.json["status"] == "queued"


def test_healthz_without_workers_is_degraded_but_up(client, settings):
    resp = client.get("/healthz")
    assert resp.status_code == 200
    body = resp.json
    space = body.pop("disk")
    assert space["path"] == str(settings.home) and space["low"] is False and space["min_free_bytes"] == 2 << 30
    assert 0 < space["free_bytes"] <= space["total_bytes"] == shutil.disk_usage(settings.home.parent).total
    assert body == {
        "status": "degraded",
        "redis": "ok",
        "workers": 0,
        "workers_alive": 0,
        "long_polls": {"open": 0, "limit": 224, "per_client": 56},  # 256 threads, 32 kept for short requests
        "command_jobs": False,  # neither tokens nor GPUDECK_COMMAND_JOBS=1
        "redis_saving": "snapshots",  # (the tests' Redis: no append-only file, Redis's default snapshots)
        "gpus_not_released": [],
    }


def test_redis_down_is_503_not_a_traceback(settings):
    from redis import Redis

    from api import create_app

    dead = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    client = create_app({"SETTINGS": settings, "REDIS": dead}).test_client()
    resp = client.post("/api/v1/jobs", json=GOOD)
    assert resp.status_code == 503 and resp.json["error"] == "redis_unavailable"
    assert client.get("/healthz").status_code == 503


def test_tokens_guard_every_route_but_healthz(settings, redis):
    from dataclasses import replace

    from api import create_app

    app = create_app({"SETTINGS": replace(settings, tokens=("s3cret", "other")), "REDIS": redis})
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
        resp = client.get("/api/v1/jobs", headers=headers)
        assert resp.status_code == 401 and resp.json["error"] == "unauthorized"
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    resp = client.post("/api/v1/jobs", json=GOOD)
    counted = {b"gpudeck:authfail:address:127.0.0.1", b"gpudeck:authfail:prefix:wrong", b"gpudeck:authfail:total"}
    assert resp.status_code == 401 and set(redis.keys("*")) == counted  # (guesses, counted; nothing else)
    assert client.get("/api/v1/jobs", headers={"Authorization": "Bearer other"}).status_code == 200


def test_api_refuses_a_public_address_without_tokens(settings):
    from api.serve import serve
    from jobs.errors import ConfigError
    from jobs.settings import Settings

    with pytest.raises(ConfigError, match="GPUDECK_TOKENS"):
        serve(settings, host="0.0.0.0", port=1)
    with pytest.raises(ConfigError, match="REDIS_URL is not set"):
        serve(Settings(home=settings.home), port=1)


def test_models_catalog(client):
    body = client.get("/api/v1/models").json
    by_name = {m["name"]: m for m in body["models"]}
    assert by_name["resnet20"]["parameters"] == 271_098 and by_name["resnet20"]["input_shape"] == [32, 32, 3]
    assert by_name["inception_v3"]["min_input_size"] == 75
    assert by_name["resnet_v1_50"]["aliases"] == ["resnet50"]
    assert by_name["lenet"]["params"]["optimizer"]["choices"][0] == "sgd"
    assert by_name["lenet"]["params"]["lr"]["default"] == 0.01 and by_name["resnet20"]["params"]["lr"]["default"] == 0.1
    assert set(body["recipes"]) == {"resnet-paper", "cifar10-estimator", "slim"}


def test_dataset_paths_only_under_data_roots(settings, redis, tmp_path):
    from dataclasses import replace

    from api import create_app

    root = tmp_path / "data"
    (root / "cifar").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (root / "escape").symlink_to(tmp_path / "secret")
    client = create_app({"SETTINGS": replace(settings, data_roots=(root,)), "REDIS": redis}).test_client()
    assert client.post("/api/v1/jobs", json={**GOOD, "dataset": str(root / "cifar")}).status_code == 201
    for bad in (str(tmp_path / "secret"), str(root / "escape"), f"{root}/../secret"):
        resp = client.post("/api/v1/jobs", json={**GOOD, "dataset": bad})
        assert resp.status_code == 403 and "not under GPUDECK_DATA_ROOTS" in resp.json["details"]["fields"]["dataset"]
    resp = (
        create_app({"SETTINGS": settings, "REDIS": redis})
        .test_client()
        .post("/api/v1/jobs", json={**GOOD, "dataset": str(root / "cifar")})
    )
    assert resp.status_code == 403 and "no GPUDECK_DATA_ROOTS" in resp.json["message"]


def test_aliases_and_recipes_are_accepted(client):
    resp = client.post(
        "/api/v1/jobs",
        json={"model": "resnet50", "dataset": "synthetic", "params": {"recipe": "slim", "augment": "crop_flip+color"}},
    )
    assert resp.status_code == 201
    resp = client.post("/api/v1/jobs", json={**GOOD, "params": {"augment": "crop_flip+blur", "recipe": "fast"}})
    fields = resp.json["details"]["fields"]
    assert "unknown augment 'blur'" in fields["params.augment"] and "one of" in fields["params.recipe"]


def test_list_filters_by_status_model_and_tag_with_a_stable_cursor(client):
    for i in range(12):
        spec = {**GOOD, "model": "lenet" if i % 3 == 0 else "resnet20", "tags": ["even"] if i % 2 == 0 else ["odd"]}
        client.post("/api/v1/jobs", json=spec)
    for i in (3, 6, 9):
        client.post(f"/api/v1/jobs/{i}/cancel")

    def ids(query: str) -> list[int]:
        out, cursor = [], None
        while True:
            page = client.get(f"/api/v1/jobs?{query}&limit=2" + (f"&cursor={cursor}" if cursor else "")).json
            out += [j["id"] for j in page["jobs"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return out
            client.post("/api/v1/jobs", json=GOOD)  # new jobs while paging change nothing already paged

    assert ids("model=lenet") == [10, 7, 4, 1]
    assert ids("tag=even") == [11, 9, 7, 5, 3, 1]
    assert ids("status=canceled") == [9, 6, 3]
    assert ids("status=queued,canceled&model=lenet&tag=odd") == [10, 4]
    assert ids("model=vgg_16") == []
    page = client.get("/api/v1/jobs?status=canceled&limit=3").json
    assert [j["id"] for j in page["jobs"]] == [9, 6, 3] and page["next_cursor"] is None  # an exact last page

    # words, all of them, in the id, name, model, status, reason, tags (issue 25 #3: the TUI's filter asks this)
    def found(words: str) -> list[int]:
        return [j["id"] for j in client.get(f"/api/v1/jobs?q={words}&limit=500").json["jobs"]]

    assert found("RESNET20 Canceled") == [9, 6, 3] and found("odd lenet") == [10, 4] and found("nothing") == []
    held = client.get("/api/v1/jobs?limit=1").json["total"]
    assert held == len(ids("status=queued,canceled")) and held >= 12


def test_metrics_follow_the_stream_as_points_arrive_and_after_a_trim(client, redis):
    from jobs.keys import metrics_key
    from jobs.store import JobStore

    job_id = client.post("/api/v1/jobs", json=GOOD).json["id"]
    store = JobStore(redis)

    def append(*points):
        with redis.pipeline() as pipe:
            start = store.stream_length(metrics_key(job_id))
            for i, p in enumerate(points, start + 1):
                store.append_point(job_id, i, p, pipe)
            pipe.execute()

    def curves():
        body = client.get(f"/api/v1/jobs/{job_id}/metrics").json
        return [p["step"] for p in body["train"]], [p["step"] for p in body["validation"]]

    append({"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}, {"step": 2, "val_loss": 1.7})
    assert curves() == ([1, 2], [2])
    append({"step": 3, "loss": 1.0, "val_loss": 1.1}, {"step": 4, "custom": 0.5})  # a script's own scalar
    assert curves() == ([1, 2, 3, 4], [2, 3])  # read again: only the new points were fetched, none lost
    redis.xtrim(metrics_key(job_id), maxlen=2, approximate=False)  # the stream's cap dropped the oldest
    assert curves() == ([3, 4], [3])
    assert client.get(f"/api/v1/jobs/{job_id}/metrics?format=csv").text.splitlines()[0].endswith(",custom")


def test_what_schemathesis_found_answers_without_a_500(client):
    """Two 500s the schemathesis benchmark found: a lone UTF-16 surrogate in a string (valid JSON, no valid text,
    and Redis could not store it) and a sweep base whose tags are null."""
    job = client.post(
        "/api/v1/jobs",
        data='{"model": "lenet", "dataset": "synthetic", "name": "a\\ud890b"}',
        content_type="application/json",
    )
    assert job.status_code == 201 and job.json["name"] == "a\ufffdb", job.json
    sweep = client.post("/api/v1/sweeps", json={"base": {**GOOD, "tags": None}, "grid": {"params.lr": [0.1, 0.2]}})
    assert sweep.status_code == 201 and all(
        j["spec"]["tags"] == [f"sweep:{sweep.json['id']}"] and j["sweep_id"] == sweep.json["id"]
        for j in sweep.json["jobs"]
    )


def test_answers_are_strict_json_a_nonfinite_value_is_null_and_flagged(client, redis):
    """Issue 16 #2: a diverged loss (NaN) or an infinite value never reaches an answer as a bare NaN/Infinity,
    which RFC 8259 JSON does not have (JSON.parse fails on it); it is null, and its object names it in `nonfinite`."""
    import json

    from jobs.store import JobStore

    job_id = client.post("/api/v1/jobs", json=GOOD).json["id"]
    store = JobStore(redis)
    nan, inf = float("nan"), float("inf")
    store.update(job_id, metrics={"step": 3, "loss": nan, "accuracy": 0.1}, result={"test_loss": inf, "steps": 3})
    pipe = redis.pipeline()
    store.append_point(job_id, 1, {"step": 1, "loss": 2.3}, pipe)
    store.append_point(job_id, 2, {"step": 2, "loss": -inf}, pipe)
    pipe.execute()

    def strict(resp):
        def refuse(name):
            raise AssertionError(f"{name} in {resp.request.path}")

        return json.loads(resp.get_data(as_text=True), parse_constant=refuse)

    job = strict(client.get(f"/api/v1/jobs/{job_id}"))
    assert job["metrics"] == {"step": 3, "loss": None, "accuracy": 0.1, "nonfinite": {"loss": "nan"}}
    assert job["result"] == {"test_loss": None, "steps": 3, "nonfinite": {"test_loss": "inf"}}
    assert strict(client.get("/api/v1/jobs"))["jobs"][0]["metrics"]["nonfinite"] == {"loss": "nan"}
    points = strict(client.get(f"/api/v1/jobs/{job_id}/metrics"))["train"]
    assert points == [{"step": 1, "loss": 2.3}, {"step": 2, "loss": None, "nonfinite": {"loss": "-inf"}}]
    assert "-inf" in client.get(f"/api/v1/jobs/{job_id}/metrics?format=csv").get_data(as_text=True)  # stored as is


def test_a_script_that_trains_twice_keeps_its_runs_apart(client, redis, tmp_path):
    """Issue 24 #2: a script that trains twice, each training into its own run folder (steps start at 0 again):
    every point says its run, the job lists its runs, `?run=` gives one training's curve, progress follows the
    newest, and the result is the newest run's last values (not a mix of both)."""
    from jobs.run.pump import Output
    from jobs.scalars import ScalarReader
    from jobs.store import JobStore
    from tests.support.events import scalar_event, write

    store = JobStore(redis)
    store.create(1, {"command": ["python", "train.py"], "gpus": 0}, "gpus-0")
    job_dir = tmp_path / "job"
    out = Output(store, 1)
    out.reader = ScalarReader(job_dir)
    store.update(1, **out.command_running(None))
    first, second = "logs/fit/20261124-100000", "logs/fit/20261124-110000"
    for run, losses in ((first, (2.0, 1.0, 0.5)), (second, (3.0, 2.5))):
        events = [scalar_event(step, epoch_loss=loss, epoch_accuracy=0.5) for step, loss in enumerate(losses)]
        write(job_dir / run / "train", *events).close()
        pipe = redis.pipeline()
        out.scan(pipe)
        pipe.execute()
    out.command_result(job_dir)
    job = client.get("/api/v1/jobs/1").json
    assert job["runs"] == [first, second] and job["progress"]["step"] == 1, job
    assert job["result"] == {"loss": 2.5, "accuracy": 0.5}, job["result"]
    one = client.get(f"/api/v1/jobs/1/metrics?run={first}").json
    assert [(p["step"], p["loss"]) for p in one["train"]] == [(0, 2.0), (1, 1.0), (2, 0.5)]
    assert all(p["run"] == second for p in client.get(f"/api/v1/jobs/1/metrics?run={second}").json["train"])
    assert len(client.get("/api/v1/jobs/1/metrics").json["train"]) == 5  # every point, each with its run
    bad = client.get("/api/v1/jobs/1/metrics?run=logs/nope")
    assert bad.status_code == 400 and first in bad.json["message"]


def test_a_dry_run_is_checked_as_a_submission_and_stores_nothing(client, redis, users):
    """POST /jobs?dry_run=true (what an agent's dry run asks, issue 47): the spec as it would be queued, its expected
    duration and GPU-hours, its expected start; the same refusals as a submission; no id taken, nothing queued."""
    spec = {"model": "lenet", "dataset": "synthetic", "gpus": 0, "expected_duration": 1800, "name": "try"}
    answer = client.post("/api/v1/jobs?dry_run=true", json=spec, headers=users["alice"])
    assert answer.status_code == 200, answer.json
    got = answer.json
    assert got["dry_run"] is True and got["spec"]["name"] == "try" and got["spec"]["priority"] == "normal"
    assert got["queue"] == "cpu" and got["expected_duration_s"] == 1800 and got["expected_duration_from"] == "declared"
    assert got["gpu_hours"] == 0  # (no GPU)
    assert got["expected_start"] is None and got["expected_start_note"]  # (no live worker could run it: said why)
    gpu = client.post("/api/v1/jobs?dry_run=1", json={**spec, "gpus": 1}, headers=users["alice"]).json
    assert gpu["gpu_hours"] == 0.5
    assert redis.get("gpudeck:next_id") is None and client.get("/api/v1/jobs", headers=users["root"]).json["total"] == 0
    bad = client.post("/api/v1/jobs?dry_run=true", json={**spec, "gpus": -1}, headers=users["alice"])
    assert bad.status_code == 400 and "gpus" in bad.json["details"]["fields"]
    command = client.post("/api/v1/jobs?dry_run=true", json={"command": "true"}, headers=users["bob"])
    assert command.status_code == 403  # (bob may not run commands: a dry run does not say otherwise)
    assert client.post("/api/v1/jobs?dry_run=maybe", json=spec, headers=users["alice"]).status_code == 400
    assert client.get("/api/v1/jobs", headers=users["root"]).json["total"] == 0
