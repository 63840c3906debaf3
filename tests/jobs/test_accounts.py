"""The accounts (issue 69 #2), against a real Redis with the clock moved: GPU-hours as the GPU sampler books them
(a share its part), idle GPU-hours, jobs by end state and queue waits, per owner and period; the totals equal the
sum of the records and survive a job's deletion; a job retried and not yet ended again is not counted; jobs that
ended before the index existed are found."""

from datetime import datetime, timezone

import pytest

from jobs import accounts, control
from jobs.keys import ACCOUNTS_INDEXED_KEY, ENDED_KEY
from jobs.store import JobStore
from tests.support.workers import booked

NOV = datetime(2026, 11, 1, tzinfo=timezone.utc).timestamp()
DEC = datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp()
DAY = 86400.0


def test_gpu_hours_per_owner_and_period_equal_the_records_and_survive_a_deletion(redis, settings):
    a1 = booked(redis, "alice", NOV + 2 * DAY, 60, 3)  # 3 GPU-h, ended Nov 3
    a2 = booked(redis, "alice", NOV + 10 * DAY, 600, 4, part=0.25)  # a quarter of a GPU, 4 h: 1 GPU-h, Nov 11
    booked(redis, "bob", NOV + 10 * DAY, 0, 2, gpus=2, idle=True, status="failed")  # 4 GPU-h, all idle
    booked(redis, "bob", NOV + 40 * DAY, 30, 5)  # ends in December: not in November
    records = [JobStore(redis).get(i) for i in (1, 2, 3)]
    november = accounts.usage(redis, NOV, DEC)
    assert november["total"]["gpu_hours"] == pytest.approx(sum(r["gpu_seconds"] for r in records) / 3600) == 8.0
    by_owner = {r["owner"]: r for r in november["rows"]}
    assert by_owner["alice"]["gpu_hours"] == 4.0 and by_owner["alice"]["by_state"] == {"succeeded": 2}
    assert by_owner["bob"]["gpu_hours"] == 4.0 and by_owner["bob"]["idle_gpu_hours"] == 4.0
    assert by_owner["bob"]["by_state"] == {"failed": 1}
    assert by_owner["alice"]["wait_p50_s"] == 60.0 and by_owner["alice"]["wait_p95_s"] == 600.0

    weekly = accounts.usage(redis, NOV, DEC, by="none", period="week")
    assert [(r["period"], r["gpu_hours"]) for r in weekly["rows"]] == [("2026-11-02", 3.0), ("2026-11-09", 5.0)]

    control.delete(redis, settings, [a1, a2])  # (the records go; their accounting stays)
    assert accounts.usage(redis, NOV, DEC) == november


def test_a_retried_job_counts_once_it_ends_again_and_old_jobs_are_found(redis):
    job = booked(redis, "alice", NOV, 0, 2)
    JobStore(redis).update(job, status="queued")  # (retried: running again, not yet ended)
    assert accounts.usage(redis, NOV, DEC)["total"]["jobs"] == 0
    # a job that ended before the accounts' index existed: found once, by its record
    redis.zrem(ENDED_KEY, job)
    redis.delete(ACCOUNTS_INDEXED_KEY)
    JobStore(redis).update(job, status="succeeded")
    assert accounts.usage(redis, NOV, DEC)["total"]["gpu_hours"] == 2.0
    assert redis.zscore(ENDED_KEY, job) == NOV + 2 * 3600


def test_a_range_bound_is_a_date_a_date_time_with_its_zone_or_an_age():
    now = DEC + 3600
    assert accounts.moment("2026-11-01", now) == NOV
    assert accounts.moment("2026-11-01T01:00+01:00", now) == NOV
    assert accounts.moment("30d", now) == now - 30 * DAY
    for bad in ("yesterday", "2026-11-01T08:00", "2026-13-01"):
        with pytest.raises(ValueError):
            accounts.moment(bad, now)


def test_the_api_and_the_cli_answer_the_accounts(client, redis, tmp_path):
    booked(redis, "alice", NOV + 2 * DAY, 60, 3)
    answer = client.get("/api/v1/usage?since=2026-11-01&until=2026-12-01&period=month")
    assert answer.status_code == 200
    [row] = answer.json["rows"]
    assert (row["period"], row["owner"], row["gpu_hours"]) == ("2026-11-01", "alice", 3.0)
    assert answer.json["since"] == "2026-11-01T00:00:00.000Z"
    for query, field in (("since=soon", "since"), ("by=team", "by"), ("period=year", "period"),
                         ("since=2026-12-01&until=2026-11-01", "since"), ("color=red", "color")):  # fmt: skip
        refused = client.get(f"/api/v1/usage?{query}")
        assert refused.status_code == 400 and field in refused.json["message"], (query, refused.json)
