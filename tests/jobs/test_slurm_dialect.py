"""Slurm's dialect (jobs/slurm.py): a job spec as sbatch's options, squeue's lines, and Slurm's states in gpudeck's
words. tests/slurm/ checks the same against a real one-node Slurm (`make test-slurm`)."""

from __future__ import annotations

import json

import pytest

from jobs.record import Kept
from jobs.slurm import (
    SQUEUE_FORMAT,
    NotOnSlurm,
    SlurmJob,
    SlurmOptions,
    base_port,
    job_id_of,
    job_name,
    parse_squeue,
    rendezvous,
    sbatch_options,
    seen,
    slurm_time,
    tasks_per_node,
)

OPTS = SlurmOptions(partition="gpu", account="lab", qos={"high": "urgent"}, low_nice=500, grace_s=90)


def options(spec: dict, **more) -> list[str]:
    return sbatch_options(12, Kept(spec), OPTS, output="/home/jobs/12/slurm.out", **more)


def test_a_one_gpu_job_asks_for_its_gpu_its_time_and_a_signal_before_the_end():
    argv = options({"model": "resnet20", "gpus": 1, "timeout": 3600})
    assert argv == [
        "--job-name=gpudeck-12",
        "--parsable",
        "--requeue",
        "--signal=B:TERM@90",
        "--output=/home/jobs/12/slurm.out",
        "--open-mode=append",
        "--partition=gpu",
        "--account=lab",
        "--ntasks=1",
        "--gres=gpu:1",
        "--time=0-01:02:00",  # (its timeout and the grace, rounded up to the minute)
    ]


def test_several_workers_are_a_task_each_with_their_gpus_and_the_owner_has_an_account():
    argv = options({"model": "resnet20", "gpus": 2, "workers": 3}, account="alice-lab")
    assert "--ntasks=3" in argv and "--gpus-per-task=2" in argv and not any(a.startswith("--gres") for a in argv)
    assert "--account=alice-lab" in argv and "--account=lab" not in argv


def test_a_cpu_job_asks_for_no_gpu_and_no_time_limit_of_its_own():
    argv = options({"command": "python train.py"})
    assert "--ntasks=1" in argv and not any(a.startswith(("--gres", "--gpus", "--time")) for a in argv)


def test_priorities_are_the_operators_qos_else_low_is_nicer_and_dependencies_wait_for_success():
    assert "--qos=urgent" in options({"model": "lenet", "priority": "high"})
    assert "--nice=500" in options({"model": "lenet", "priority": "low"})
    normal = options({"model": "lenet", "after": [3, 4]}, after=["101", "102"])
    assert not any(a.startswith(("--qos", "--nice")) for a in normal) and "--dependency=afterok:101:102" in normal


def test_what_slurm_does_not_give_is_refused_naming_the_field():
    with pytest.raises(NotOnSlurm, match="gpu_memory: a share of a GPU") as refused:
        options({"model": "lenet", "gpus": 1, "gpu_memory": 10 << 30})
    assert refused.value.field == "gpu_memory"
    with pytest.raises(NotOnSlurm, match="kind: sessions do not run on Slurm"):
        options({"kind": "session"})


def test_times_round_up_to_the_minute_as_slurm_counts_them():
    assert [slurm_time(s) for s in (1, 60, 61, 3600, 90061)] == [
        "0-00:01:00",
        "0-00:01:00",
        "0-00:02:00",
        "0-01:00:00",
        "1-01:02:00",
    ]


def test_names_map_back_to_gpudeck_jobs_and_no_other():
    assert job_id_of(job_name(7)) == 7
    assert job_id_of("gpudeck-x") is None and job_id_of("train.sh") is None and job_id_of("gpudeck-") is None


def test_squeue_lines_are_read_field_by_field_whatever_the_reason_holds():
    assert SQUEUE_FORMAT == "JobID:\t,Name:\t,State:\t,Reason:\t,StartTime:\t,RestartCnt:\t"
    text = (
        "101\tgpudeck-3\tRUNNING\tNone\t2026-11-27T04:30:00\t0\t\n"
        "\n"
        "102\tgpudeck-4\tPENDING\tReqNodeNotAvail, UnavailableNodes:n[1-2]\tN/A\t2\t\n"
    )
    running, pending = parse_squeue(text)
    assert running == SlurmJob("101", "gpudeck-3", "RUNNING", "None", "2026-11-27T04:30:00", 0)
    assert pending.reason == "ReqNodeNotAvail, UnavailableNodes:n[1-2]" and pending.start is None
    assert pending.restarts == 2


def said(state: str, reason: str = "None", restarts: int = 0) -> tuple[str, str | None, str]:
    s = seen(SlurmJob("1", "gpudeck-1", state, reason, None, restarts))
    return s.status, s.reason, s.message


def test_slurms_states_in_gpudecks_words():
    assert said("PENDING", "Resources") == (
        "queued",
        None,
        "in Slurm's queue: waiting for Slurm to free what it asks for (Resources)",
    )
    assert said("PENDING", "QOSMaxGRESPerUser")[2].startswith("in Slurm's queue: its owner holds as many GPUs")
    assert said("PENDING", "SomethingNew")[2] == "in Slurm's queue: waiting (SomethingNew)"
    assert said("PENDING", "DependencyNeverSatisfied")[:2] == ("failed", "dependency_failed")
    assert said("CONFIGURING")[0] == "starting"
    assert said("RUNNING")[0] == said("COMPLETING")[0] == "running"
    assert said("REQUEUED")[:2] == said("PREEMPTED")[:2] == ("queued", "preempted")
    assert said("PENDING", "BeginTime", restarts=1)[:2] == ("queued", "preempted")  # (held back after a requeue)
    assert said("PENDING", "BeginTime")[:2] == ("queued", None)
    assert said("COMPLETED")[:2] == ("succeeded", None)
    assert said("CANCELLED by 0")[:2] == ("canceled", "canceled")  # (sacct's spelling)
    assert said("TIMEOUT")[:2] == ("failed", "timeout")
    assert said("OUT_OF_MEMORY")[:2] == ("failed", "oom")
    assert said("NODE_FAIL")[:2] == ("failed", "worker_lost")
    assert said("FAILED")[:2] == ("failed", "exit_nonzero")


def test_tasks_are_laid_out_on_the_nodes_as_slurm_places_them():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1] and tasks_per_node("4") == [4]
    with pytest.raises(ValueError, match="SLURM_TASKS_PER_NODE: cannot read 'x2'"):
        tasks_per_node("x2")
    env = {"SLURM_JOB_ID": "4007", "SLURM_TASKS_PER_NODE": "2,1", "SLURM_PROCID": "2"}
    meet = rendezvous(env, ["gpu01", "gpu02"])
    assert meet.master_port == base_port("4007") == 20070
    assert meet.addresses == ["gpu01:20071", "gpu01:20072", "gpu02:20071"] and meet.master_addr == "gpu01"
    assert meet.rank == 2
    assert json.loads(meet.tf_config()) == {
        "cluster": {"worker": meet.addresses},
        "task": {"type": "worker", "index": 2},
    }
    step = rendezvous({**env, "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_PROCID": "1"}, ["gpu01", "gpu02"])
    assert step.addresses == ["gpu01:20071", "gpu02:20071"]  # (srun's step, not the whole allocation)
    with pytest.raises(ValueError, match="2 nodes but tasks per node for 1"):
        rendezvous({**env, "SLURM_TASKS_PER_NODE": "3"}, ["gpu01", "gpu02"])
    with pytest.raises(ValueError, match="SLURM_PROCID 3 is not one of the 3 tasks"):
        rendezvous({**env, "SLURM_PROCID": "3"}, ["gpu01", "gpu02"])
