"""Least attained service (issue 66 #2, GPUDECK_POLICY=las) against a real Redis, the clock moved: a job that has had
little GPU time goes ahead of one that has had much and preempts it at its checkpoint; a job that waited long enough
is promoted; nothing is preempted that started less than GPUDECK_PREEMPT_AFTER ago; a `high` job is still first."""

import time
from dataclasses import replace

import pytest

from jobs import las, lifecycle, outcome, queues, schedule
from jobs.errors import ConfigError
from jobs.keys import REBAND_KEY, line_key, stop_key
from jobs.settings import Settings
from jobs.store import JobStore
from tests.support.workers import box, rec, running, submit, succeed


@pytest.fixture
def s(settings):
    return replace(settings, policy="las", las_limits=(600,), las_promote=2.0, preempt_after_s=60)


def score(redis, job_id: int, priority: str = "normal") -> float:
    return redis.zscore(line_key(priority, None), job_id)


def preempted(redis, s, job_id: int) -> None:
    """Its work-horse saw the stop: it saved its checkpoint and ended; the next round places what comes."""
    assert lifecycle.end(redis, job_id, outcome.STOPPED["preempted"], checkpoint_step=100) == "queued"


def test_a_job_with_little_gpu_time_goes_ahead_of_one_with_much_and_preempts_it(redis, s):
    box(redis, 1)
    long = submit(redis, s)
    running(redis, long, ago=3600)  # (an hour of one GPU: band 1 of limits (600,))
    short = submit(redis, s)  # (none: band 0) — the submission's round preempts the long one at its checkpoint
    assert redis.get(stop_key(long)) == b"preempted"
    assert rec(redis, short)["message"] == f"preempting job {long} (normal)"
    preempted(redis, s, long)
    assert schedule.place(redis, s) == [short]  # (the freed GPU: the short job's, not the older long one's)
    assert score(redis, long) >= las.BAND  # back in line in band 1 (its old place there)
    after = submit(redis, s)  # a later job with no GPU time goes ahead of the long one
    succeed(redis, short)
    assert schedule.place(redis, s) == [after]
    assert rec(redis, long)["status"] == "queued"


def test_the_same_line_under_fifo_keeps_the_order_of_submission_and_preempts_nobody(redis, s):
    fifo = replace(s, policy="fifo")
    box(redis, 1)
    long = submit(redis, fifo)
    running(redis, long, ago=3600)
    submit(redis, fifo)
    assert redis.get(stop_key(long)) is None  # (the same priority: nobody is preempted)


def test_a_job_that_waited_as_long_as_the_knob_says_is_promoted_to_band_0(redis, s):
    box(redis, 1)
    long = submit(redis, s)
    running(redis, long, ago=1000)  # (1,000 GPU-s: band 1)
    short = submit(redis, s)
    preempted(redis, s, long)
    assert schedule.place(redis, s) == [short]
    running(redis, short, ago=0)
    ran = rec(redis, long)["ran_s"]
    assert schedule.place(redis, s, now=time.time() + 0.5 * 2.0 * ran) == []  # (not yet: half the wait)
    assert score(redis, long) >= las.BAND
    later = time.time() + 2.0 * ran + 5  # (it has waited twice as long as it ran: promoted to band 0 ...)
    schedule.place(redis, s, now=later)
    assert score(redis, long) < las.BAND
    # ... and the short job, which has had 2,000 GPU-s by then (band 1), makes room for it in turn
    assert redis.get(stop_key(short)) == b"preempted"


def test_no_thrash_a_job_placed_less_than_preempt_after_ago_is_not_preempted(redis, s):
    box(redis, 1)
    long = submit(redis, s)
    running(redis, long, ago=1000)
    short = submit(redis, s)
    preempted(redis, s, long)
    assert schedule.place(redis, s) == [short]
    succeed(redis, short)
    assert schedule.place(redis, s) == [long]  # (alone in line: it starts again, 1,000 GPU-s had: band 1)
    running(redis, long, ago=10)  # started ten seconds ago (GPUDECK_PREEMPT_AFTER is 60 s)
    newcomer = submit(redis, s)
    assert redis.get(stop_key(long)) is None and rec(redis, newcomer)["status"] == "queued"
    schedule.place(redis, s, now=time.time() + 61)  # (once it has run its minute, it may be)
    assert redis.get(stop_key(long)) == b"preempted"


def test_a_high_job_is_still_first_whatever_its_attained_service(redis, s):
    box(redis, 1)
    blocker = submit(redis, s, preemptible=False)
    running(redis, blocker)
    high = submit(redis, s, priority="high")
    JobStore(redis).update(high, ran_s=7200.0)  # (two hours of GPU time had: band 1 of its priority ...)
    redis.sadd(REBAND_KEY, high)  # (as a requeue leaves it)
    normal = submit(redis, s)  # (... a normal job with none: band 0)
    assert score(redis, high, "high") >= las.BAND
    order = [job_id for job_id, _, _ in queues.scheduler_order(redis, s, queues.lines(redis), {}, time.time())]
    assert order == [high, normal]  # priorities stay above the bands
    succeed(redis, blocker)
    assert schedule.place(redis, s) == [high]
    running(redis, high, ago=120)
    # and the other way round: a running high job is never preempted for a normal one, however much it has had
    schedule.place(redis, s, now=time.time() + 10 * 3600)
    assert redis.get(stop_key(high)) is None and rec(redis, normal)["status"] == "queued"


def test_the_policy_and_its_knobs_are_checked_where_they_are_read():
    assert Settings.from_env({}).policy == "fifo"  # (the default: the order of submission within a priority)
    got = Settings.from_env({"GPUDECK_POLICY": "LAS", "GPUDECK_LAS_LIMITS": "10m,2h", "GPUDECK_LAS_PROMOTE": "4"})
    assert (got.policy, got.las_limits, got.las_promote) == ("las", (600, 7200), 4.0)
    for env, named in (
        ({"GPUDECK_POLICY": "srtf"}, "GPUDECK_POLICY"),
        ({"GPUDECK_LAS_LIMITS": "2h,10m"}, "GPUDECK_LAS_LIMITS"),
        ({"GPUDECK_LAS_PROMOTE": "-1"}, "GPUDECK_LAS_PROMOTE"),
    ):
        with pytest.raises(ConfigError, match=named):
            Settings.from_env(env)
