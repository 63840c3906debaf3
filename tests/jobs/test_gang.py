"""Gang placement against a real Redis and RQ's real worker registry: all of a job's workers at once or none.

The workers here are registered the way `gpudeck worker` registers itself (RQ's register_birth, gpudeck's
info and alive keys) but not started, so the test sees exactly what placement hands out before any of it
is consumed."""

import time

import pytest

from jobs import control, gang, keys, schedule
from jobs.reaper import reap
from tests.support.policy import DEFAULTS
from tests.support.workers import placed_on, register

BASE = {"model": "resnet20", "dataset": "synthetic:8x8x3", "params": {"steps": 2}, "gpus": 0}


def test_a_job_takes_all_its_workers_at_once_or_none(redis, client):
    names = [register(redis, f"w{i}", host=f"h{i % 2}") for i in range(3)]
    a = control.submit(redis, {**BASE, "workers": 2}, DEFAULTS)[0]
    b = control.submit(redis, {**BASE, "workers": 2}, DEFAULTS)[0]
    on = placed_on(redis, names)
    assert sorted(len(ids) for ids in on.values()) == [0, 1, 1]  # a has two workers; nobody holds half of b
    assert sorted(i for ids in on.values() for i in ids) == [f"gpudeck-{a['id']}-g1-t0", f"gpudeck-{a['id']}-g1-t1"]
    job_a = client.get(f"/api/v1/jobs/{a['id']}").json
    assert job_a["status"] == "starting"
    assert [(t["type"], t["task_index"], t["status"]) for t in job_a["tasks"]] == [
        ("worker", 0, "placed"),
        ("worker", 1, "placed"),
    ]
    assert {t["host"] for t in job_a["tasks"]} == {"h0", "h1"}  # spread over hosts first
    job_b = client.get(f"/api/v1/jobs/{b['id']}").json
    assert job_b["status"] == "queued" and job_b["tasks"] is None
    assert job_b["message"] == "waiting for 2 free CPU workers; 1 free now"

    # Canceling a placed job whose tasks have not started ends it at once and frees its workers for b.
    assert client.post(f"/api/v1/jobs/{a['id']}/cancel").json["status"] == "canceled"
    assert schedule.place(redis, DEFAULTS) == [b["id"]]
    assert sorted(i for ids in placed_on(redis, names).values() for i in ids) == [
        f"gpudeck-{b['id']}-g1-t0",
        f"gpudeck-{b['id']}-g1-t1",
    ]


def test_order_priority_and_queues(redis):
    cpu = [register(redis, f"c{i}") for i in range(2)]
    gpu = [register(redis, f"g{i}", gpus=(str(i),)) for i in range(2)]
    three = control.submit(redis, {**BASE, "workers": 3}, DEFAULTS)[0]  # more than there are: waits, first in line
    low = control.submit(redis, {**BASE, "workers": 2, "priority": "low"}, DEFAULTS)[0]
    high = control.submit(redis, {**BASE, "workers": 2, "priority": "high"}, DEFAULTS)[0]
    on_gpu = control.submit(redis, {**BASE, "workers": 2, "gpus": 1}, DEFAULTS)[0]
    status = {j["id"]: redis.hget(f"gpudeck:job:{j['id']}", "status").decode() for j in (three, low, high, on_gpu)}
    # high goes first in the cpu line; the 3-worker job stays ahead of low, so low cannot overtake it.
    assert status == {three["id"]: "queued", low["id"]: "queued", high["id"]: "starting", on_gpu["id"]: "starting"}
    assert all(len(ids) == 1 for ids in placed_on(redis, cpu + gpu).values())
    assert [i for n in gpu for i in placed_on(redis, [n])[n]] == [
        f"gpudeck-{on_gpu['id']}-g1-t0",
        f"gpudeck-{on_gpu['id']}-g1-t1",
    ]


def test_a_placement_that_does_not_gather_goes_back_in_line(redis, client):
    names = [register(redis, f"w{i}") for i in range(2)]
    job = control.submit(redis, {**BASE, "workers": 2}, DEFAULTS)[0]
    rec = client.get(f"/api/v1/jobs/{job['id']}").json
    assert rec["status"] == "starting"
    # Neither task arrived (their workers took other jobs); after RENDEZVOUS_S the reaper puts it back.
    redis.hset(f"gpudeck:job:{job['id']}", "placed_at", time.time() - gang.RENDEZVOUS_S - 1)
    reap(redis)
    rec = client.get(f"/api/v1/jobs/{job['id']}").json
    assert rec["status"] == "queued"
    assert rec["message"] == "placement 1 did not gather its 2 tasks in 60s; waiting again"
    assert placed_on(redis, names) == {"w0": [], "w1": []}
    assert schedule.place(redis, DEFAULTS) == [job["id"]]  # placed again, as a new generation
    assert sorted(i for ids in placed_on(redis, names).values() for i in ids) == [
        f"gpudeck-{job['id']}-g3-t0",
        f"gpudeck-{job['id']}-g3-t1",
    ]


@pytest.mark.parametrize("draining", [True, False])
def test_busy_draining_or_silent_workers_get_no_task(redis, draining):
    register(redis, "w0")
    register(redis, "w1")
    if draining:
        redis.set("gpudeck:worker:w1:drain", "1")
    else:
        redis.delete(keys.alive_key("w1"))  # its process stopped saying it is alive
    job = control.submit(redis, {**BASE, "workers": 2}, DEFAULTS)[0]
    assert redis.hget(f"gpudeck:job:{job['id']}", "status") == b"queued"
    assert placed_on(redis, ["w0", "w1"]) == {"w0": [], "w1": []}
