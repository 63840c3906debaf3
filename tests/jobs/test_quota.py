"""GPU quotas against a real Redis: what an owner holds, jobs over their owner's quota waiting in line without
holding up other users' jobs, and multi-worker jobs counted with every task's GPUs."""

import pytest

from jobs import quota, schedule, tokens
from jobs.errors import Forbidden
from jobs.queues import submit
from jobs.store import JobStore
from models.states import Status
from tests.support.policy import DEFAULTS
from tests.support.workers import register

ONE_GPU = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}, "gpus": 1}


@pytest.fixture
def owners(redis):
    tokens.create(redis, "alice", max_gpus=1)
    tokens.create(redis, "carol", max_gpus=2)
    tokens.create(redis, "bob")


def job(redis, owner: str, spec=ONE_GPU) -> int:
    return submit(redis, spec, DEFAULTS, extra={"owner": owner})["id"]


def start(redis, job_id: int, gpus: list[str]) -> None:
    assert JobStore(redis).transition(job_id, ("queued",), status=Status.STARTING.value, gpu_ids=gpus, worker="w")


def end(redis, job_id: int) -> None:
    assert JobStore(redis).transition(job_id, ("starting", "running"), status=Status.SUCCEEDED.value)


def test_held_counts_the_gpus_of_an_owners_active_jobs(redis, owners):
    first, second, third = job(redis, "alice"), job(redis, "alice"), job(redis, "bob")
    assert quota.held(redis, "alice") == 0
    start(redis, first, ["0"])
    start(redis, third, ["1"])
    assert quota.held(redis, "alice") == 1 and quota.held(redis, "bob") == 1
    end(redis, first)
    assert quota.held(redis, "alice") == 0 and JobStore(redis).get(second)["status"] == "queued"


def test_over_quota_a_job_waits_and_the_next_users_job_runs_then_it_goes_first(redis, owners):
    for name, gpu in (("w0", "0"), ("w1", "1"), ("w2", "2")):
        register(redis, name, gpus=(gpu,))
    a1, a2, b1, a3 = job(redis, "alice"), job(redis, "alice"), job(redis, "bob"), job(redis, "alice")
    store = JobStore(redis)
    assert schedule.place(redis, DEFAULTS) == [
        a1,
        b1,
    ]  # alice's second waits, saying why; bob's behind it is not held up
    assert store.get(a2)["message"] == "waiting: alice holds 1 of 1 GPU" and store.get(a2)["status"] == "queued"
    assert store.get(a3)["message"] == "waiting: alice holds 1 of 1 GPU"
    assert schedule.place(redis, DEFAULTS) == []  # alice still holds her GPU (a third one is free)
    end(redis, a1)
    assert schedule.place(redis, DEFAULTS) == [a2]  # the oldest of hers first
    assert store.get(a2).get("message") is None and store.get(a3)["status"] == "queued"


def test_without_a_quota_or_an_owner_every_job_may_start(redis, owners):
    for name, gpu in (("w0", "0"), ("w1", "1"), ("w2", "2"), ("w3", "3")):
        register(redis, name, gpus=(gpu,))
    ids = [job(redis, "bob") for _ in range(3)] + [submit(redis, ONE_GPU, DEFAULTS)["id"]]
    assert sorted(schedule.place(redis, DEFAULTS)) == ids
    tokens.revoke(redis, "alice")  # a revoked token's quota goes with it
    for name, gpu in (("w4", "4"), ("w5", "5")):
        register(redis, name, gpus=(gpu,))
    ids = [job(redis, "alice") for _ in range(2)]
    assert schedule.place(redis, DEFAULTS) == ids


def test_a_job_bigger_than_its_owners_quota_is_refused_at_submission(redis, owners):
    with pytest.raises(Forbidden) as err:
        submit(redis, {**ONE_GPU, "gpus": 2}, DEFAULTS, extra={"owner": "alice"})
    assert err.value.details["rule"] == "max_gpus" and "allows 1 at once" in str(err.value)
    assert redis.keys("gpudeck:job:*") == []
    assert job(redis, "carol", {**ONE_GPU, "gpus": 2})


def test_a_multi_worker_job_counts_every_tasks_gpus_and_waits_without_holding_up_others(redis, owners):
    gang_spec = {**ONE_GPU, "workers": 2}
    for name, gpu in (("w0", "0"), ("w1", "1"), ("w2", "2"), ("w3", "3")):
        register(redis, name, gpus=(gpu,))
    c1 = job(redis, "carol", gang_spec)
    assert schedule.place(redis, DEFAULTS) == [c1]
    assert quota.held(redis, "carol") == 2  # both tasks' GPUs
    c2, b1 = job(redis, "carol", gang_spec), job(redis, "bob", gang_spec)
    assert schedule.place(redis, DEFAULTS) == [b1]  # carol's second waits; bob's, behind it in line, is placed
    assert JobStore(redis).get(c2)["message"] == "waiting: carol holds 2 of 2 GPUs"
    assert quota.holders(redis)[("box", "0")] == [
        {"job_id": c1, "owner": "carol", "kind": "job", "gpu_memory": None, "part": 1.0}
    ]
    assert {h["owner"] for v in quota.holders(redis).values() for h in v} == {"carol", "bob"}
