"""Projects (issue 69 #1), against a real Redis: a job belongs to its spec's project or its owner's default; a
project nobody put you in is a 403 (an admin may submit into any), one that does not exist a 404; --max-queued
refuses past it, --max-gpus holds the project's running GPUs (a job past it waits, saying so, and holds nobody
else up); the accounts add up by project."""

import io
import time

import pytest

from jobs import accounts, control, projects, schedule, tokens
from jobs.errors import BadRequest, Conflict, Forbidden, ReferenceNotFound
from tests.support.policy import DEFAULTS
from tests.support.workers import JOB, booked, box, rec, running, submit, succeed


@pytest.fixture
def lab(redis):
    for name, admin in (("alice", False), ("bob", False), ("root", True)):
        tokens.create(redis, name, admin=admin)
    projects.create(redis, "vision", max_gpus=1, max_queued=2)
    projects.create(redis, "nlp")
    projects.add(redis, "vision", "alice")
    projects.add(redis, "nlp", "alice")  # (her second: vision stays her default)
    projects.add(redis, "nlp", "bob")
    return redis


def test_a_job_belongs_to_its_project_or_its_owners_default_and_only_members_submit_into_one(lab):
    assert projects.default_of(lab, "alice") == "vision" and projects.default_of(lab, "bob") == "nlp"
    first = submit(lab, owner="alice")
    assert rec(lab, first).spec.project == "vision"
    assert rec(lab, submit(lab, owner="alice", project="nlp")).spec.project == "nlp"
    with pytest.raises(Forbidden) as refused:
        submit(lab, owner="bob", project="vision")
    assert "gpudeck project add vision bob" in refused.value.message
    # the dry run says the same
    assert control.dry_run(lab, JOB, DEFAULTS, extra={"owner": "alice"})["spec"]["project"] == "vision"
    assert rec(lab, submit(lab, owner="root", project="vision")).spec.project == "vision"  # (an admin: any)
    with pytest.raises(ReferenceNotFound) as missing:
        submit(lab, owner="alice", project="audio")
    assert "project" in missing.value.fields
    assert rec(lab, submit(lab)).spec.project is None  # (no owner, no project named: none)


def test_max_queued_refuses_and_max_gpus_holds_the_projects_running_gpus(lab, client):
    box(lab, 2)
    running = submit(lab, owner="alice")  # vision: one GPU, and it starts
    assert rec(lab, running)["status"] == "starting"
    waits = submit(lab, owner="alice")  # vision holds 1 of 1: it waits, and holds nobody else up
    assert rec(lab, waits)["status"] == "queued"
    assert rec(lab, waits)["message"] == "waiting: project vision holds 1 of 1 GPU"
    other = submit(lab, owner="alice", project="nlp")  # the free GPU goes to her other project's job
    assert rec(lab, other)["status"] == "starting"
    with pytest.raises(Forbidden) as never:
        submit(lab, owner="alice", gpus=2)
    assert never.value.details["rule"] == "project_max_gpus"
    submit(lab, owner="alice")  # vision's second queued job
    with pytest.raises(Forbidden) as refused:
        submit(lab, owner="alice")
    assert refused.value.details["rule"] == "max_queued" and "2 queued jobs" in refused.value.message
    ops = {"Authorization": f"Bearer {tokens.create(lab, 'ops', admin=True)}"}
    metrics = client.get("/metrics", headers=ops).get_data(as_text=True)  # (what each project holds, graphed)
    assert 'gpudeck_project_gpus{project="vision"} 1.0' in metrics and 'project="nlp"} 1.0' in metrics
    control.cancel(lab, waits)  # (one fewer queued: room again)
    submit(lab, owner="alice")
    assert schedule.place(lab, DEFAULTS) == []


def test_projects_are_made_and_changed_as_an_admin_says(lab):
    with pytest.raises(Conflict):
        projects.create(lab, "vision")
    for bad in ("Vision", "a b", ""):
        with pytest.raises(BadRequest):
            projects.create(lab, bad)
    with pytest.raises(BadRequest):
        projects.create(lab, "audio", max_gpus=0)
    projects.add(lab, "nlp", "alice", default=True)
    assert projects.default_of(lab, "alice") == "nlp"
    projects.remove(lab, "nlp", "alice")
    assert projects.default_of(lab, "alice") == "vision"  # (her other project)
    projects.remove(lab, "nlp")
    assert projects.default_of(lab, "bob") is None and [p["name"] for p in projects.listing(lab)] == ["vision"]


def test_the_accounts_by_project(lab):
    job = submit(lab, owner="alice")
    lab.hset(f"gpudeck:job:{job}", "gpu_seconds", 7200.0)
    from jobs.store import JobStore

    assert JobStore(lab).transition(job, ("queued",), status="canceled", ended_at=time.time())
    [row] = accounts.usage(lab, time.time() - 60, time.time() + 60, by="project")["rows"]
    assert row["project"] == "vision" and row["gpu_hours"] == 2.0


def forget_counts(redis) -> None:
    for key in redis.keys("gpudeck:projects:used:*"):
        redis.delete(key)


def test_a_project_past_its_gpu_hours_this_period_waits_or_is_refused(redis):
    tokens.create(redis, "alice")
    projects.create(redis, "vision", max_gpu_hours="3/month")  # (past it: its jobs wait)
    projects.create(redis, "audio", max_gpu_hours="3/month", over_budget="refuse")
    for name in ("vision", "audio"):
        projects.add(redis, name, "alice")
    box(redis, 2)
    now = time.time()
    ended = max(now - 120, accounts.period_start(now, "month") + 1)  # (this month, whatever the date)
    for name in ("vision", "audio"):
        assert accounts.over_budget(redis, projects.get(redis, name)) is None
        forget_counts(redis)  # (counted again: not what was kept 30 s)
        booked(redis, "alice", ended - 3 * 3600 - 5, 5, 3, project=name)  # (3 GPU-hours, ended this month)
    forget_counts(redis)
    waits = submit(redis, owner="alice", project="vision")
    assert rec(redis, waits)["status"] == "queued"
    assert rec(redis, waits)["message"] == "waiting: project vision used 3 of 3 GPU-hours this month (--max-gpu-hours)"
    with pytest.raises(Forbidden) as refused:
        submit(redis, owner="alice", project="audio")
    assert refused.value.details["rule"] == "max_gpu_hours" and "until the next month" in refused.value.message
    with pytest.raises(BadRequest):
        projects.create(redis, "nlp", max_gpu_hours="lots")


def test_a_projects_admin_steers_its_jobs_and_no_others(redis, client):
    bearer = {n: {"Authorization": f"Bearer {tokens.create(redis, n)}"} for n in ("alice", "bob", "carol")}
    projects.create(redis, "vision")
    projects.create(redis, "nlp")
    projects.add(redis, "vision", "alice")
    projects.add(redis, "vision", "carol", admin=True)
    projects.add(redis, "nlp", "bob")
    theirs = client.post("/api/v1/jobs", json={**JOB, "gpus": 2}, headers=bearer["alice"]).json["id"]
    other = client.post("/api/v1/jobs", json={**JOB, "gpus": 2}, headers=bearer["bob"]).json["id"]
    carol = bearer["carol"]
    assert client.patch(f"/api/v1/jobs/{theirs}", json={"priority": "low"}, headers=carol).status_code == 200
    assert client.post(f"/api/v1/jobs/{theirs}/cancel", headers=carol).status_code == 200
    refused = client.post(f"/api/v1/jobs/{other}/cancel", headers=carol)
    assert refused.status_code == 403 and "belongs to bob" in refused.json["message"]
    assert client.post(f"/api/v1/jobs/{theirs}/cancel", headers=bearer["bob"]).status_code == 403
    assert [p["admins"] for p in projects.listing(redis)] == [[], ["carol"]]  # (nlp, vision)


def test_fair_share_in_two_levels_projects_by_their_shares_then_their_people_evenly(redis, client):
    """Two projects of shares 2:1 on a full box, two people each, everyone with more jobs than the box runs: GPU
    time goes 2:1 between the projects (±10 %) and evenly between the people of each (as Slurm's fair tree)."""
    for name in ("alice", "amy", "bob", "ben"):
        tokens.create(redis, name)
    projects.create(redis, "vision", share=2)
    projects.create(redis, "nlp", share=1)
    for name, project in (("alice", "vision"), ("amy", "vision"), ("bob", "nlp"), ("ben", "nlp")):
        projects.add(redis, project, name)
    for _ in range(30):  # (before the box has workers: nobody starts early)
        for name in ("alice", "amy", "bob", "ben"):
            submit(redis, owner=name)
    box(redis, 3)
    took: dict[str, int] = {}
    for _ in range(30):  # every round, what ran for ten minutes ends and the scheduler fills the three GPUs again
        placed = schedule.place(redis, DEFAULTS)
        assert len(placed) == 3
        for job_id in placed:
            running(redis, job_id, ago=600)
            succeed(redis, job_id)
            took[rec(redis, job_id)["owner"]] = took.get(rec(redis, job_id)["owner"], 0) + 1
    vision, nlp = took["alice"] + took["amy"], took["bob"] + took["ben"]
    assert abs(vision / nlp - 2.0) <= 0.2, took
    assert abs(took["alice"] - took["amy"]) <= 2 and abs(took["bob"] - took["ben"]) <= 2, took
    # the share table says it the same way: projects above their people, in the order they are served
    ops = {"Authorization": f"Bearer {tokens.create(redis, 'ops', admin=True)}"}
    doc = client.get("/api/v1/share", headers=ops).json
    rows = {p["project"]: p for p in doc["projects"]}
    assert rows["vision"]["weight"] == 2.0 and rows["nlp"]["weight"] == 1.0
    assert abs(rows["vision"]["usage_gpu_hours"] / rows["nlp"]["usage_gpu_hours"] - 2.0) <= 0.2
    assert {o["owner"]: o["project"] for o in doc["owners"]} == {
        "alice": "vision", "amy": "vision", "bob": "nlp", "ben": "nlp"
    }  # fmt: skip
    from rich.console import Console

    from tui.screens.share import share_view

    console = Console(record=True, width=120, file=io.StringIO())
    console.print(share_view(doc))  # (the TUI's fair-share screen: projects above their people)
    shown = console.export_text()
    assert shown.index("PROJECT") < shown.index("OWNER") < shown.index("alice/vision"), shown
