"""Time in the scheduler (issue 39) against a real Redis, with a clock the test moves (`schedule.place(now=)`): a
4-GPU job blocked behind running jobs that end at t=60 s keeps its reservation; a 1-GPU job of 30 s starts now
beside it, one of 90 s does not, nor one of unknown duration; an overrun kills nobody and stops backfill there;
expected starts are the plan's, and the round starts each job when the plan said; durations learned from history;
an aged heavy user's job overtakes lighter users' once its wait reaches GPUDECK_FAIRSHARE_AGE_MAX. The workers are
registered as `gpudeck worker` registers itself, not started (tests/e2e/test_sharing.py runs the real stack)."""

from __future__ import annotations

import time
from dataclasses import replace

from jobs import control, forecast, lifecycle, outcome, plan, queues, schedule, share
from jobs.record import Job
from jobs.store import JobStore
from tests.support.workers import box, rec, taken

JOB = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}, "gpus": 1}


def submit(redis, settings, owner=None, **spec) -> int:
    return control.submit(redis, {**JOB, **spec}, settings, extra={"owner": owner} if owner else None)[0]["id"]


def queue(redis, settings, **spec) -> int:
    """Submitted without the round a submission runs (at the real time): the test's clock places it."""
    return queues.submit(redis, {**JOB, **spec}, settings)["id"]


def end(redis, job_id: int) -> None:
    taken(redis, job_id)
    assert lifecycle.end(redis, job_id, outcome.SUCCEEDED)


def started_at(redis, job_id: int, t: float) -> None:
    taken(redis, job_id)
    assert JobStore(redis).transition(job_id, ("starting",), status="running", started_at=t, running_at=t)


def test_a_short_job_fills_the_gap_before_a_reservation_and_a_long_one_waits(redis, settings):
    s = replace(settings, backfill=True, preempt=False)
    box(redis, 4)
    t0 = time.time()
    first = [submit(redis, s, expected_duration=60) for _ in range(3)]
    for job_id in first:
        assert rec(redis, job_id)["status"] == "starting"
        started_at(redis, job_id, t0)
    big = submit(redis, s, gpus=4, expected_duration=100)  # blocked: its GPUs free up at t0 + 60
    short, long_, unknown = (
        submit(redis, s, expected_duration=30),
        submit(redis, s, expected_duration=90),
        submit(redis, s, params={"steps": 5}),  # (a shape nobody ran: no history either)
    )
    assert rec(redis, big)["status"] == "queued"
    assert rec(redis, short)["status"] == "starting"  # ends before t0 + 60: it runs now on the free GPU
    assert rec(redis, long_)["status"] == "queued" and rec(redis, unknown)["status"] == "queued"
    started_at(redis, short, t0 + 1)

    # the plan, as the API says it: the big one at t0 + 60, the long one after it, as the round will do
    starts = forecast.estimate(redis, s, now=t0 + 2)
    assert abs(starts[big][0] - (t0 + 60)) < 1e-6, starts
    assert abs(starts[long_][0] - (t0 + 160)) < 1e-6 and abs(starts[unknown][0] - (t0 + 160)) < 1e-6, starts
    assert schedule.place(redis, s, now=t0 + 30) == []  # nothing frees early: the gap is kept

    # an overrun: at t0 + 70 the three have not ended; nobody is killed; their end is unknown now, so the big job
    # keeps what is free for good, and nothing backfills there until they end
    end(redis, short)
    assert schedule.place(redis, s, now=t0 + 70) == []
    assert all(rec(redis, j)["status"] == "running" for j in first)
    assert forecast.estimate(redis, s, now=t0 + 70)[big] == (None, forecast.NO_ESTIMATE)
    late = queue(redis, s, expected_duration=30)
    assert schedule.place(redis, s, now=t0 + 70) == [] and rec(redis, late)["status"] == "queued"
    for job_id in first:
        end(redis, job_id)
    assert schedule.place(redis, s, now=t0 + 71) == [big]  # and then it starts, at once


def test_without_backfill_the_reserved_gpus_wait_for_the_blocked_job(redis, settings):
    s = replace(settings, backfill=False, preempt=False)
    box(redis, 4)
    t0 = time.time()
    for job_id in [submit(redis, s, expected_duration=60) for _ in range(3)]:
        started_at(redis, job_id, t0)
    big = submit(redis, s, gpus=4, expected_duration=100)
    short = submit(redis, s, expected_duration=30)
    assert rec(redis, big)["status"] == "queued" and rec(redis, short)["status"] == "queued"


def test_a_job_with_no_declared_time_gets_one_from_its_owners_history(redis, settings):
    s = replace(settings, backfill=True, preempt=False)
    box(redis, 2)
    t0 = time.time()
    blocker = submit(redis, s, expected_duration=60)
    started_at(redis, blocker, t0)
    big = submit(redis, s, gpus=2, expected_duration=100)
    probe = queue(redis, s, params={"steps": 3})  # (a shape of its own; the same owner as the jobs ahead)
    assert schedule.place(redis, s, now=t0 + 1) == []  # unknown: only where nobody has reserved
    mine = rec(redis, probe)
    assert plan.expected(mine, plan.learned(redis, [mine])) == (None, None)
    for took in (10, 12, 20):  # its owner ran this shape before
        plan.learn(redis, mine, took)
    assert plan.expected(mine, plan.learned(redis, [mine])) == (20.0, "history")  # (the 90th percentile of 3)
    theirs = Job({**mine, "owner": "bob"})
    assert plan.expected(theirs, plan.learned(redis, [theirs])) == (20.0, "others")  # (their first: anybody's runs)
    assert schedule.place(redis, s, now=t0 + 1) == [probe]  # 20 s ends before t0 + 60: it backfills
    assert rec(redis, big)["status"] == "queued"


def test_an_aged_heavy_users_job_overtakes_lighter_users_after_the_age_cap(redis, settings):
    s = replace(settings, backfill=True, preempt=False, fairshare_age_max_s=600)
    box(redis, 1)
    t0 = time.time()
    share.charge(redis, "heavy", 100_000.0, now=t0)
    share.charge(redis, "light", 10.0, now=t0)
    blocker = submit(redis, s, owner="light")
    started_at(redis, blocker, t0)
    heavy = submit(redis, s, owner="heavy")
    lights = [submit(redis, s, owner="light") for _ in range(3)]
    used = share.usage(redis, s.fairshare_halflife_s, [], t0)
    order = lambda now: [  # noqa: E731
        j for j, _, _ in queues.order(queues.lines(redis), used, True, None, queues.entered(redis), now, 600)
    ]
    assert order(t0 + 1)[0] == lights[0]  # fresh: the lighter user goes first
    assert order(t0 + 700)[0] == heavy  # waited past the cap: its usage counts nothing, and it is the oldest
    end(redis, blocker)
    assert schedule.place(redis, s, now=t0 + 700) == [heavy]
