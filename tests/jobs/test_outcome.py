"""The job-end table (jobs.outcome) and how jobs.lifecycle applies it, against a real Redis: no worker needed."""

import signal

import pytest

from jobs import control, lifecycle, outcome
from jobs.keys import line_key
from jobs.store import JobStore
from models.protocol import EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_STOPPED
from models.states import Reason, Status
from tests.support.policy import DEFAULTS

BASE = {"model": "resnet20", "dataset": "synthetic", "params": {"steps": 2}}


@pytest.mark.parametrize(
    "stop, returncode, has_result, oom, expected",
    [
        (None, 0, True, False, (Status.SUCCEEDED, None, None)),
        ("canceled", 0, True, False, (Status.SUCCEEDED, None, None)),  # it finished before the stop landed
        ("canceled", EXIT_STOPPED, False, False, (Status.CANCELED, Reason.CANCELED, "canceled on request")),
        ("canceled", None, False, False, (Status.CANCELED, Reason.CANCELED, "canceled on request")),
        ("timeout", -9, False, False, (Status.FAILED, Reason.TIMEOUT, "the job ran past its timeout")),
        (
            "worker_lost",
            EXIT_STOPPED,
            False,
            False,
            (Status.FAILED, Reason.WORKER_LOST, "its worker shut down while it ran"),
        ),
        (
            None,
            EXIT_BAD_INPUT,
            False,
            False,
            (Status.FAILED, Reason.BAD_INPUT, "the trainer refused the spec or its data"),
        ),
        (None, -9, False, True, (Status.FAILED, Reason.OOM, "the training process ran out of memory")),
        (None, -9, False, False, (Status.FAILED, Reason.EXIT_NONZERO, "the trainer was killed by SIGKILL")),
        (None, 0, False, False, (Status.FAILED, Reason.EXIT_NONZERO, "the trainer exited without a result")),
        (None, 1, False, False, (Status.FAILED, Reason.EXIT_NONZERO, "the trainer exited with status 1")),
    ],
)
def test_the_table_for_a_single_job(stop, returncode, has_result, oom, expected):
    end = outcome.of_job(outcome.Facts(stop, returncode, has_result, oom))
    assert (end.status, end.reason, end.message) == expected
    assert end.retry == (end.reason == Reason.WORKER_LOST)


def test_a_commands_exit_status_means_only_success_or_failure():
    assert (
        outcome.of_job(outcome.Facts(None, 0, False, False, command=True)) == outcome.SUCCEEDED
    )  # no result.json needed
    end = outcome.of_job(
        outcome.Facts(None, EXIT_BAD_INPUT, False, False, command=True)
    )  # argparse's usage error, not ours
    assert (end.reason, end.message) == (Reason.EXIT_NONZERO, "the command exited with status 2")
    assert outcome.of_job(outcome.Facts("canceled", EXIT_STOPPED, False, False, command=True)).status == Status.CANCELED
    assert (
        outcome.of_task(outcome.Facts(None, 2, oom=False, command=True))[1].message
        == "the command exited with status 2"
    )


@pytest.mark.parametrize(
    "kind, stop, returncode, expected",
    [
        ("shell", None, 0, (Status.SUCCEEDED, None)),
        ("shell", None, 1, (Status.SUCCEEDED, None)),  # `exit 1` typed (or the last command's status): not a failure
        ("shell", "idle", -1, (Status.CANCELED, Reason.IDLE)),
        ("notebook", "idle", 0, (Status.CANCELED, Reason.IDLE)),
        ("shell", "timeout", -9, (Status.FAILED, Reason.TIMEOUT)),
        ("notebook", "canceled", 0, (Status.CANCELED, Reason.CANCELED)),  # (Jupyter exits 0 on SIGTERM)
        ("notebook", None, 1, (Status.FAILED, Reason.EXIT_NONZERO)),  # its server failed by itself
        ("shell", "worker_lost", -15, (Status.FAILED, Reason.WORKER_LOST)),
    ],
)
def test_the_table_for_a_session(kind, stop, returncode, expected):
    end = outcome.of_job(outcome.Facts(stop, returncode, False, False, command=True, session=kind))
    assert (end.status, end.reason) == expected
    if stop == "timeout":
        assert end.message == "the session reached its max time"
    if kind == "shell" and stop is None:
        assert end.message == f"the session ended: its shell exited with status {returncode}"


def test_a_diverged_trainer_fails_as_diverged_and_says_where():
    event = {"step": 37, "loss": "nan", "checkpoint_step": 32}
    end = outcome.of_job(outcome.Facts(None, EXIT_DIVERGED, False, False, diverged=event))
    assert (end.status, end.reason, end.retry) == (Status.FAILED, Reason.DIVERGED, False)
    assert end.message == "the training loss became nan at step 37; the checkpoint of step 32 is kept"
    end = outcome.of_job(
        outcome.Facts(None, EXIT_DIVERGED, False, False, diverged={**event, "loss": "inf", "checkpoint_step": None})
    )
    assert end.message == "the training loss became inf at step 37; no checkpoint was saved before it"
    assert (
        outcome.of_task(outcome.Facts(None, EXIT_DIVERGED, oom=False))[1].reason == Reason.DIVERGED
    )  # a task without the event
    assert (
        outcome.of_job(outcome.Facts("canceled", EXIT_DIVERGED, False, False, diverged=event)).status == Status.CANCELED
    )
    assert (
        outcome.of_job(outcome.Facts(None, EXIT_DIVERGED, False, False, command=True)).reason == Reason.EXIT_NONZERO
    )  # a script's 3


def test_out_of_memory_from_the_kernel_or_the_log():
    assert outcome.out_of_memory(-signal.SIGKILL, [], oom_killed=True)
    assert not outcome.out_of_memory(-signal.SIGKILL, [], oom_killed=False)
    assert outcome.out_of_memory(1, ["tensorflow ResourceExhaustedError: OOM when allocating"], oom_killed=False)
    assert not outcome.out_of_memory(0, ["out of memory"], oom_killed=False)  # a clean exit is not an OOM


def test_the_first_task_to_fail_is_blamed_not_its_peer():
    tasks = [
        {
            "label": "worker1",
            "worker": "w1",
            "status": "failed",
            "reason": "exit_nonzero",
            "message": "peer gone",
            "exited_at": 9,
        },
        {
            "label": "worker0",
            "worker": "w0",
            "status": "failed",
            "reason": "oom",
            "message": "out of memory",
            "exited_at": 5,
        },
    ]
    end, blamed = outcome.of_tasks(outcome.TASK_FAILED, tasks, 2, has_result=False)
    assert (end.status, end.reason, end.message) == (Status.FAILED, Reason.OOM, "task worker0 on w0: out of memory")
    assert blamed is tasks[1]
    lost = [{**tasks[0], "reason": "worker_lost"}]
    end, blamed = outcome.of_tasks("worker_lost", lost, 2, has_result=False)
    assert (end.reason, end.message, end.retry) == (Reason.WORKER_LOST, "task worker1 lost worker w1", True)
    done = [{"label": f"worker{i}", "worker": f"w{i}", "status": "succeeded"} for i in range(2)]
    assert outcome.of_tasks(None, done, 2, has_result=True)[0] == outcome.SUCCEEDED
    assert outcome.of_tasks(None, done, 2, has_result=False)[0].message == "a task stopped without a result"
    stopped = [{"label": f"worker{i}", "worker": f"w{i}", "status": "stopped"} for i in range(2)]
    end, _ = outcome.of_tasks("preempted", stopped, 2, has_result=False)  # preempted as a whole: back in line
    assert (end.status, end.reason, end.requeue, end.retry) == (Status.QUEUED, Reason.PREEMPTED, True, False)
    assert (
        outcome.of_job(outcome.Facts("preempted", 0, True, False)) == outcome.SUCCEEDED
    )  # it finished within the grace
    assert outcome.of_job(outcome.Facts("preempted", -15, False, False)).requeue


def test_a_stop_that_came_after_the_last_step_is_no_stop():
    """Issue 42 #3: a search asked a trial to stop as its trainer wrote its result: it finished; a command that
    exits 0 on the stop's SIGTERM still ends stopped early (its exit says nothing of having finished)."""
    assert outcome.of_job(outcome.Facts("stopped_early", 0, has_result=True)) == outcome.SUCCEEDED
    assert outcome.of_job(outcome.Facts("stopped_early", -15)).reason == Reason.STOPPED_EARLY
    assert (
        outcome.of_job(outcome.Facts("stopped_early", 0, has_result=True, command=True)).reason == Reason.STOPPED_EARLY
    )


def _running(redis, **spec):
    rec, _ = control.submit(redis, {**BASE, **spec}, DEFAULTS)
    JobStore(redis).transition(rec["id"], (Status.QUEUED.value,), status=Status.RUNNING.value)
    return JobStore(redis).get(rec["id"])


def test_worker_lost_is_retried_while_retries_last_then_fails(redis):
    rec = _running(redis, max_retries=1)
    store = JobStore(redis)
    assert lifecycle.end(redis, rec["id"], outcome.lost("no heartbeat"), log_tail=["x"]) == "queued"
    again = store.get(rec["id"])
    assert (again["status"], again["attempt"], again["message"]) == ("queued", 2, "no heartbeat; retrying")
    assert redis.zscore(line_key("normal", None), rec["id"]) == rec["id"]  # back in line, at its old place
    store.transition(rec["id"], (Status.QUEUED.value,), status=Status.RUNNING.value)
    assert lifecycle.end(redis, rec["id"], outcome.lost("no heartbeat")) == "failed"
    final = store.get(rec["id"])
    assert (final["status"], final["reason"], final["message"]) == ("failed", "worker_lost", "no heartbeat")
    assert store.active_ids() == []


def test_an_end_applies_once(redis):
    rec = _running(redis)
    first = lifecycle.end(redis, rec["id"], outcome.STOPPED["canceled"], log_tail=["bye"])
    assert first == "canceled"
    assert lifecycle.end(redis, rec["id"], outcome.SUCCEEDED) is None  # another path came second: nothing changes
    final = JobStore(redis).get(rec["id"])
    assert (final["status"], final["log_tail"]) == ("canceled", ["bye"])


def test_a_job_retried_goes_back_in_line_at_its_old_place(redis):
    rec = _running(redis, workers=2, max_retries=1)
    line = line_key("normal", None)
    redis.zrem(line, rec["id"])  # as placement takes it out of line
    assert lifecycle.end(redis, rec["id"], outcome.lost("task worker1 lost worker w1")) == "queued"
    assert redis.zscore(line, rec["id"]) == rec["id"]


def test_cancel_while_queued_leaves_the_queue(redis):
    rec, _ = control.submit(redis, BASE, DEFAULTS)
    job = control.cancel(redis, rec["id"])
    assert (job["status"], job["reason"], job["message"]) == ("canceled", "canceled", "canceled while queued")
    assert redis.zcard(line_key("normal", None)) == 0


def test_a_job_the_gpus_mps_server_ended_for_another_jobs_fault_is_retried_and_not_charged(redis):
    tail = ["RuntimeError: CUDA error: the MPS client has been terminated by the server"]
    assert outcome.mps_fault(1, ["cudaErrorMpsClientTerminated"]) and outcome.mps_fault(-6, tail)
    assert not outcome.mps_fault(1, ["CUDA error: an illegal memory access was encountered"])  # (the faulty one)
    assert not outcome.mps_fault(0, tail)
    end = outcome.of_job(outcome.Facts(None, 1, command=True, mps_fault=True))
    assert (end.status, end.reason, end.retry, end.charged) == (Status.FAILED, Reason.WORKER_LOST, True, False)
    assert outcome.of_job(outcome.Facts("canceled", 1, mps_fault=True)).status == Status.CANCELED  # (a stop first)
    rec = _running(redis, max_retries=1)
    store = JobStore(redis)
    store.update(rec["id"], started_at=1.0)  # (it held its GPU a long while)
    assert lifecycle.end(redis, rec["id"], end) == "queued"
    assert store.get(rec["id"])["message"] == (
        "its GPU's MPS server ended it after a fault of another job sharing the GPU (not its own); retrying"
    )
    assert redis.hgetall("gpudeck:share") == {}  # its owner is not charged for the attempt
    other = _running(redis, max_retries=1)
    store.update(other["id"], started_at=1.0)
    assert lifecycle.end(redis, other["id"], outcome.lost("no heartbeat")) == "queued"
    assert list(redis.hgetall("gpudeck:share")) == [b"-"]  # (where a worker was lost, the attempt is charged)
