"""What the Slurm agent makes of what Slurm says (jobs/onslurm.py), against a real Redis, fast: squeue's lines (as
jobs.slurm parses them) into the records, and the Slurm jobs to cancel. Slurm itself runs in `make test-slurm`
(tests/slurm/); these check the engine's rules one by one."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from jobs import control, lifecycle, onslurm, outcome, queues, sweeps
from jobs.keys import SLURM_AWAY_KEY, SLURM_JOBS_KEY
from jobs.record import Job
from jobs.slurm import parse_squeue
from jobs.store import JobStore
from models.states import Status

COMMAND = {"command": "python train.py", "gpus": 1}


@pytest.fixture
def on_slurm(settings):
    return replace(settings, backend="slurm", command_jobs=True)


def submitted(redis, settings, slurm_id: str, **spec) -> int:
    """A job the API queued and Slurm took as `slurm_id` (what sbatch's answer leads to)."""
    job_id = control.submit(redis, {**COMMAND, **spec}, settings)[0]["id"]
    assert onslurm.took(redis, JobStore(redis).get(job_id), slurm_id)
    return job_id


def squeue(*lines: str):
    """squeue's lines, tab-separated as jobs.slurm.SQUEUE_FORMAT asks: id, name, state, reason, start, restarts."""
    return parse_squeue("\n".join("\t".join(line.split("|")) + "\t" for line in lines))


def claimed(redis, job_id: int, beating: bool = True) -> None:
    """Its attempt claimed it in its allocation (jobs.run.slurmrun): running, and beating or not."""
    store = JobStore(redis)
    slurm = {**store.get(job_id)["slurm"], "claimed": time.time(), "state": "RUNNING"}
    assert store.transition(job_id, ("queued",), status="running", started_at=time.time(), slurm=slurm)
    if beating:
        store.beat(job_id, "slurm-1@node")


def test_a_pending_job_says_slurms_reason_and_planned_start_and_has_no_place_in_line(redis, on_slurm):
    job_id = submitted(redis, on_slurm, "41")
    assert queues.lines(redis) == {}  # (Slurm's now: out of gpudeck's line)
    assert onslurm.watch(redis, on_slurm, squeue(f"41|gpudeck-{job_id}|PENDING|Resources|2030-01-02T03:04:05|0")) == []
    rec = JobStore(redis).get(job_id)
    assert rec["message"] == "in Slurm's queue: waiting for Slurm to free what it asks for (Resources)"
    assert rec["slurm"]["reason"] == "Resources"
    start, why = onslurm.expected_start(rec)
    assert why is None and time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)) == "2030-01-02T03:04:05"


def test_ends_the_attempt_could_not_record_are_slurms_in_gpudecks_words(redis, on_slurm):
    timed, lost, failed, cancelled = (submitted(redis, on_slurm, str(50 + i)) for i in range(4))
    claimed(redis, timed, beating=False)
    claimed(redis, lost, beating=False)
    out = on_slurm.home / "slurm" / f"{failed}.out"
    out.parent.mkdir(parents=True)
    out.write_text("slurmstepd: error: execve(): python: No such file or directory\n")
    onslurm.watch(redis, on_slurm, squeue(
        f"50|gpudeck-{timed}|TIMEOUT|TimeLimit|2020-01-01T00:00:00|0",
        f"51|gpudeck-{lost}|NODE_FAIL|NodeDown|2020-01-01T00:00:00|0",
        f"52|gpudeck-{failed}|FAILED|NonZeroExitCode|2020-01-01T00:00:00|0",
        f"53|gpudeck-{cancelled}|CANCELLED|None|2020-01-01T00:00:00|0",
    ))  # fmt: skip
    store = JobStore(redis)
    assert (store.get(timed)["status"], store.get(timed)["reason"]) == ("failed", "timeout")
    again = store.get(lost)  # (its node failed: retried, as a lost worker is)
    assert (again["status"], again["reason"], again["attempt"]) == ("queued", "worker_lost", 2)
    assert again.get("slurm") is None and queues.lines(redis)  # (submitted again by the next round)
    said = store.get(failed)
    assert (said["status"], said["reason"]) == ("failed", "exit_nonzero")
    assert "No such file or directory" in said["message"]  # (the batch output's last line)
    assert (store.get(cancelled)["status"], store.get(cancelled)["message"]) == ("canceled", "canceled in Slurm")
    assert redis.smembers(SLURM_JOBS_KEY) == set()  # (none left to watch)


def test_a_running_attempt_that_beats_records_its_own_end(redis, on_slurm):
    job_id = submitted(redis, on_slurm, "60")
    claimed(redis, job_id)
    onslurm.watch(redis, on_slurm, squeue(f"60|gpudeck-{job_id}|COMPLETED|None|2020-01-01T00:00:00|0"))
    assert JobStore(redis).get(job_id)["status"] == "running"  # (its attempt, still beating, is recording it)


def test_a_job_its_attempt_put_back_in_line_or_slurm_forgot_is_submitted_again(redis, on_slurm):
    requeued, forgotten = submitted(redis, on_slurm, "70"), submitted(redis, on_slurm, "71")
    claimed(redis, requeued)
    end = outcome.End(Status.FAILED, outcome.Reason.WORKER_LOST, "lost", retry=True)
    assert lifecycle.end(redis, requeued, end) == "queued"  # (its attempt's end: queued again, with its Slurm id)
    assert onslurm.submit_queued(redis, on_slurm, onslurm.Tools()) == []  # (still Slurm's: out of line, not sent)
    assert queues.lines(redis) == {}
    onslurm.watch(redis, on_slurm, squeue(f"70|gpudeck-{requeued}|COMPLETED|None|2020-01-01T00:00:00|0"))
    store = JobStore(redis)
    assert store.get(requeued).get("slurm") is None and "submitted again" in store.get(requeued)["message"]
    assert onslurm.watch(redis, on_slurm, []) == []  # (Slurm has no job 71: a controller restarted without state)
    assert store.get(forgotten).get("slurm") is None and store.get(forgotten)["status"] == "queued"
    assert sorted(i for members in queues.lines(redis).values() for i, _ in members) == [requeued, forgotten]


def test_what_gpudeck_no_longer_wants_is_scancelled_a_running_one_after_its_grace(redis, on_slurm):
    pending, running = submitted(redis, on_slurm, "80"), submitted(redis, on_slurm, "81")
    claimed(redis, running)
    control.cancel(redis, pending)  # (queued: canceled at once)
    lifecycle.end(redis, running, outcome.STOPPED["canceled"])  # (its attempt ended it; its batch script exits)
    stale = submitted(redis, on_slurm, "82")
    store = JobStore(redis)
    assert onslurm.took(redis, Job({**store.get(stale), "slurm": None}), "83")  # (submitted again: 82 is stale)
    lines = (
        f"80|gpudeck-{pending}|PENDING|Priority|N/A|0",
        f"81|gpudeck-{running}|RUNNING|None|2020-01-01T00:00:00|0",
        f"82|gpudeck-{stale}|PENDING|Priority|N/A|0",  # (an earlier submission of job `stale`)
        f"83|gpudeck-{stale}|PENDING|Priority|N/A|0",
        "84|someone-elses|RUNNING|None|2020-01-01T00:00:00|0",
        f"85|gpudeck-{running}|RUNNING|None|2020-01-01T00:00:00|0",  # (another gpudeck's, under the same user)
    )
    assert onslurm.watch(redis, on_slurm, squeue(*lines)) == ["80", "82"]
    later = time.time() + on_slurm.slurm_grace_s + 16  # (the running one had its grace to stop by itself)
    assert onslurm.watch(redis, on_slurm, squeue(*lines), now=later) == ["80", "81", "82"]


def test_a_sweeps_jobs_wait_for_its_max_concurrent_and_an_outage_fails_nothing(redis, on_slurm, monkeypatch, tmp_path):
    made = sweeps.create(redis, {"base": COMMAND, "grid": {"gpus": [1, 2, 3]}, "max_concurrent": 1}, on_slurm)
    first, second, _ = made["job_ids"]
    assert onslurm.took(redis, JobStore(redis).get(first), "90")
    monkeypatch.setenv("PATH", str(tmp_path))  # (no sbatch, no squeue here: as a controller that does not answer)
    assert onslurm.submit_queued(redis, on_slurm, onslurm.Tools()) == []  # (held: no sbatch was needed)
    assert JobStore(redis).get(second)["message"].startswith("waiting: sweep ")
    lifecycle.end(redis, first, outcome.SUCCEEDED, allowed=("queued",))
    rounds = onslurm.Round(on_slurm)
    rounds.once()
    assert "sbatch is not installed" in redis.get(SLURM_AWAY_KEY).decode() and rounds.failures == 1
    assert JobStore(redis).get(second)["status"] == "queued" and queues.lines(redis)  # (still in line)
