"""/api/v1/openapi.json is a valid OpenAPI 3.1 document, names every route the app serves, and real answers of a
running API (gunicorn, a worker, Redis) conform to it, errors included."""

from __future__ import annotations

import re
import tarfile

import pytest
import requests

from api.auth import AUTH_FAILURES_MAX
from jobs import tokens
from tests.support.formats import cifar_tgz
from tests.support.live import TINY, until


def test_the_document_is_valid_openapi_3_1(client):
    doc = client.get("/api/v1/openapi.json").json
    assert doc["openapi"] == "3.1.0"
    from openapi_spec_validator import validate  # (seconds of imports: where it is used, not at collection)

    validate(doc)


def test_every_route_is_documented_and_every_documented_route_exists(app, client):
    doc = client.get("/api/v1/openapi.json").json
    served = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            served.add((re.sub(r"\{(job_id|sweep_id)\}", "{id}", path), method.lower()))
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert served == documented


def test_every_array_says_what_it_holds(client):
    """Issue 43 #2: a generated client drops a schema with an array of unknown items (a search's `choice` was one)."""
    untyped = []

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "array" and "items" not in node and "prefixItems" not in node:
                untyped.append(where)
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}/{i}")

    walk(client.get("/api/v1/openapi.json").json, "#")
    assert untyped == []


def test_every_operation_has_a_name_and_a_tag_for_a_generated_client(client):
    """Issue 24 #7: a generator names its functions by operationId (not get_api_v1_jobs_id_metrics) and puts them
    in a module per tag (not all in `default`)."""
    doc = client.get("/api/v1/openapi.json").json
    ops = [op for ops in doc["paths"].values() for op in ops.values()]
    ids = [op.get("operationId") for op in ops]
    assert all(ids) and len(set(ids)) == len(ids), ids
    assert all(re.fullmatch(r"[a-z][a-z_]*", i) for i in ids)
    declared = {t["name"] for t in doc["tags"]}
    assert all(len(op.get("tags", [])) == 1 and op["tags"][0] in declared for op in ops)
    assert doc["paths"]["/api/v1/jobs/{id}/metrics"]["get"]["operationId"] == "get_job_metrics"


@pytest.mark.slow
def test_real_answers_conform_to_the_document(gpu_api, spawn, gpu_env, tmp_path, redis):
    doc = requests.get(f"{gpu_api}/api/v1/openapi.json", timeout=10).json()
    doc["servers"] = [{"url": gpu_api}]
    from openapi_core import OpenAPI
    from openapi_core.contrib.requests import RequestsOpenAPIRequest, RequestsOpenAPIResponse

    openapi = OpenAPI.from_dict(doc)
    checked: list[str] = []

    def call(method: str, path: str, status: int, **kwargs) -> requests.Response:
        resp = requests.request(method, f"{gpu_api}{path}", timeout=120, **kwargs)
        assert resp.status_code == status, f"{method} {path}: {resp.status_code} {resp.text[:500]}"
        openapi.validate_response(RequestsOpenAPIRequest(resp.request), RequestsOpenAPIResponse(resp))
        checked.append(f"{method} {path.split('?')[0]} {status}")
        return resp

    spawn("worker", "--cpu", env=gpu_env)
    until(lambda: requests.get(f"{gpu_api}/healthz", timeout=10).json()["workers_alive"] == 1)
    call("GET", "/healthz", 200)
    call("GET", "/metrics", 200)
    call("GET", "/api/v1/models", 200)
    call("POST", "/api/v1/datasets", 201, data={"name": "c", "version": "1"}, files={"file": cifar_tgz(tmp_path)})
    call("POST", "/api/v1/datasets", 409, data={"name": "c", "version": "1"}, files={"file": cifar_tgz(tmp_path)})
    call("GET", "/api/v1/datasets", 200)
    call("GET", "/api/v1/datasets/c", 200)
    call("GET", "/api/v1/datasets/none", 404)
    call("POST", "/api/v1/datasets", 201, data={"name": "c", "version": "2"}, files={"file": cifar_tgz(tmp_path)})
    waiting = call("POST", "/api/v1/jobs", 201, json={**TINY, "dataset": "c:2", "gpus": 2}).json()["id"]  # no taker
    call("DELETE", "/api/v1/datasets/c/2", 409)  # a queued job uses it
    call("POST", f"/api/v1/jobs/{waiting}/cancel", 200)
    call("DELETE", "/api/v1/datasets/c/2", 200)
    call("DELETE", "/api/v1/datasets/c/2", 404)
    source = tmp_path / "project"
    source.mkdir()
    (source / "train.py").write_text("print('hello')\n")
    with tarfile.open(tmp_path / "src.tgz", "w:gz") as t:
        t.add(source / "train.py", arcname="train.py")
    ref = call("POST", "/api/v1/sources", 201, files={"file": (tmp_path / "src.tgz").read_bytes()}).json()["ref"]
    call(
        "POST", "/api/v1/sources", 200, files={"file": (tmp_path / "src.tgz").read_bytes()}, data={"git_dirty": "false"}
    )
    call("GET", f"/api/v1/sources/{ref}", 200)
    call("GET", "/api/v1/sources/src:" + "0" * 64, 404)
    call("GET", "/api/v1/sources/nope", 400)
    call("POST", "/api/v1/jobs", 403, json={"command": "python train.py", "source": ref})  # no tokens, not turned on
    job = call("POST", "/api/v1/jobs", 201, json={**TINY, "dataset": "c", "tags": ["t"]}).json()["id"]
    call("POST", "/api/v1/jobs", 400, json={**TINY, "colour": 1})
    call("POST", "/api/v1/jobs", 400, data="x", headers={"Content-Type": "application/json"})
    call("GET", f"/api/v1/jobs/{job}/wait?timeout=240", 200)
    call("GET", f"/api/v1/jobs/{job}", 200)
    call("GET", "/api/v1/jobs/999", 404)
    call("GET", "/api/v1/jobs?status=succeeded&tag=t&limit=1", 200)
    call("GET", "/api/v1/jobs?limit=0", 400)
    call("GET", f"/api/v1/jobs/{job}/logs?offset=2", 200)
    call("GET", f"/api/v1/jobs/{job}/logs?follow=1", 200)
    call("GET", f"/api/v1/jobs/{job}/metrics", 200)
    call("GET", f"/api/v1/jobs/{job}/metrics?format=csv", 200)
    call("GET", f"/api/v1/jobs/{job}/files?prefix=checkpoints/", 200)
    call("GET", f"/api/v1/jobs/{job}/files/model.keras", 200)
    call("GET", f"/api/v1/jobs/{job}/files/model.keras", 206, headers={"Range": "bytes=0-9"})
    call("GET", f"/api/v1/jobs/{job}/files/checkpoints?archive=tar.gz", 200)
    call("GET", f"/api/v1/jobs/{job}/files/checkpoints", 400)
    call("GET", f"/api/v1/jobs/{job}/files/nope", 404)
    call("POST", f"/api/v1/jobs/{job}/cancel", 409)
    fresh = call("POST", f"/api/v1/jobs/{job}/retry", 201, json={"resume": False}).json()
    assert fresh["resumes"] is None
    call("POST", f"/api/v1/jobs/{job}/retry", 400, json={"resume": 1})
    call("POST", f"/api/v1/jobs/{fresh['id']}/cancel", 200)
    call("GET", f"/api/v1/jobs/{fresh['id']}/wait?timeout=120", 200)
    call("GET", f"/api/v1/compare?jobs={job},{fresh['id']}", 200)
    call("GET", f"/api/v1/compare?jobs={job},{fresh['id']}&x=epoch&format=csv", 200)
    call("GET", f"/api/v1/compare?jobs={job}", 400)
    call("GET", f"/api/v1/compare?jobs={job},999", 404)
    call("POST", f"/api/v1/jobs/{job}/export", 422)  # (this API has no GPUDECK_MLFLOW_URI: it says so)
    call("DELETE", f"/api/v1/jobs/{fresh['id']}", 200)
    retried = call("POST", f"/api/v1/jobs/{job}/retry", 201).json()["id"]
    call("POST", f"/api/v1/jobs/{retried}/cancel", 200)
    call("GET", f"/api/v1/jobs/{retried}/wait?timeout=120", 200)  # a worker may have taken it: it ends when stopped
    call("DELETE", f"/api/v1/jobs/{retried}", 200)
    call("DELETE", f"/api/v1/jobs/{retried}", 404)
    sweep = call("POST", "/api/v1/sweeps", 201, json={"base": TINY, "grid": {"params.lr": [0.1, 0.01]}}).json()
    call("GET", f"/api/v1/sweeps/{sweep['id']}", 200)
    call("GET", "/api/v1/sweeps/999", 404)
    call("GET", "/api/v1/sweeps?limit=5", 200)
    searched = {"search": "random", "base": TINY, "space": {"params.lr": {"loguniform": [0.001, 0.1]}}}
    search = call("POST", "/api/v1/sweeps", 201, json={**searched, "metric": "loss", "max_trials": 1}).json()
    call("POST", "/api/v1/sweeps", 400, json={**searched, "space": {"params.lr": {"uniform": [1, 0]}}})
    call("POST", f"/api/v1/sweeps/{search['id']}/stop", 200)
    call("POST", "/api/v1/sweeps/999/stop", 404)
    # a schedule firing every second (its job waits for two GPUs nobody has: the next firings skip)
    every = {"name": "nightly", "cron": "* * * * * *", "job": {**TINY, "gpus": 2}}
    call("POST", "/api/v1/schedules", 201, json=every)
    call("POST", "/api/v1/schedules", 409, json=every)
    call("POST", "/api/v1/schedules", 400, json={**every, "name": "other", "cron": "61 * * * *"})
    until(lambda: len(requests.get(f"{gpu_api}/api/v1/schedules/nightly", timeout=10).json()["firings"]) >= 2, 30)
    fired = call("POST", "/api/v1/schedules/nightly/pause", 200).json()
    call("GET", "/api/v1/schedules/nightly", 200)
    call("GET", "/api/v1/schedules", 200)
    call("POST", "/api/v1/schedules/nightly/resume", 200)
    call("DELETE", "/api/v1/schedules/nightly", 204)
    call("GET", "/api/v1/schedules/nightly", 404)
    call("POST", f"/api/v1/jobs/{fired['last_made']['id']}/cancel", 200)
    call("GET", f"/api/v1/jobs/{job}/notifications", 200)
    call("GET", "/api/v1/envs", 200)
    call("DELETE", f"/api/v1/jobs/{sweep['job_ids'][0]}", 409)  # queued: not ended
    parked = call("POST", "/api/v1/jobs", 201, json={**TINY, "gpus": 2}).json()["id"]  # no taker: it stays queued
    call("PATCH", f"/api/v1/jobs/{parked}", 200, json={"priority": "low"})
    call("PATCH", f"/api/v1/jobs/{parked}", 400, json={"priority": "urgent"})
    call("PATCH", f"/api/v1/jobs/{job}", 409, json={"priority": "low"})
    call("POST", f"/api/v1/jobs/{parked}/move", 200, json={"top": True})
    call("POST", f"/api/v1/jobs/{parked}/move", 404, json={"before": 999})
    call("POST", f"/api/v1/jobs/{parked}/cancel", 200)
    call("GET", "/api/v1/share", 200)
    call("GET", "/api/v1/usage?period=day", 200)
    call("GET", "/api/v1/usage?by=team", 400)
    call("GET", "/api/v1/line?limit=5", 200)
    for job_id in sweep["job_ids"]:
        call("POST", f"/api/v1/jobs/{job_id}/cancel", 200)
    until(lambda: requests.get(f"{gpu_api}/api/v1/gpus", timeout=10).json()["hosts"])
    call("GET", "/api/v1/gpus", 200)
    workers = call("GET", "/api/v1/workers", 200).json()["workers"]
    call("POST", "/api/v1/workers/nobody/drain", 404)
    call("POST", "/api/v1/gpus/nobody/0/uncordon", 404)
    call("POST", "/api/v1/gpus/nobody/0/cordon", 404)
    call("GET", "/api/v1/doctor", 200)
    board = call("POST", "/api/v1/tensorboard", 201, json={"jobs": [job]}).json()
    call("POST", "/api/v1/tensorboard", 200, json={"jobs": [job]})
    call("POST", "/api/v1/tensorboard", 400, json={"jobs": []})
    call("GET", "/api/v1/tensorboard", 200)
    call("DELETE", f"/api/v1/tensorboard/{board['port']}", 204)
    call("DELETE", f"/api/v1/tensorboard/{board['port']}", 404)
    call("POST", f"/api/v1/workers/{workers[0]['name']}/drain", 200)
    call("GET", "/api/v1/whoami", 200)  # no tokens yet: anybody is an admin
    root = {"Authorization": f"Bearer {tokens.create(redis, 'root', admin=True)}"}
    bob = {"Authorization": f"Bearer {tokens.create(redis, 'bob')}"}
    call("GET", "/api/v1/whoami", 200, headers=bob)
    call("GET", "/api/v1/whoami", 401)  # a named token exists: every request needs one
    call("POST", f"/api/v1/jobs/{job}/retry", 403, headers=bob)  # not bob's
    call("GET", "/api/v1/audit", 403, headers=bob)
    assert call("GET", "/api/v1/audit?since=1h&user=bob", 200, headers=root).json()["entries"]
    call("GET", "/api/v1/audit?since=soon", 400, headers=root)
    for _ in range(AUTH_FAILURES_MAX):
        call("GET", "/api/v1/jobs", 401, headers={"Authorization": "Bearer gpd_guess"})
    call("GET", "/api/v1/jobs", 429, headers={"Authorization": "Bearer gpd_guess"})
    call("GET", "/api/v1/openapi.json", 200, headers=root)
    # Every documented operation was exercised (and so validated) at least once.
    documented = {f"{m.upper()} {p}" for p, ops in doc["paths"].items() for m in ops}
    exercised = {
        re.sub(
            r"/(\d+|c|none|nope|nobody|nightly|model\.keras|checkpoints|src:[0-9a-f]+|[\w.-]+\.cpu\.\d+)(?=/|$)",
            "/{x}",
            c.rsplit(" ", 1)[0],
        )
        for c in checked
    }
    normalized = {re.sub(r"\{\w+\}", "{x}", d) for d in documented}
    assert normalized <= exercised, normalized - exercised


def test_what_the_server_takes_the_document_takes(client, command_client):
    """Issue 67 #5: a grid over a command's env.X and args.X, and a budget of 1h30m, are taken by the server and were
    refused by the document (a generated client dropped the grid's keys); the document's input schemas take them."""
    import jsonschema

    doc = client.get("/api/v1/openapi.json").json

    def valid(schema: str, body: dict) -> bool:
        wrapped = {"$ref": f"#/components/schemas/{schema}", "components": doc["components"]}
        return jsonschema.Draft202012Validator(wrapped).is_valid(body)

    base = {"command": "python train.py --depth {DEPTH}", "gpus": 0}
    grid = {"base": base, "grid": {"env.LR": ["0.1", "0.01"], "args.DEPTH": [2, 4]}}
    search = {"search": "random", "base": base, "space": {"env.LR": {"uniform": [0.1, 1]}}, "metric": "loss",
              "time_budget": "1h30m"}  # fmt: skip
    # (issue 63: the search body is checked and documented by one model, models.searchinput; a choice of null the
    # server took, the document written by hand refused)
    chosen = {**search, "space": {"env.OPT": {"choice": ["adam", None]}}, "time_budget": None}
    for schema, body in (("GridSweepInput", grid), ("SearchSweepInput", search), ("SearchSweepInput", chosen)):
        assert valid(schema, body), schema
        made = command_client.post("/api/v1/sweeps?dry_run=true", json=body)
        assert made.status_code == 200, made.json  # (and the server takes it)
    assert not valid("GridSweepInput", {"base": base, "grid": {"env.1X": ["a"]}})  # (a name the server refuses)


MADE_FROM_THE_SPEC = {"ModelJobSpec", "CommandJobSpec", "SessionSpec", "JobSpecInput", "JobSpec", "GridSweepInput"}
"""The components made from the job spec's declaration (models.jobspec); every other one is a model of api.schemas."""


def test_every_schema_the_document_serves_is_a_models(client):
    """Issue 63 #2: the document's schemas are generated from models, not written beside them: each served component
    is what its model (api.schemas, or a job kind of models.jobspec) says, and there is none that no model makes."""
    from pydantic.json_schema import models_json_schema

    from api import schemas
    from jobs.spec import KINDS

    served = client.get("/api/v1/openapi.json").json["components"]["schemas"]

    def own(model: type) -> dict:  # (the model alone, as pydantic makes its JSON Schema)
        _, top = models_json_schema(
            [(model, "validation")], ref_template="#/components/schemas/{model}", schema_generator=schemas._Components
        )
        return schemas._plain(top["$defs"][model.__name__])

    for model in [*schemas.models(), *KINDS.values()]:
        assert schemas._plain(served[model.__name__]) == own(model), model.__name__
    made = {m.__name__ for m in schemas.models()}
    assert set(served) - made == MADE_FROM_THE_SPEC
    kept = served["JobSpec"]
    assert set(kept["required"]) >= {"max_retries", "workers", "priority", "preemptible", "chief", "gpus", "name"}
