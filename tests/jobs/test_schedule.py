"""The scheduler against a real Redis: GPUs per job, reservations, best fit, fair share, preemption, dependencies,
bounded sweeps and foreign GPU processes. The workers are registered the way `gpudeck worker` registers itself but
not started, so each test sees exactly what a round hands out (tests/e2e/test_sharing.py runs the real stack)."""

import time
from dataclasses import replace

import pytest

from jobs import control, gang, gpus, lifecycle, outcome, queues, schedule, sweeps
from jobs.errors import ReferenceNotFound, ValidationError
from jobs.keys import gpus_key, rq_hold_id, rq_job_id, stop_key
from jobs.store import JobStore
from jobs.worker import describe
from models.states import Status
from tests.support.policy import DEFAULTS
from tests.support.workers import JOB, box, placed_on, rec, register, running, submit, succeed


def test_a_job_runs_on_any_k_free_gpus_of_a_host_and_the_others_keep_serving(redis):
    names = box(redis, 4)
    two, one_a, one_b = submit(redis, gpus=2), submit(redis), submit(redis)
    for job_id in (two, one_a, one_b):
        assert rec(redis, job_id)["status"] == "starting"
    r = rec(redis, two)
    assert sorted(r["gpu_ids"]) == ["0", "1"] and r["slots"] == names[:2] and r["worker"] == names[0]
    on = placed_on(redis, names)
    assert on[names[0]] == [rq_job_id(two, 1)]  # the first worker of the place runs it, on both GPUs
    assert on[names[1]] == [rq_hold_id(two, r["gen"], 0)]  # the other holds its GPU meanwhile
    assert [rec(redis, i)["gpu_ids"] for i in (one_a, one_b)] == [["2"], ["3"]]


def test_a_job_bigger_than_every_host_is_refused_at_submission(redis, client):
    box(redis, 4)
    resp = client.post("/api/v1/jobs", json={**JOB, "gpus": 5})
    assert resp.status_code == 400 and resp.json["details"]["fields"] == {
        "gpus": "needs 5 GPUs on one host; the largest host, box, has 4"
    }
    assert redis.keys("gpudeck:job:*") == []
    with pytest.raises(ValidationError):  # each task of a multi-worker job on one host too
        control.submit(redis, {**JOB, "gpus": 5, "workers": 2}, DEFAULTS)


def test_a_waiting_3_gpu_job_is_not_starved_by_a_stream_of_1_gpu_jobs(redis):
    box(redis, 4)
    first = [submit(redis) for _ in range(4)]
    three = submit(redis, gpus=3)
    assert rec(redis, three)["message"] == "waiting for 3 GPUs on one host; 0 free on one host now"
    stream = [submit(redis) for _ in range(3)]
    for i, job_id in enumerate(first[:3]):
        succeed(redis, job_id)  # a GPU frees: it is kept for the 3-GPU job, not handed to the stream
        assert schedule.place(redis, DEFAULTS) == ([three] if i == 2 else [])
    assert sorted(rec(redis, three)["gpu_ids"]) == ["0", "1", "2"]
    assert all(rec(redis, i)["status"] == "queued" for i in stream)
    succeed(redis, first[3])
    assert schedule.place(redis, DEFAULTS) == stream[:1]


def test_a_1_gpu_job_goes_where_it_splits_no_free_pair(redis):
    box(redis, 2, host="a")
    box(redis, 4, host="b")
    held = [submit(redis) for _ in range(2)]  # best fit: the two land on host a, the smaller
    assert {rec(redis, i)["worker"].split(".")[0] for i in held} == {"a"}
    pairs = [submit(redis, gpus=2) for _ in range(2)]
    assert all(rec(redis, i)["status"] == "starting" for i in pairs)  # host b's four GPUs: two pairs


def test_fair_share_the_owner_who_used_least_goes_next(redis):
    names = box(redis, 1)
    alice = [submit(redis, owner="alice") for _ in range(20)]
    assert rec(redis, alice[0])["status"] == "starting"
    bob = [submit(redis, owner="bob") for _ in range(2)]
    running(redis, alice[0], ago=600)
    succeed(redis, alice[0])  # alice has used 600 GPU-seconds, bob none
    assert schedule.place(redis, DEFAULTS) == [bob[0]]
    line = queues.positions(redis, [rec(redis, i) for i in (*alice[1:3], bob[1])], DEFAULTS)
    assert line[bob[1]] < line[alice[1]] < line[alice[2]]
    assert placed_on(redis, names)[names[0]][-1] == rq_job_id(bob[0], 1)


def test_without_fair_share_the_line_is_first_come_first_served(redis, settings):
    box(redis, 1)
    fifo = replace(settings, fairshare=False)
    alice = [submit(redis, fifo, owner="alice") for _ in range(3)]
    bob = submit(redis, fifo, owner="bob")
    running(redis, alice[0], ago=600)
    succeed(redis, alice[0])
    assert schedule.place(redis, fifo) == [alice[1]]
    assert queues.positions(redis, [rec(redis, i) for i in (alice[2], bob)], fifo) == {alice[2]: 1, bob: 2}


@pytest.fixture
def now_settings(settings):
    return replace(settings, preempt_after_s=60)


def test_a_high_job_preempts_the_fewest_lowest_most_recent_jobs_and_takes_their_gpus(redis, now_settings):
    s = now_settings
    names = box(redis, 4)
    old_low, new_low = submit(redis, s, priority="low"), submit(redis, s, priority="low")
    pair_low = submit(redis, s, priority="low", gpus=2)
    for job_id, ago in ((old_low, 3000), (new_low, 2000), (pair_low, 2500)):
        running(redis, job_id, ago)
    waiting_low = submit(redis, s, priority="low")  # queued before the high job: it must not take what that frees
    high = submit(redis, s, priority="high", gpus=2)
    # one victim suffices (the 2-GPU low job), rather than the two most recent 1-GPU ones
    assert redis.get(stop_key(pair_low)) == b"preempted" and redis.get(stop_key(new_low)) is None
    assert rec(redis, high)["message"] == f"preempting job {pair_low} (low)"
    assert rec(redis, pair_low)["preempted_by"]["id"] == high
    assert schedule.place(redis, s) == []  # no second victim while the first stops
    assert redis.get(stop_key(old_low)) is None and redis.get(stop_key(new_low)) is None
    # its work-horse saw the stop: SIGTERM, checkpoint, and the end of the table puts it back in line
    JobStore(redis).update(pair_low, progress={"step": 3400})
    assert lifecycle.end(redis, pair_low, outcome.STOPPED["preempted"], checkpoint_step=3200) == "queued"
    victim = rec(redis, pair_low)
    assert (victim["status"], victim["reason"], victim["preemptions"], victim["attempt"]) == (
        "queued",
        "preempted",
        1,
        2,
    )
    assert victim["message"] == (
        f"preempted by job {high} (high) at step 3,400; resumes from the checkpoint of step 3,200"
    )
    assert schedule.place(redis, s) == [high]  # the freed pair, not the normal job that waited longer
    assert sorted(rec(redis, high)["gpu_ids"]) == ["2", "3"] and set(rec(redis, high)["slots"]) == set(names[2:])
    assert rec(redis, waiting_low)["status"] == "queued"


def test_a_preemption_is_no_retry(redis, now_settings):
    box(redis, 1)
    low = submit(redis, now_settings, priority="low", max_retries=0)
    running(redis, low)
    submit(redis, now_settings, priority="high")
    assert lifecycle.end(redis, low, outcome.STOPPED["preempted"]) == "queued"
    assert "no checkpoint yet: it starts over" in rec(redis, low)["message"]
    # then its worker is lost: its one retry... it has none (max_retries 0), yet the preemption used none
    JobStore(redis).transition(low, ("queued",), status="running", started_at=time.time())
    assert lifecycle.end(redis, low, outcome.lost("no heartbeat")) == "failed"


def test_a_preempted_job_says_how_long_it_ran_in_all(redis, now_settings):
    """Issue 42 #5: `elapsed_s` is this attempt's; `ran_s` adds the attempts before it (kept at each requeue), so a
    job preempted after an hour does not read as twenty seconds old once it runs again."""
    from jobs.views import job_view

    box(redis, 1)
    low = submit(redis, now_settings, priority="low")
    running(redis, low, ago=600.0)  # (its work-horse started it ten minutes ago)
    submit(redis, now_settings, priority="high")
    assert lifecycle.end(redis, low, outcome.STOPPED["preempted"]) == "queued"
    waiting = job_view(rec(redis, low))
    assert 599 <= waiting["ran_s"] <= 660 and waiting["attempt"] == 2  # (queued again: its earlier time only)
    t = time.time() - 20
    JobStore(redis).transition(low, ("queued",), status="running", started_at=t, running_at=t)
    again = job_view(rec(redis, low))
    assert 19 <= again["elapsed_s"] <= 40 and 619 <= again["ran_s"] <= 700


@pytest.mark.parametrize("why", ["too_young", "not_preemptible", "preempt_off", "same_priority", "over_quota"])
def test_who_is_never_preempted_and_who_never_preempts(redis, now_settings, why):
    from jobs import tokens

    s = replace(now_settings, preempt=why != "preempt_off")
    box(redis, 2 if why == "over_quota" else 1)
    tokens.create(redis, "alice", max_gpus=1 if why == "over_quota" else None)
    if why == "over_quota":  # alice holds her one GPU: her high job may not take a second from anyone
        mine = submit(redis, s, owner="alice", priority="high")
        running(redis, mine)
    low = submit(redis, s, priority="normal" if why == "same_priority" else "low", preemptible=why != "not_preemptible")
    running(redis, low, ago=10 if why == "too_young" else 3600)
    owner = "alice" if why == "over_quota" else None
    high = submit(redis, s, owner=owner, priority="normal" if why == "same_priority" else "high")
    assert redis.get(stop_key(low)) is None and rec(redis, high)["status"] == "queued"
    assert "preempting" not in (rec(redis, high).get("message") or "")


def test_dependencies_wait_for_success_and_cancel_on_failure(redis):
    box(redis, 1)
    a, b = submit(redis), submit(redis)
    c = submit(redis, after=[a, b])
    assert rec(redis, c)["message"] == f"waiting for jobs {a}, {b}" and rec(redis, c)["status"] == "queued"
    running(redis, a)
    succeed(redis, a)
    schedule.place(redis, DEFAULTS)
    running(redis, b)
    succeed(redis, b)
    assert schedule.place(redis, DEFAULTS) == [c]  # both succeeded: into the line, and placed
    d = submit(redis)
    e = submit(redis, after=[d])
    control.cancel(redis, d)
    schedule.place(redis, DEFAULTS)
    failed = rec(redis, e)
    assert (failed["status"], failed["reason"], failed["message"]) == (
        "canceled",
        "dependency_failed",
        f"job {d} it depends on canceled",
    )
    with pytest.raises(ReferenceNotFound) as err:
        submit(redis, after=[999])
    assert "after" in err.value.fields and rec(redis, c)["status"] == "starting"


def _records_read(redis, action) -> int:
    """How many job records (HGETALL) `action` reads."""

    def calls() -> int:
        return int(redis.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))

    before = calls()
    action()
    return calls() - before


def test_a_round_looks_only_at_the_dependants_of_a_job_that_ended_not_every_waiting_job(redis):
    """Issue 41 §3: with 300 jobs waiting on one running job, a round reads none of their records; when
    another job ends, exactly its dependants are looked at (and join the line); every AFTER_SWEEP_S one round of
    the box looks at all of them (the net under the index: a job queued before the index, or a change missed)."""
    from jobs.keys import AFTER_SWEPT_KEY, dependants_key

    box(redis, 2)
    long, short = submit(redis), submit(redis)
    running(redis, long)
    running(redis, short)
    many = [submit(redis, after=[long]) for _ in range(300)]
    few = [submit(redis, after=[short]) for _ in range(5)]
    schedule.place(redis, DEFAULTS)  # (the first round of the box: a sweep of everything, and the new ones)
    assert redis.exists(AFTER_SWEPT_KEY)
    idle = _records_read(redis, lambda: schedule.place(redis, DEFAULTS))
    assert idle < 20, idle  # (the running job, the workers' own: not the 305 waiting)
    succeed(redis, short)
    ended = _records_read(redis, lambda: schedule.place(redis, DEFAULTS))
    assert 5 <= ended < 25, ended
    assert [rec(redis, j)["status"] for j in few] == ["starting"] + ["queued"] * 4  # (in line; one on the free GPU)
    assert not any(redis.sismember("gpudeck:after", j) for j in few)
    assert all(rec(redis, j)["message"] == f"waiting for job {long}" for j in many[:3])
    # jobs the index does not know of (as ones queued before it existed) wait for the sweep, then join their line
    redis.delete(dependants_key(long), "gpudeck:after:check")
    succeed(redis, long)
    schedule.place(redis, DEFAULTS)
    assert all(redis.sismember("gpudeck:after", j) for j in many)  # (only the sweep looks at them now)
    redis.delete(AFTER_SWEPT_KEY)  # (AFTER_SWEEP_S later)
    swept = _records_read(redis, lambda: schedule.place(redis, DEFAULTS))
    assert swept >= 300 and not any(redis.sismember("gpudeck:after", j) for j in many), swept
    assert not redis.exists(dependants_key(short))  # (used once, at its end)


def test_a_sweep_holds_at_most_max_concurrent_workers_and_holds_up_nobody_else(redis):
    box(redis, 4)
    body = {"base": {**JOB}, "grid": {"params.lr": [0.1, 0.2, 0.3, 0.4]}, "max_concurrent": 2}
    sweep = sweeps.create(redis, body, DEFAULTS)
    schedule.place(redis, DEFAULTS)
    states = [rec(redis, i)["status"] for i in sweep["job_ids"]]
    assert states == ["starting", "starting", "queued", "queued"]
    assert rec(redis, sweep["job_ids"][2])["message"] == f"waiting: sweep {sweep['id']} runs 2 of 2 at once"
    other = submit(redis)
    assert rec(redis, other)["status"] == "starting"
    succeed(redis, sweep["job_ids"][0])
    assert schedule.place(redis, DEFAULTS) == [sweep["job_ids"][2]]
    with pytest.raises(ValidationError):
        sweeps.create(redis, {**body, "max_concurrent": 0}, DEFAULTS)


def test_a_gpu_a_foreign_process_fills_takes_no_job(redis):
    names = box(redis, 2)
    sample = {
        "host": "box",
        "gpus": [
            {"index": 0, "processes": [{"pid": 4242, "user": "bob", "used_memory_mib": 30822, "job_id": None}]},
            {"index": 1, "processes": [{"pid": 77, "used_memory_mib": 200, "job_id": None}]},  # small: ignored
        ],
    }
    gpus.write_sample(redis, "box", sample)
    first, second = submit(redis), submit(redis)
    assert rec(redis, first)["gpu_ids"] == ["1"] and rec(redis, second)["status"] == "queued"
    state = {w["name"]: w["state"] for w in describe(redis)}
    assert state[names[0]] == "waiting: pid 4242 (bob) uses 30.1 GiB of GPU 0"
    redis.delete(gpus_key("box"))  # bob's notebook ended
    assert schedule.place(redis, DEFAULTS) == [second]


def test_a_placed_job_that_is_canceled_frees_its_gpus(redis):
    names = box(redis, 2)
    two = submit(redis, gpus=2)
    control.cancel(redis, two)  # placed, its work-horse not started yet: it ends once its worker sees the stop
    r = rec(redis, two)
    assert r["status"] in ("starting", "canceled")
    lifecycle.end(redis, two, outcome.STOPPED["canceled"])
    assert not gang.current(redis, two, r["gen"])  # the held worker lets go
    assert submit(redis) and placed_on(redis, names)
    assert Status(rec(redis, two)["status"]).ended


def test_a_waiting_jobs_message_counts_free_gpus_not_idle_slots(redis):
    """Issue 64: with one GPU of four job slots held whole, a waiting job read `3 free on one host now` (its idle
    slots); no GPU is free."""
    for k in range(4):
        register(redis, f"box.gpu0-{k}", gpus=("0",))
    first, second = submit(redis), submit(redis)
    assert rec(redis, first)["gpu_ids"] == ["0"]
    assert rec(redis, second)["message"] == "waiting for 1 GPU on one host; 0 free on one host now"
