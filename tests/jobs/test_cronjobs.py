"""Schedules that repeat (issue 69 #3), against a real Redis with the clock moved (no sleeping for real hours): a
firing makes one job (or sweep) saying which schedule and firing made it, at its time and not before, in its zone;
the overlap rules (skip, queue, cancel-previous); missed firings after an outage (catch-up none, one); a firing is
made once however often it is fired again (a restart); pause, resume, delete; a token revoked makes nothing."""

from datetime import datetime, timezone

import pytest

from jobs import control, cronjobs, sweeps, tokens
from jobs.errors import Conflict, NotFound, ValidationError
from jobs.keys import SCHEDULES_DUE_KEY
from jobs.store import JobStore
from tests.support.policy import DEFAULTS
from tests.support.workers import JOB, box, rec, running, succeed

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc).timestamp()
"""Saturday noon UTC: the nightly schedule's first firing is 02:00 in Berlin, 01:00 UTC, the next day."""
FIRST = datetime(2026, 11, 29, 1, 0, tzinfo=timezone.utc).timestamp()
DAY = 86400.0


def nightly(redis, now=T0, owner=None, **rules):
    body = {"name": "nightly", "cron": "0 2 * * *", "tz": "Europe/Berlin", "job": {**JOB, "name": "nightly"}}
    return cronjobs.create(redis, {**body, **rules}, DEFAULTS, owner=owner, now=now)


def jobs_of(redis) -> list[dict]:
    return [j for j in JobStore(redis).list() if j.get("schedule")]


def test_a_firing_makes_one_job_at_its_time_in_its_zone_and_not_before(redis):
    made = nightly(redis)
    assert made["next_at"] == "2026-11-29T01:00:00.000Z" and made["fired"] == 0
    assert cronjobs.fire_due(redis, DEFAULTS, now=FIRST - 1) == []
    assert jobs_of(redis) == []
    [said] = cronjobs.fire_due(redis, DEFAULTS, now=FIRST + 0.5)
    [job] = jobs_of(redis)
    assert said["made"] == {"kind": "job", "id": job["id"]} and said["firing"] == "2026-11-29T01:00:00.000Z"
    assert job["schedule"] == {"name": "nightly", "firing": "2026-11-29T01:00:00.000Z"}
    assert "schedule:nightly" in job["spec"]["tags"] and job["spec"]["name"] == "nightly"
    shown = cronjobs.get(redis, "nightly")
    assert shown["fired"] == 1 and shown["next_at"] == "2026-11-30T01:00:00.000Z"
    assert shown["last_made"] == {"kind": "job", "id": job["id"]} and shown["firings"] == [said]
    # fired again at the same moment (another worker, a restart): nothing more
    assert cronjobs.fire_due(redis, DEFAULTS, now=FIRST + 0.7) == [] and len(jobs_of(redis)) == 1


def test_a_firing_made_again_after_a_crash_makes_the_same_job(redis):
    """A process that submitted a firing's job and died before its record moved on: the next process fires the
    same firing again, and gets the same job (its idempotency key names the firing)."""
    nightly(redis)
    record = cronjobs._read(redis, "nightly")
    first = cronjobs._submit(redis, DEFAULTS, record, FIRST)
    again = cronjobs._submit(redis, DEFAULTS, record, FIRST)
    assert first == again and len(jobs_of(redis)) == 1
    other = cronjobs._submit(redis, DEFAULTS, record, FIRST + DAY)
    assert other["id"] != first["id"]


def test_overlap_skip_makes_nothing_while_the_last_job_runs(redis):
    box(redis, 1)
    nightly(redis)
    [first] = cronjobs.fire_due(redis, DEFAULTS, now=FIRST)
    running(redis, first["made"]["id"])
    [second] = cronjobs.fire_due(redis, DEFAULTS, now=FIRST + DAY)
    assert second["made"] is None
    assert second["why"] == f"skipped: job {first['made']['id']} it made last has not ended (overlap skip)"
    assert len(jobs_of(redis)) == 1
    succeed(redis, first["made"]["id"])
    [third] = cronjobs.fire_due(redis, DEFAULTS, now=FIRST + 2 * DAY)
    assert third["made"] is not None and len(jobs_of(redis)) == 2
    assert cronjobs.get(redis, "nightly")["fired"] == 2


def test_overlap_cancel_previous_cancels_the_last_job_and_queue_makes_both(redis):
    nightly(redis, overlap="cancel-previous")
    [first] = cronjobs.fire_due(redis, DEFAULTS, now=FIRST)
    [second] = cronjobs.fire_due(redis, DEFAULTS, now=FIRST + DAY)
    assert rec(redis, first["made"]["id"])["status"] == "canceled"
    assert second["made"]["id"] != first["made"]["id"] and "canceled job" in second["why"]
    assert rec(redis, second["made"]["id"])["status"] == "queued"

    cronjobs.delete(redis, "nightly")
    nightly(redis, now=FIRST + DAY, overlap="queue")
    [third] = cronjobs.fire_due(redis, DEFAULTS, now=FIRST + 2 * DAY)
    [fourth] = cronjobs.fire_due(redis, DEFAULTS, now=FIRST + 3 * DAY)
    assert {rec(redis, s["made"]["id"])["status"] for s in (third, fourth)} == {"queued"}


def test_firings_missed_in_an_outage_make_none_or_one_as_the_operator_says(redis):
    nightly(redis)  # catch_up none (the default)
    said = cronjobs.fire_due(redis, DEFAULTS, now=FIRST + 3 * DAY + 3600)  # (down for three days and an hour)
    assert [s["made"] for s in said] == [None]
    assert said[0]["why"] == (
        "missed (4 from 2026-11-29T01:00:00.000Z to 2026-12-02T01:00:00.000Z): the service was down"
    )
    assert jobs_of(redis) == [] and cronjobs.get(redis, "nightly")["next_at"] == "2026-12-03T01:00:00.000Z"

    cronjobs.delete(redis, "nightly")
    nightly(redis, catch_up="one")
    said = cronjobs.fire_due(redis, DEFAULTS, now=FIRST + 3 * DAY + 3600)
    assert said[0]["why"].endswith("caught up with one now") and said[-1]["made"] is not None
    [job] = jobs_of(redis)
    assert job["schedule"]["firing"] == "2026-12-02T01:00:00.000Z"  # (the last one missed)
    # a firing a few seconds late (a slow round) is on time: made, whatever catch_up says
    cronjobs.delete(redis, "nightly")
    nightly(redis, now=FIRST + 3 * DAY + 3600)
    [late] = cronjobs.fire_due(redis, DEFAULTS, now=FIRST + 4 * DAY + 20)
    assert late["made"] is not None and late["why"] is None


def test_pause_resume_and_delete(redis):
    nightly(redis)
    paused = cronjobs.pause(redis, "nightly")
    assert paused["paused"] and paused["next_at"] is None and redis.zcard(SCHEDULES_DUE_KEY) == 0
    assert cronjobs.fire_due(redis, DEFAULTS, now=FIRST + 2 * DAY) == []
    resumed = cronjobs.resume(redis, "nightly", now=FIRST + 2 * DAY + 60)  # (what it missed paused is not made)
    assert resumed["next_at"] == "2026-12-02T01:00:00.000Z" and not resumed["paused"]
    [said] = cronjobs.fire_due(redis, DEFAULTS, now=FIRST + 3 * DAY)
    assert said["made"] is not None
    cronjobs.delete(redis, "nightly")
    with pytest.raises(NotFound):
        cronjobs.get(redis, "nightly")
    assert redis.zcard(SCHEDULES_DUE_KEY) == 0 and len(jobs_of(redis)) == 1  # (what it made stays)


def test_a_schedule_is_checked_when_made_not_at_its_first_firing(redis):
    good = {"name": "n", "cron": "*/5 * * * *", "job": JOB}
    for bad, field in (
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "every day"}, "cron"),
        ({"tz": "Mars/Olympus"}, "tz"),
        ({"overlap": "sometimes"}, "overlap"),
        ({"catch_up": "all"}, "catch_up"),
        ({"name": "a b"}, "name"),
        ({"sweep": {"base": JOB, "grid": {"params.steps": [1, 2]}}}, "body"),  # (both)
        ({"job": {**JOB, "model": "nope"}}, "job.model"),
        ({"job": {**JOB, "gpus": "two"}}, "job.gpus"),
        ({"color": "red"}, "color"),
    ):
        with pytest.raises(ValidationError) as refused:
            cronjobs.create(redis, {**good, **bad}, DEFAULTS, now=T0)
        assert field in refused.value.fields, (bad, refused.value.fields)
    assert redis.hlen("gpudeck:schedules") == 0  # (nothing kept of a refused one)
    cronjobs.create(redis, good, DEFAULTS, now=T0)
    with pytest.raises(Conflict):
        cronjobs.create(redis, good, DEFAULTS, now=T0)


def test_a_sweep_schedule_makes_one_sweep_a_firing_and_a_revoked_token_makes_nothing(redis):
    tokens.create(redis, "alice")
    sweep = {"base": {**JOB, "name": "lr"}, "grid": {"params.lr": [0.1, 0.01]}}
    cronjobs.create(redis, {"name": "grid", "cron": "@daily", "sweep": sweep}, DEFAULTS, owner="alice", now=T0)
    midnight = datetime(2026, 11, 29, tzinfo=timezone.utc).timestamp()
    [said] = cronjobs.fire_due(redis, DEFAULTS, now=midnight)
    assert said["made"]["kind"] == "sweep"
    made = sweeps.record_of(redis, said["made"]["id"])
    assert made["owner"] == "alice" and len(made["job_ids"]) == 2
    assert all("schedule:grid" in rec(redis, j)["spec"]["tags"] for j in made["job_ids"])
    # the same firing again (a restart before its record moved on): no second sweep
    again = cronjobs._make(redis, DEFAULTS, cronjobs._read(redis, "grid") | {"last_made": None}, midnight, midnight)
    assert again["made"] is None and again["why"] == f"refused: this firing made sweep {said['made']['id']} already"
    for job_id in made["job_ids"]:
        control.cancel(redis, job_id)
    tokens.revoke(redis, "alice")
    [said] = cronjobs.fire_due(redis, DEFAULTS, now=midnight + DAY)
    assert said["made"] is None and said["why"] == "refused: the token of 'alice' was revoked"
    assert len(sweeps.listing(redis)) == 1
