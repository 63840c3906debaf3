"""GPU quotas against a real Redis and RQ's real queues: what an owner holds, claims two workers race for, jobs
parked off their queue (not holding up other users' jobs) and put back at the front when the quota allows, and
multi-worker jobs counted with every task's GPUs."""

import pytest
from rq import Queue

from jobs import gang, quota, tokens
from jobs.errors import Forbidden
from jobs.keys import rq_job_id
from jobs.queues import submit
from jobs.store import JobStore
from models.states import Status
from tests.support.workers import register

ONE_GPU = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}, "gpus": 1}


@pytest.fixture
def owners(redis):
    tokens.create(redis, "alice", max_gpus=1)
    tokens.create(redis, "carol", max_gpus=2)
    tokens.create(redis, "bob")


def job(redis, owner: str, spec=ONE_GPU) -> int:
    return submit(redis, spec, extra={"owner": owner})["id"]


def start(redis, job_id: int, gpus: list[str]) -> None:
    assert JobStore(redis).transition(job_id, ("queued",), status=Status.STARTING.value, gpu_ids=gpus, worker="w")


def end(redis, job_id: int) -> None:
    assert JobStore(redis).transition(job_id, ("starting", "running"), status=Status.SUCCEEDED.value)


def take(redis, queue: str = "gpus-1") -> int | None:
    """What a worker does: pop the next job id off the queue and ask whether it may run it."""
    q = Queue(queue, connection=redis)
    raw = redis.lmove(q.key, q.intermediate_queue.key)  # (as RQ's dequeue does)
    if raw is None:
        return None
    rq_id = raw.decode()
    job_id = int(rq_id.split("-")[1])
    return job_id if quota.admit(redis, job_id, rq_id, queue) else -job_id


def test_held_counts_active_jobs_and_fresh_claims_and_a_claim_races_one_winner(redis, owners):
    first, second, third = job(redis, "alice"), job(redis, "alice"), job(redis, "bob")
    assert quota.held(redis, "alice") == 0
    assert quota.claim(redis, "alice", first, 1, 1) == (True, 0)
    assert quota.claim(redis, "alice", second, 1, 1) == (False, 1)  # the other worker's claim counts at once
    assert quota.held(redis, "alice") == 1 and quota.held(redis, "bob") == 0
    start(redis, first, ["0"])  # started: counted from the record, the claim is dropped
    assert quota.held(redis, "alice") == 1 and quota.claim(redis, "alice", second, 1, 1) == (False, 1)
    start(redis, third, ["1"])
    assert quota.held(redis, "bob") == 1 and quota.held(redis, "alice") == 1
    end(redis, first)
    assert quota.held(redis, "alice") == 0 and quota.claim(redis, "alice", second, 1, 1) == (True, 0)


def test_a_claim_of_a_job_that_ended_or_was_taken_long_ago_counts_nothing(redis, owners, monkeypatch):
    first, second = job(redis, "alice"), job(redis, "alice")
    assert quota.claim(redis, "alice", first, 1, 1)[0]
    JobStore(redis).transition(first, ("queued",), status=Status.CANCELED.value)
    assert quota.held(redis, "alice") == 0
    monkeypatch.setattr(quota, "CLAIM_TTL_S", -1)  # (claims that are old at once)
    assert quota.claim(redis, "alice", second, 1, 1)[0]
    third = job(redis, "alice")  # second's worker died before its work-horse started it: its claim lapses
    assert quota.claim(redis, "alice", third, 1, 1)[0] and quota.held(redis, "alice") == 0


def test_over_quota_a_job_is_parked_and_the_next_users_job_runs_then_it_goes_back_first(redis, owners):
    a1, a2, b1, a3 = job(redis, "alice"), job(redis, "alice"), job(redis, "bob"), job(redis, "alice")
    store = JobStore(redis)
    assert take(redis) == a1
    start(redis, a1, ["0"])
    assert take(redis) == -a2  # parked: off the queue (RQ's intermediate list too), saying why
    assert Queue("gpus-1", connection=redis).intermediate_queue.get_job_ids() == [rq_job_id(a1, 1)]
    assert store.get(a2)["message"] == "waiting: alice holds 1 of 1 GPU" and store.get(a2)["status"] == "queued"
    assert quota.parked(redis) == {a2}
    assert take(redis) == b1  # bob's job behind it is not held up
    assert take(redis) == -a3 and quota.parked(redis) == {a2, a3}
    assert quota.unpark(redis) == []  # alice still holds her GPU
    end(redis, a1)
    assert quota.unpark(redis) == [a2]  # the oldest first, at the front of its queue
    assert Queue("gpus-1", connection=redis).job_ids == [rq_job_id(a2, 1)]
    assert store.get(a2).get("message") is None and quota.parked(redis) == {a3}
    assert take(redis) == a2
    start(redis, a2, ["0"])
    assert quota.unpark(redis) == [] and store.get(a3)["message"] == "waiting: alice holds 1 of 1 GPU"


def test_a_parked_job_that_is_canceled_leaves_the_parking(redis, owners):
    a1, a2 = job(redis, "alice"), job(redis, "alice")
    assert take(redis) == a1
    start(redis, a1, ["0"])
    assert take(redis) == -a2
    JobStore(redis).transition(a2, ("queued",), status=Status.CANCELED.value)
    assert quota.unpark(redis) == [] and quota.parked(redis) == set()


def test_without_a_quota_or_an_owner_every_job_is_admitted(redis, owners):
    ids = [job(redis, "bob") for _ in range(3)] + [submit(redis, ONE_GPU)["id"]]
    assert [take(redis) for _ in ids] == ids
    tokens.revoke(redis, "alice")  # a revoked token's quota goes with it
    ids = [job(redis, "alice") for _ in range(2)]
    assert [take(redis) for _ in ids] == ids


def test_a_job_bigger_than_its_owners_quota_is_refused_at_submission(redis, owners):
    with pytest.raises(Forbidden) as err:
        submit(redis, {**ONE_GPU, "gpus": 2}, extra={"owner": "alice"})
    assert err.value.details["rule"] == "max_gpus" and "allows 1 at once" in str(err.value)
    assert redis.keys("gpudeck:job:*") == []
    assert job(redis, "carol", {**ONE_GPU, "gpus": 2})


def test_a_multi_worker_job_counts_every_tasks_gpus_and_waits_without_holding_up_others(redis, owners):
    gang_spec = {**ONE_GPU, "workers": 2}
    for name, gpu in (("w0", "0"), ("w1", "1"), ("w2", "2"), ("w3", "3")):
        register(redis, name, gpus=(gpu,))
    c1 = job(redis, "carol", gang_spec)
    assert gang.place(redis) == [c1]
    assert quota.held(redis, "carol") == 2  # both tasks' GPUs
    c2, b1 = job(redis, "carol", gang_spec), job(redis, "bob", gang_spec)
    assert gang.place(redis) == [b1]  # carol's second waits; bob's, behind it in line, is placed
    assert JobStore(redis).get(c2)["message"] == "waiting: carol holds 2 of 2 GPUs"
    assert quota.holders(redis)[("box", "0")] == {"job_id": c1, "owner": "carol"}
    assert {v["owner"] for v in quota.holders(redis).values()} == {"carol", "bob"}
