"""Sessions (`kind: session`) through Flask's test client on a real Redis: who may start one, what a bad one is told,
what the API shows of a live one to its owner and to others. (tests/e2e/test_sessions.py drives real ones.)"""

import pytest

from jobs.store import JobStore

SESSION = {"kind": "session"}


def conforms(client, name: str, value: object, headers: dict | None = None) -> None:
    """`value` is valid against the served document's schema `name` (JSON Schema 2020-12, as OpenAPI 3.1)."""
    import jsonschema  # (here: its import takes most of a second, and every test process collects this module)

    doc = client.get("/api/v1/openapi.json", headers=headers).json
    schema = {**doc["components"]["schemas"][name], "components": doc["components"]}
    jsonschema.Draft202012Validator(schema).validate(value)


def test_a_session_is_a_job_of_its_own_kind_never_preempted_nor_retried(client, users):
    job = client.post("/api/v1/jobs", json={**SESSION, "gpus": 1, "idle": "45m"}, headers=users["alice"])
    assert job.status_code == 201, job.json
    j = job.json
    assert (j["kind"], j["owner"], j["status"], j["name"]) == ("session", "alice", "queued", "shell")
    spec = j["spec"]
    assert (spec["idle"], spec["max"], spec["timeout"]) == (45 * 60, 8 * 3600, 8 * 3600)
    assert spec["preemptible"] is False and spec["max_retries"] == 0 and spec["jupyter"] is False
    assert (j["attach"], j["url"], j["tunnel"]) == (None, None, None)  # (not running yet)
    conforms(client, "Job", j, users["root"])
    spec = {**SESSION, "gpus": 1, "idle": "45m", "jupyter": False, "max": 3600}
    conforms(client, "JobSpecInput", spec, users["root"])
    from jsonschema import ValidationError

    with pytest.raises(ValidationError):  # (a session is not a command job too)
        conforms(client, "JobSpecInput", {**SESSION, "command": "bash"}, users["root"])
    notebook = client.post("/api/v1/jobs", json={**SESSION, "jupyter": True, "max": 3600}, headers=users["root"]).json
    assert (notebook["name"], notebook["spec"]["max"]) == ("notebook", 3600)
    model = client.post("/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic"}, headers=users["root"]).json
    assert model["kind"] == "model" and model["attach"] is None
    listed = client.get("/api/v1/jobs?q=session", headers=users["root"]).json["jobs"]
    assert {x["id"] for x in listed} == {j["id"], notebook["id"]}


def test_sessions_are_allowed_only_where_command_jobs_are(client, users, redis):
    refused = client.post("/api/v1/jobs", json=SESSION, headers=users["bob"])
    assert refused.status_code == 403 and refused.json["details"]["rule"] == "no_commands"
    assert "--no-commands" in refused.json["message"]
    over = client.post("/api/v1/jobs", json={**SESSION, "gpus": 2}, headers=users["alice"])
    assert over.status_code == 403 and over.json["details"]["rule"] == "max_gpus"  # quotas count sessions
    assert client.get("/api/v1/jobs", headers=users["root"]).json["jobs"] == []  # nothing queued


def test_without_tokens_or_command_jobs_nobody_starts_a_session(client):
    refused = client.post("/api/v1/jobs", json=SESSION)
    assert refused.status_code == 403 and "GPUDECK_COMMAND_JOBS=1" in refused.json["message"]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"kind": "notebook"}, "kind", "must be 'session'"),
        ({**SESSION, "command": "bash"}, "command", "not a command"),
        ({**SESSION, "idle": "2s"}, "idle", "between 60 and"),
        ({**SESSION, "idle": 10 * 86400}, "idle", "GPUDECK_SESSION_IDLE_MAX"),
        ({**SESSION, "idle": "soon"}, "idle", "90m, 1h30m, 12h"),
        ({**SESSION, "max": "forever"}, "max", "90m, 1h30m, 12h"),
        ({**SESSION, "jupyter": "yes"}, "jupyter", "true or false"),
        ({**SESSION, "timeout": 60}, "timeout", "max"),
        ({**SESSION, "timeout": 1}, "timeout", "max"),
        ({**SESSION, "workers": 2}, "workers", "one worker"),
        ({"command": "true", "idle": 60}, "idle", "belongs to sessions"),
        ({"model": "lenet", "dataset": "synthetic", "jupyter": True}, "jupyter", "belongs to sessions"),
    ],
)
def test_a_bad_session_is_told_which_field_and_nothing_is_queued(command_client, body, field, words):
    resp = command_client.post("/api/v1/jobs", json=body)
    assert resp.status_code == 400, resp.json
    assert words in resp.json["details"]["fields"][field]
    assert command_client.get("/api/v1/jobs").json["jobs"] == []


def test_a_session_with_a_source_the_server_lacks_is_404(command_client):
    resp = command_client.post("/api/v1/jobs", json={**SESSION, "source": "src:" + "0" * 64})
    assert resp.status_code == 404 and "source" in resp.json["details"]["fields"]


def test_only_its_owner_sees_how_to_get_into_a_live_session(client, users, redis):
    shell = client.post("/api/v1/jobs", json=SESSION, headers=users["alice"]).json["id"]
    notebook = client.post("/api/v1/jobs", json={**SESSION, "jupyter": True}, headers=users["alice"]).json["id"]
    store = JobStore(redis)
    store.update(shell, status="running", session={"kind": "shell", "host": "gpu7", "port": 4100, "secret": "s3"})
    url = "http://127.0.0.1:4200/lab?token=t0k"
    store.update(notebook, status="running", session={"kind": "notebook", "host": "gpu7", "port": 4200, "url": url})
    mine = client.get(f"/api/v1/jobs/{shell}", headers=users["alice"]).json["attach"]
    assert mine == {
        "host": "gpu7",
        "port": 4100,
        "command": f"gpudeck session attach {shell}",
        "ssh": f"ssh -t gpu7 gpudeck session attach {shell}",
        "secret": "s3",
    }
    theirs = client.get(f"/api/v1/jobs/{shell}", headers=users["bob"]).json["attach"]
    assert "secret" not in theirs and theirs["host"] == "gpu7"
    nb = client.get(f"/api/v1/jobs/{notebook}", headers=users["alice"]).json
    assert nb["url"] == url and nb["tunnel"] == "ssh -N -L 4200:127.0.0.1:4200 gpu7" and nb["attach"] is None
    assert client.get(f"/api/v1/jobs/{notebook}", headers=users["bob"]).json["url"].endswith("?token=***")
    assert client.get(f"/api/v1/jobs/{notebook}", headers=users["root"]).json["url"] == url
    for job_id in (shell, notebook):
        conforms(client, "Job", client.get(f"/api/v1/jobs/{job_id}", headers=users["alice"]).json, users["root"])


def test_a_users_session_lasts_at_most_gpudeck_session_max_and_an_admins_may_last_longer(client, users):
    """Issue 37 #6: a session is never preempted, so a user's is bounded by GPUDECK_SESSION_MAX (24h here, the
    default); asking for more is a 400 naming max and the setting; its default stays 8h; an admin may ask more."""
    too_long = client.post("/api/v1/jobs", json={**SESSION, "max": "30d"}, headers=users["alice"])
    assert too_long.status_code == 400, too_long.json
    assert "GPUDECK_SESSION_MAX" in too_long.json["details"]["fields"]["max"]
    assert client.get("/api/v1/jobs", headers=users["root"]).json["jobs"] == []  # nothing queued
    day = client.post("/api/v1/jobs", json={**SESSION, "max": "24h"}, headers=users["alice"])
    assert day.status_code == 201 and day.json["spec"]["max"] == 24 * 3600, day.json
    plain = client.post("/api/v1/jobs", json=SESSION, headers=users["alice"]).json
    assert plain["spec"]["max"] == 8 * 3600
    admins = client.post("/api/v1/jobs", json={**SESSION, "max": "30d"}, headers=users["root"])
    assert admins.status_code == 201 and admins.json["spec"]["max"] == 30 * 24 * 3600, admins.json
