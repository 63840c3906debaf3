"""Slurm's dialect (jobs/slurm.py) against a real one-node Slurm: Debian's slurm-wlm and munge, started by
tests/support/slurm.py in a temporary folder with two FAKE GPUs (GRES counted over placeholder files; no GPU exists
here). sbatch takes the options gpudeck writes, squeue's lines read back, and Slurm's states and pending reasons
say what they should. `make test-slurm` runs these (not `make test`); where Slurm cannot be had they skip, saying
why."""

from __future__ import annotations

import json
import sys
from datetime import datetime

import pytest

from jobs.record import Kept
from jobs.slurm import SQUEUE_FORMAT, SlurmJob, SlurmOptions, job_id_of, parse_squeue, sbatch_options, seen
from tests.support import slurm
from tests.support.live import until

OPTS = SlurmOptions(account="lab", grace_s=30)


cluster = slurm.cluster_fixture(gpus=2)


STAYS = "trap 'echo got TERM; exit 0' TERM; echo started; sleep 120 & wait"
"""What the Slurm jobs run (what runs is not the point here): a wait that says when SIGTERM reaches it."""


def submit(
    cluster: slurm.Cluster, job_id: int, spec: dict, folder, after: tuple[str, ...] = (), opts: SlurmOptions = OPTS
) -> str:
    """sbatch a gpudeck job's options around STAYS; Slurm's job id."""
    options = sbatch_options(job_id, Kept(spec), opts, output=str(folder / f"{job_id}.out"), after=after)
    made = cluster.run("sbatch", *options, "--wrap", STAYS, check=False)
    assert made.returncode == 0, (options, made.stderr, cluster.logs())
    return made.stdout.strip().split(";")[0]


def listed(cluster: slurm.Cluster) -> dict[int, SlurmJob]:
    """gpudeck's jobs as squeue lists them, ended ones included (Slurm keeps them MinJobAge)."""
    out = cluster.run("squeue", "-h", "--states=all", "-O", SQUEUE_FORMAT).stdout
    return {job_id: j for j in parse_squeue(out) if (job_id := job_id_of(j.name)) is not None}


def output(path) -> str:
    """A Slurm job's output so far ('' before slurmstepd has made the file)."""
    return path.read_text() if path.exists() else ""


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def status(cluster: slurm.Cluster, job_id: int) -> str | None:
    job = listed(cluster).get(job_id)
    return seen(job).status if job else None


def test_slurm_runs_what_fits_says_why_the_rest_waits_and_its_ends_are_gpudecks(cluster, tmp_path):
    both = submit(cluster, 1, {"command": "train", "gpus": 2, "timeout": 600}, tmp_path)
    until(lambda: status(cluster, 1) == "running", 60, lambda: f"job 1 running: {listed(cluster)} {cluster.logs()}")
    one = submit(cluster, 2, {"command": "train", "gpus": 1, "priority": "low"}, tmp_path)
    after = submit(cluster, 3, {"command": "evaluate", "after": [2]}, tmp_path, after=(one,))
    waiting = until(lambda: (j := listed(cluster).get(2)) and j.reason != "None" and j, 30, "job 2's reason")
    said = seen(waiting)
    assert (said.status, said.reason) == ("queued", None) and "(Resources)" in said.message, waiting
    # Slurm's backfill plans job 2 for when job 1's time limit (its 600-s timeout and the 30-s grace, rounded up to
    # 11 min) ends it:
    # what gpudeck will show as its expected_start
    planned = until(lambda: listed(cluster)[2].start, 30, lambda: f"job 2's planned start: {listed(cluster)}")
    began = listed(cluster)[1].start
    assert began and (when(planned) - when(began)).total_seconds() == pytest.approx(660, abs=60), (began, planned)
    assert (
        listed(cluster)[3].reason == "Dependency" and "waiting for its dependencies" in seen(listed(cluster)[3]).message
    )

    cluster.run("scancel", both)
    until(lambda: status(cluster, 1) == "canceled", 60, lambda: f"job 1 canceled: {listed(cluster)}")
    assert seen(listed(cluster)[1]).reason == "canceled"
    until(lambda: status(cluster, 2) == "running", 60, lambda: f"job 2 on the freed GPUs: {listed(cluster)}")
    cluster.run("scancel", one)  # job 3 waited for it to succeed: it never will
    until(lambda: seen(listed(cluster)[3]).reason == "dependency_failed", 60, lambda: f"job 3: {listed(cluster)}")
    cluster.run("scancel", after)


def test_a_job_slurm_preempts_is_told_sigterm_and_waits_again_as_preempted(cluster, tmp_path):
    """The fixture's partition `high` preempts `low` (PreemptMode=REQUEUE): the low job gets SIGTERM (where gpudeck's
    attempt checkpoints) and waits again, requeued, which gpudeck says as preempted."""
    low = SlurmOptions(partition="low", grace_s=5)
    victim = submit(cluster, 11, {"command": "train", "gpus": 2, "priority": "low"}, tmp_path, opts=low)
    until(lambda: status(cluster, 11) == "running", 60, lambda: f"job 11 running: {listed(cluster)}")
    until(lambda: "started" in output(tmp_path / "11.out"), 30, "job 11's script under way")
    urgent = submit(cluster, 12, {"command": "train", "gpus": 1}, tmp_path, opts=SlurmOptions(partition="high"))
    until(lambda: status(cluster, 12) == "running", 60, lambda: f"job 12 running: {listed(cluster)}")
    requeued = until(lambda: (j := listed(cluster).get(11)) and j.restarts and j, 60, lambda: str(listed(cluster)))
    assert seen(requeued).reason == "preempted" and seen(requeued).status == "queued", requeued
    assert "got TERM" in output(tmp_path / "11.out")  # (--open-mode=append: its first run's lines stay)
    cluster.run("scancel", urgent, victim)


MEET = """\
import json, os, socket, subprocess, time
from jobs.slurm import rendezvous

nodes = ["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]]
meet = rendezvous(os.environ, subprocess.run(nodes, capture_output=True, text=True, check=True).stdout.split())
heard = ""
if meet.rank == 0:
    with socket.create_server((meet.master_addr, meet.master_port)) as server:
        server.settimeout(60)
        conn, _ = server.accept()
        heard = conn.recv(100).decode()
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection((meet.master_addr, meet.master_port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    conn.sendall(f"rank {meet.rank} at {meet.addresses[meet.rank]}".encode())
print(json.dumps({"rank": meet.rank, "addresses": meet.addresses, "tf_config": meet.tf_config(), "heard": heard}))
"""
"""Each task of a two-task Slurm job: its rendezvous from Slurm's environment; task 0 listens at MASTER_ADDR and
MASTER_PORT, task 1 finds it there."""


def test_the_tasks_of_a_multi_worker_job_meet_at_the_address_slurms_environment_gives(cluster, tmp_path):
    (tmp_path / "meet.py").write_text(MEET)
    options = sbatch_options(21, Kept({"command": "train", "workers": 2}), OPTS, output=str(tmp_path / "21.out"))
    made = cluster.run("sbatch", *options, "--wrap", f"srun {sys.executable} {tmp_path / 'meet.py'}", check=False)
    assert made.returncode == 0, made.stderr
    until(lambda: status(cluster, 21) in ("succeeded", "failed"), 90, lambda: f"job 21: {listed(cluster)}")
    out = output(tmp_path / "21.out")
    assert status(cluster, 21) == "succeeded", (out, cluster.logs())
    said = sorted((json.loads(line) for line in out.splitlines() if line.startswith("{")), key=lambda t: t["rank"])
    assert [t["rank"] for t in said] == [0, 1] and said[0]["addresses"] == said[1]["addresses"], out
    assert said[0]["heard"] == f"rank 1 at {said[0]['addresses'][1]}", out
    assert [json.loads(t["tf_config"])["task"]["index"] for t in said] == [0, 1]


def test_a_job_is_told_sigterm_before_its_time_limit_and_one_that_stays_ends_as_timeout(cluster, tmp_path):
    """`--signal=B:TERM@grace` with `--time`: SIGTERM reaches the batch shell `grace` seconds before the limit
    (where gpudeck's attempt checkpoints and ends); a job that carries on is killed at the limit: TIMEOUT. Slurm's
    limits are whole minutes, so this test takes one."""
    stays = "trap 'echo got TERM' TERM; echo started; while true; do sleep 1; done"
    opts = SlurmOptions(grace_s=40)
    options = sbatch_options(31, Kept({"command": "train", "timeout": 60}), opts, output=str(tmp_path / "31.out"))
    made = cluster.run("sbatch", *options, "--wrap", stays, check=False)
    assert made.returncode == 0, made.stderr
    until(lambda: status(cluster, 31) == "running", 60, lambda: f"job 31 running: {listed(cluster)}")
    until(lambda: "got TERM" in output(tmp_path / "31.out"), 150, "SIGTERM before the limit")
    assert status(cluster, 31) == "running"  # (told, not stopped: it may checkpoint)
    ended = until(
        lambda: (s := status(cluster, 31)) in ("failed", "succeeded", "canceled") and s,
        120,
        lambda: str(listed(cluster)),
    )
    assert ended == "failed" and seen(listed(cluster)[31]).reason == "timeout", listed(cluster)[31]
