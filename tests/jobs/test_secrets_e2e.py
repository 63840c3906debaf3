"""Issue 23 #2: a job's env values never reach a user who may not see them. `secret_env` values are shown to
nobody, not even written to the job dir; other users see the names of a job's env, not its values (the owner
sees them, masked by name as before); a sweep's record keeps no secret; the job itself gets every value."""

from __future__ import annotations

import json

import pytest

from jobs import tokens
from jobs.keys import sweep_key
from tests.support.live import until

pytestmark = pytest.mark.slow

CHECK = (
    'test ${#CREDS} = 7 && case "$DATABASE_URL" in postgres://u:*@db/x) echo the job got its secrets;; *) exit 1;; esac'
)
"""Checks the values the job got without naming them (a command is shown to every user)."""


def test_secrets_are_for_the_job_alone(client, redis, spawn, child_env, settings):
    alice = {"Authorization": f"Bearer {tokens.create(redis, 'alice')}"}
    bob = {"Authorization": f"Bearer {tokens.create(redis, 'bob')}"}
    spec = {"command": CHECK, "env": {"DATABASE_URL": "postgres://u:pw@db/x", "PLAIN": "1"}}
    spec["secret_env"] = {"CREDS": "hunter2"}
    job_id = client.post("/api/v1/jobs", json=spec, headers=alice).json["id"]
    spawn("worker", "--cpu", env=child_env)
    ended = ("succeeded", "failed", "canceled")
    job = until(lambda: (j := client.get(f"/api/v1/jobs/{job_id}", headers=alice).json)["status"] in ended and j, 90)
    assert job["status"] == "succeeded", job
    assert "the job got its secrets" in client.get(f"/api/v1/jobs/{job_id}/logs", headers=alice).text

    mine = client.get(f"/api/v1/jobs/{job_id}", headers=alice).json
    assert mine["spec"]["env"] == {"DATABASE_URL": "postgres://u:pw@db/x", "PLAIN": "1"}
    assert mine["spec"]["secret_env"] == {"CREDS": "***"} and mine["environment"]["CREDS"] == "***"
    theirs = client.get(f"/api/v1/jobs/{job_id}", headers=bob).json
    assert theirs["spec"]["env"] == {"DATABASE_URL": "***", "PLAIN": "***"} and theirs["spec"]["secret_env"]
    assert theirs["environment"]["PLAIN"] == "***" and theirs["environment"]["GPUDECK_JOB_ID"] == str(job_id)
    listed = client.get("/api/v1/jobs", headers=bob).json["jobs"][0]
    assert "pw@" not in json.dumps(listed) and "hunter2" not in json.dumps(listed)
    with client.get(f"/api/v1/jobs/{job_id}/files/spec.json", headers=bob) as written:  # every file of the job dir
        assert written.status_code == 200 and "hunter2" not in written.text and "pw@" not in written.text
    on_disk = "".join(p.read_text(errors="replace") for p in settings.job_dir(job_id).rglob("*") if p.is_file())
    assert "hunter2" not in on_disk

    base = {**spec, "command": "true"}
    sweep = client.post("/api/v1/sweeps", json={"base": base, "grid": {"name": ["a", "b"]}}, headers=alice).json
    for who in (alice, bob):
        shown = json.dumps(client.get(f"/api/v1/sweeps/{sweep['id']}", headers=who).json)
        assert "hunter2" not in shown
    assert "pw@" not in json.dumps(client.get(f"/api/v1/sweeps/{sweep['id']}", headers=bob).json)
    assert b"hunter2" not in redis.get(sweep_key(sweep["id"]))  # the sweep's record keeps no secret value
    both = client.post("/api/v1/jobs", json={**spec, "env": {"CREDS": "x"}}, headers=alice)
    assert both.status_code == 400 and "CREDS is in env too" in both.json["details"]["fields"]["secret_env"]
