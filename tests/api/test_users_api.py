"""Several users through Flask's test client on a real Redis: named tokens, owners, each permission rule from both
sides, revoke and expiry, slowing down guesses, the audit trail. (tests/e2e/test_users.py drives the same over
real HTTP on a live stack with workers, GPU quotas included, and runs the README's section.)"""

import io
import time
from dataclasses import replace

import pytest

from api import create_app
from api.auth import AUTH_FAILURES_MAX
from jobs import tokens
from tests.support.formats import cifar_tgz

MODEL = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}}
COMMAND = {"command": "python -c 'print(1)'"}


def test_without_named_tokens_nobody_is_asked_and_nothing_has_an_owner(client, redis):
    assert client.get("/api/v1/whoami").json == {
        "name": None,
        "role": "admin",
        "auth": "none",
        "max_gpus": None,
        "commands": None,
        "max_priority": None,
    }
    job = client.post("/api/v1/jobs", json=MODEL).json
    assert job["owner"] is None and client.post(f"/api/v1/jobs/{job['id']}/cancel").status_code == 200
    assert redis.exists("gpudeck:audit") == 0  # nobody to tell apart: nothing recorded, as before
    tokens.create(redis, "alice")
    assert client.get("/api/v1/jobs").status_code == 401  # one named token: every request needs a token


def test_owners_are_recorded_shown_and_filtered(client, users):
    a = client.post("/api/v1/jobs", json=MODEL, headers=users["alice"]).json
    b = client.post("/api/v1/jobs", json=MODEL, headers=users["bob"]).json
    assert (a["owner"], b["owner"]) == ("alice", "bob")
    assert client.get("/api/v1/whoami", headers=users["alice"]).json == {
        "name": "alice",
        "role": "user",
        "auth": "named",
        "max_gpus": 1,
        "commands": True,
        "max_priority": None,
    }
    mine = client.get("/api/v1/jobs?owner=me", headers=users["alice"]).json["jobs"]
    assert [j["id"] for j in mine] == [a["id"]]
    assert [j["id"] for j in client.get("/api/v1/jobs?owner=bob", headers=users["alice"]).json["jobs"]] == [b["id"]]
    everyone = client.get("/api/v1/jobs", headers=users["bob"]).json["jobs"]  # a user reads everything
    assert {j["owner"] for j in everyone} == {"alice", "bob"}
    sweep = client.post(
        "/api/v1/sweeps", json={"base": MODEL, "grid": {"params.lr": [0.1, 0.01]}}, headers=users["bob"]
    ).json
    assert sweep["owner"] == "bob" and {j["owner"] for j in sweep["jobs"]} == {"bob"}


def test_a_user_may_cancel_retry_and_delete_only_their_own_jobs_and_an_admin_any(client, redis, users):
    a = client.post("/api/v1/jobs", json=MODEL, headers=users["alice"]).json["id"]
    b = client.post("/api/v1/jobs", json=MODEL, headers=users["bob"]).json["id"]
    refused = client.post(f"/api/v1/jobs/{a}/cancel", headers=users["bob"])
    assert refused.status_code == 403 and refused.json["details"]["rule"] == "owner_or_admin"
    assert "belongs to alice" in refused.json["message"] and "admin token may cancel any" in refused.json["message"]
    assert client.get(f"/api/v1/jobs/{a}", headers=users["bob"]).json["status"] == "queued"  # nothing changed
    assert client.post(f"/api/v1/jobs/{a}/cancel", headers=users["alice"]).status_code == 200
    assert client.post(f"/api/v1/jobs/{b}/cancel", headers=users["root"]).status_code == 200  # an admin's
    for verb, path in (("post", f"/api/v1/jobs/{a}/retry"), ("delete", f"/api/v1/jobs/{a}")):
        resp = getattr(client, verb)(path, headers=users["bob"])
        assert resp.status_code == 403 and resp.json["details"]["rule"] == "owner_or_admin", path
    retried = client.post(f"/api/v1/jobs/{a}/retry", headers=users["alice"])
    assert retried.status_code == 201 and retried.json["owner"] == "alice"
    assert client.delete(f"/api/v1/jobs/{a}", headers=users["alice"]).status_code == 200
    assert client.delete(f"/api/v1/jobs/{b}", headers=users["root"]).status_code == 200
    assert client.get(f"/api/v1/jobs/{b}", headers=users["root"]).status_code == 404


def test_datasets_are_owned_and_deleted_by_their_owner_or_an_admin(client, users, tmp_path):
    archive = cifar_tgz(tmp_path)

    def upload(version: str, who: str):
        form = {"name": "pets", "version": version, "file": (io.BytesIO(archive), "pets.tar.gz")}
        return client.post("/api/v1/datasets", data=form, headers=users[who], content_type="multipart/form-data")

    first = upload("v1", "alice")
    assert first.status_code == 201 and first.json["owner"] == "alice", first.json
    assert upload("v2", "alice").status_code == 201
    refused = client.delete("/api/v1/datasets/pets/v1", headers=users["bob"])
    assert refused.status_code == 403 and "dataset pets:v1 belongs to alice" in refused.json["message"]
    assert client.delete("/api/v1/datasets/pets/v1", headers=users["alice"]).status_code == 200
    assert client.delete("/api/v1/datasets/pets/v2", headers=users["root"]).status_code == 200


def test_only_an_admin_drains_workers_and_reads_the_audit(client, users):
    refused = client.post("/api/v1/workers/nobody/drain", headers=users["alice"])
    assert refused.status_code == 403 and refused.json["details"]["rule"] == "admin_only"
    assert "gpudeck token create NAME --admin" in refused.json["message"]
    assert client.post("/api/v1/workers/nobody/drain", headers=users["root"]).status_code == 404  # allowed: no such
    assert client.get("/api/v1/audit", headers=users["bob"]).status_code == 403


def test_command_jobs_for_named_tokens_unless_made_with_no_commands(client, users):
    refused = client.post("/api/v1/jobs", json=COMMAND, headers=users["bob"])
    assert refused.status_code == 403 and refused.json["details"]["rule"] == "no_commands"
    assert "--no-commands" in refused.json["message"]
    assert client.post("/api/v1/jobs", json=COMMAND, headers=users["alice"]).status_code == 201
    sweep = {"base": MODEL, "grid": {"command": [None, "python -c 'print(2)'"]}}  # a grid makes a command job
    assert client.post("/api/v1/sweeps", json=sweep, headers=users["bob"]).status_code == 403
    assert client.get("/healthz").json["command_jobs"] is True  # what a client's form offers


def test_a_job_bigger_than_the_quota_is_refused(client, users):
    resp = client.post("/api/v1/jobs", json={**MODEL, "gpus": 2}, headers=users["alice"])
    assert resp.status_code == 403 and resp.json["details"] == {
        "rule": "max_gpus",
        "user": "alice",
        "gpus": 2,
        "max_gpus": 1,
    }
    assert client.post("/api/v1/jobs", json={**MODEL, "gpus": 2}, headers=users["bob"]).status_code == 201


def test_revoke_and_expiry_take_effect_on_the_next_request(client, redis, users):
    assert client.get("/api/v1/jobs", headers=users["bob"]).status_code == 200
    tokens.revoke(redis, "bob")
    resp = client.get("/api/v1/jobs", headers=users["bob"])
    assert resp.status_code == 401 and "unknown or revoked token" in resp.json["message"]
    old = tokens.create(redis, "old", expires_s=60, now=time.time() - 61)
    resp = client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {old}"})
    assert resp.status_code == 401 and "token 'old' expired" in resp.json["message"]
    assert [t["name"] for t in tokens.list_all(redis)] == ["alice", "old", "root"]
    assert all("sha256" not in t for t in tokens.list_all(redis))
    assert redis.hget("gpudeck:tokens", "alice").decode().find(users["alice"]["Authorization"][7:]) == -1


def test_guesses_are_slowed_down_per_address_and_a_good_token_is_not(client, users):
    bad = {"Authorization": "Bearer gpd_guess"}
    answers = [client.get("/api/v1/jobs", headers=bad).status_code for _ in range(AUTH_FAILURES_MAX + 2)]
    assert answers == [401] * AUTH_FAILURES_MAX + [429, 429]
    slowed = client.get("/api/v1/jobs", headers=bad)
    assert 0 < int(slowed.headers["Retry-After"]) <= 60 and "too many bad tokens" in slowed.json["message"]
    assert client.get("/api/v1/jobs", headers=users["bob"]).status_code == 200
    other = client.get("/api/v1/jobs", headers=bad, environ_base={"REMOTE_ADDR": "10.0.0.9"})
    assert other.status_code == 429 and other.json["details"]["scope"] == "tokens"  # the same guess elsewhere
    fresh = {"Authorization": "Bearer gpd_another_guess"}
    assert client.get("/api/v1/jobs", headers=fresh, environ_base={"REMOTE_ADDR": "10.0.0.9"}).status_code == 401


def test_guesses_from_many_addresses_are_slowed_down_in_all(client, users):
    """Issue 23 #11: every address of a host gets no 10 more guesses a minute each: past 100 in all, 429."""
    from api.auth import AUTH_FAILURES_TOTAL_MAX

    codes = [
        client.get(
            "/api/v1/jobs",
            headers={"Authorization": f"Bearer gpd_{i:08d}guess"},
            environ_base={"REMOTE_ADDR": f"10.1.{i // 250}.{i % 250}"},
        ).status_code
        for i in range(AUTH_FAILURES_TOTAL_MAX + 3)
    ]
    assert codes[:AUTH_FAILURES_TOTAL_MAX] == [401] * AUTH_FAILURES_TOTAL_MAX and codes[-3:] == [429] * 3
    assert client.get("/api/v1/jobs", headers=users["alice"]).status_code == 200  # a good token still passes


def test_the_audit_trail_holds_every_state_change_newest_first(client, redis, users):
    a = client.post("/api/v1/jobs", json=MODEL, headers=users["alice"]).json["id"]
    client.post(f"/api/v1/jobs/{a}/cancel", headers=users["bob"])  # refused: recorded with its answer
    client.post(f"/api/v1/jobs/{a}/cancel", headers=users["alice"])
    client.get("/api/v1/jobs", headers=users["alice"])  # a read: not recorded
    entries = client.get("/api/v1/audit", headers=users["root"]).json["entries"]
    assert [(e["user"], e["method"], e["path"], e["status"]) for e in entries] == [
        ("alice", "POST", f"/api/v1/jobs/{a}/cancel", 200),
        ("bob", "POST", f"/api/v1/jobs/{a}/cancel", 403),
        ("alice", "POST", "/api/v1/jobs", 201),
    ]
    assert entries[0]["address"] == "127.0.0.1" and entries[0]["time"].endswith("Z")
    only = client.get("/api/v1/audit?user=bob", headers=users["root"]).json["entries"]
    assert [e["user"] for e in only] == ["bob"]
    assert client.get("/api/v1/audit?since=1h", headers=users["root"]).json["entries"] == entries
    bad = client.get("/api/v1/audit?since=soon", headers=users["root"])
    assert bad.status_code == 400 and bad.json["details"]["field"] == "since"
    ancient = client.get("/api/v1/audit?since=24280d", headers=users["root"])  # issue 23 #12: before 1970
    assert ancient.status_code == 400 and "before 1970" in ancient.json["message"], ancient.json


def test_gpudeck_tokens_keep_working_as_anonymous_admins_beside_named_ones(settings, redis, users):
    client = create_app({"SETTINGS": replace(settings, tokens=("s3cret",)), "REDIS": redis}).test_client()
    shared = {"Authorization": "Bearer s3cret"}
    assert client.get("/api/v1/whoami", headers=shared).json["auth"] == "shared"
    a = client.post("/api/v1/jobs", json=MODEL, headers=users["alice"]).json["id"]
    job = client.post("/api/v1/jobs", json=MODEL, headers=shared).json
    assert job["owner"] is None
    assert client.post(f"/api/v1/jobs/{a}/cancel", headers=shared).status_code == 200  # an admin
    entries = client.get("/api/v1/audit", headers=shared).json["entries"]
    assert entries[0]["user"] == "GPUDECK_TOKENS"


def test_an_api_served_beyond_loopback_asks_for_a_token_even_when_none_is_left(settings, redis):
    from api.serve import serve
    from jobs.errors import ConfigError

    with pytest.raises(ConfigError, match="set GPUDECK_TOKENS or create a named token"):
        serve(settings, host="0.0.0.0", port=1)  # no token of either kind: it would be open to the network
    with pytest.raises(ConfigError, match="create a named token"):  # a Redis it cannot read holds none
        serve(replace(settings, redis_url="redis://127.0.0.1:1/0"), host="0.0.0.0", port=1)
    client = create_app({"SETTINGS": settings, "REDIS": redis, "REQUIRE_TOKENS": True}).test_client()
    ops = {"Authorization": f"Bearer {tokens.create(redis, 'ops', admin=True)}"}
    assert client.get("/api/v1/jobs", headers=ops).status_code == 200
    tokens.revoke(redis, "ops")
    assert client.get("/api/v1/jobs").status_code == 401  # (served on loopback it would be open again)


def test_without_a_sandbox_named_users_run_no_commands_unless_trusted(settings, redis):
    """GPUDECK_SANDBOX=off stands for a host where bubblewrap cannot run: a named user's command job is a 403 that
    says why and how to allow it, a model job is not; GPUDECK_COMMAND_JOBS=trusted accepts the risk."""
    from dataclasses import replace

    from api import create_app
    from jobs import tokens

    token = tokens.create(redis, "bob")
    auth = {"Authorization": f"Bearer {token}"}
    command = {"command": "true"}
    plain = create_app({"SETTINGS": replace(settings, sandbox="off", command_jobs=False), "REDIS": redis})
    refused = plain.test_client().post("/api/v1/jobs", json=command, headers=auth)
    assert refused.status_code == 403 and refused.json["details"]["rule"] == "no_sandbox", refused.json
    assert (
        "GPUDECK_SANDBOX=off" in refused.json["message"] and "GPUDECK_COMMAND_JOBS=trusted" in refused.json["message"]
    )
    model = {"model": "lenet", "dataset": "synthetic"}
    assert plain.test_client().post("/api/v1/jobs", json=model, headers=auth).status_code == 201
    trusted = replace(settings, sandbox="off", command_jobs=True, command_jobs_trusted=True)
    ok = (
        create_app({"SETTINGS": trusted, "REDIS": redis}).test_client().post("/api/v1/jobs", json=command, headers=auth)
    )
    assert ok.status_code == 201, ok.json


def test_an_idempotency_key_is_its_owners_own(client, users):
    """Issue 23 #9: bob's key sent by alice is a new key, not bob's job."""
    key = {"Idempotency-Key": "ci-run-42"}
    bobs = client.post("/api/v1/jobs", json=MODEL, headers={**users["bob"], **key})
    assert bobs.status_code == 201
    again = client.post("/api/v1/jobs", json=MODEL, headers={**users["bob"], **key})
    assert again.status_code == 200 and again.json["id"] == bobs.json["id"]
    alices = client.post("/api/v1/jobs", json=MODEL, headers={**users["alice"], **key})
    assert alices.status_code == 201 and alices.json["id"] != bobs.json["id"] and alices.json["owner"] == "alice"


def test_a_tokens_default_endpoints_are_told_of_its_jobs_that_name_none(redis, settings):
    """Issue 30 #3: `gpudeck token create alice --notify lab`: alice's jobs (and her sweeps' trials) that name no
    endpoint tell lab; a job that names its own keeps them; an endpoint the operator has not is refused."""
    from jobs.settings import Webhook

    s = replace(settings, webhooks=(Webhook("lab", "http://127.0.0.1:9/hook"), Webhook("ci", "http://127.0.0.1:9/ci")))
    app = create_app({"SETTINGS": s, "REDIS": redis, "TESTING": True}).test_client()
    with pytest.raises(tokens.BadRequest, match="no endpoint 'nope'"):
        tokens.create(redis, "carol", notify=("nope",), webhooks=("lab", "ci"))
    alice = {"Authorization": f"Bearer {tokens.create(redis, 'alice', notify=('lab:failed',), webhooks=('lab', 'ci'))}"}
    plain = app.post("/api/v1/jobs", json=MODEL, headers=alice).json
    own = app.post("/api/v1/jobs", json={**MODEL, "notify": ["ci"]}, headers=alice).json
    assert plain["spec"]["notify"] == ["lab:failed"] and own["spec"]["notify"] == ["ci"]
    sweep = app.post("/api/v1/sweeps", json={"base": MODEL, "grid": {"params.lr": [0.1]}}, headers=alice).json
    assert sweep["jobs"][0]["spec"]["notify"] == ["lab:failed"]


def test_a_failed_deliverys_record_names_no_url_and_only_its_owner_and_admins_see_it(redis, settings, users):
    """Issue 37 #4: a receiver that fails (here, nothing listens) with its secret in the URL's path: the attempt
    records the endpoint's name and the error's class, never the URL; other users get 404, as for no job."""
    from jobs import notify
    from jobs.redis_server import free_port
    from jobs.settings import Webhook

    url = f"http://127.0.0.1:{free_port()}/services/T000/B000/s3cr3tPath"
    s = replace(settings, webhooks=(Webhook("team", url),), webhook_retry_s=0.0)
    app = create_app({"SETTINGS": s, "REDIS": redis, "TESTING": True}).test_client()
    job = app.post("/api/v1/jobs", json={**MODEL, "notify": ["team:any"]}, headers=users["alice"]).json
    app.post(f"/api/v1/jobs/{job['id']}/cancel", headers=users["alice"])  # (an end to tell)
    assert notify.deliver(redis, s) >= 1
    seen = app.get(f"/api/v1/jobs/{job['id']}/notifications", headers=users["alice"])
    assert seen.status_code == 200 and seen.json["attempts"], seen.json
    first = seen.json["attempts"][0]
    assert first["endpoint"] == "team" and not first["delivered"] and first["answer"] == "ConnectionError", first
    assert "s3cr3t" not in seen.get_data(as_text=True) and "127.0.0.1" not in seen.get_data(as_text=True)
    assert app.get(f"/api/v1/jobs/{job['id']}/notifications", headers=users["root"]).status_code == 200
    other = app.get(f"/api/v1/jobs/{job['id']}/notifications", headers=users["bob"])
    assert other.status_code == 404 and other.json["error"] == "not_found", other.json
