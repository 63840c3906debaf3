"""A job that begins at a time (issue 69 #3, `"begin"`, `--begin`), against a real Redis with the clock moved: it
waits out of line, saying until when, with that as its expected start; it starts within a round of its time and
not before; with dependencies it waits for both; a bad time is a 400 naming the field."""

import time

from jobs import control, lifecycle, outcome, queues, schedule
from jobs.forecast import estimate
from jobs.keys import BEGINS_KEY
from models.common import iso
from tests.support.policy import DEFAULTS
from tests.support.workers import box, rec, running, submit, succeed


def test_a_job_begins_at_its_time_and_not_before(redis):
    box(redis, 1)
    t0 = time.time()
    later = submit(redis, begin="+2h")  # (the GPU is free: it would start now)
    job = rec(redis, later)
    assert job["status"] == "queued" and job["message"].startswith("waiting until ")
    at = queues.begins_at(job.spec)
    assert at is not None and abs(at - (t0 + 7200)) < 5
    assert job["message"] == f"waiting until {job['spec']['begin']} (its begin)"
    assert estimate(redis, DEFAULTS, [later]) == {later: (at, None)}  # (its expected start: its begin)
    now = submit(redis)  # a job behind it in submission starts now: the waiting one holds nothing
    assert rec(redis, now)["status"] == "starting"
    succeed(redis, now)
    assert schedule.place(redis, DEFAULTS, now=at - 1) == []  # not before
    assert schedule.place(redis, DEFAULTS, now=at + 0.5) == [later]  # within a round of it
    assert redis.zcard(BEGINS_KEY) == 0


def test_a_job_with_dependencies_and_a_begin_waits_for_both(redis):
    box(redis, 2)
    first = submit(redis)
    then = submit(redis, after=[first], begin="+1h")
    at = queues.begins_at(rec(redis, then).spec)
    succeed(redis, first)
    schedule.place(redis, DEFAULTS)
    assert rec(redis, then)["status"] == "queued" and redis.zscore(BEGINS_KEY, then) == at  # (its dependency done)
    assert schedule.place(redis, DEFAULTS, now=at + 1) == [then]


def test_a_canceled_job_leaves_the_jobs_that_wait_for_their_begin(redis):
    box(redis, 1)
    later = submit(redis, begin="2026-12-24T18:00:00+01:00")
    assert redis.zscore(BEGINS_KEY, later) is not None
    control.cancel(redis, later)
    assert redis.zscore(BEGINS_KEY, later) is None and rec(redis, later)["status"] == "canceled"


def test_a_job_whose_begin_has_passed_goes_to_its_line_and_back_to_it_after_a_retry(redis):
    box(redis, 1)
    job = submit(redis, begin=iso(time.time() - 60))  # (a minute ago: it starts now)
    assert rec(redis, job)["status"] == "starting" and redis.zscore(BEGINS_KEY, job) is None
    running(redis, job, ago=10)
    assert lifecycle.end(redis, job, outcome.lost("no heartbeat")) == "queued"  # (a retry)
    assert redis.zscore(BEGINS_KEY, job) is None and schedule.place(redis, DEFAULTS) == [job]


def test_a_time_it_cannot_read_is_a_400_naming_begin(client):
    body = {"model": "lenet", "dataset": "synthetic", "gpus": 0}
    for bad, says in (
        ("tomorrow", "must be a date-time such as 2026-12-01T02:00Z, or +AGE such as +2h"),
        ("2026-12-01T02:00", "must say its time zone"),
        ("+2x", "must be +AGE such as +2h"),
        ("2099-01-01T00:00Z", "must be within a year from now"),
    ):
        resp = client.post("/api/v1/jobs", json={**body, "begin": bad})
        assert resp.status_code == 400, resp.json
        assert says in resp.json["details"]["fields"]["begin"], resp.json
    made = client.post("/api/v1/jobs", json={**body, "begin": "+30m"})
    assert made.status_code == 201 and made.json["spec"]["begin"].endswith("Z")
    assert (
        made.json["message"].startswith("waiting until") and made.json["expected_start"] == made.json["spec"]["begin"]
    )
