"""gpudeck on a real one-node Slurm (issue 45): `gpudeck up --backend slurm` against Debian's slurm-wlm with munge
(tests/support/slurm.py; four FAKE GPUs: GRES counted over placeholder files, no GPU exists here). Jobs go in
through the API as on one box and run as Slurm jobs: sbatch, squeue and scancel are Slurm's own. `make test-slurm`
runs these (not `make test`); where Slurm cannot be had they skip, saying why."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from datetime import datetime

import pytest
import requests

from tests.support import slurm
from tests.support.live import submit_job, until, wait_ended
from tests.support.readme import run_block
from tests.support.stack import Up

cluster = slurm.cluster_fixture(gpus=4)


@pytest.fixture(scope="module")
def up(cluster, tmp_path_factory):
    """`gpudeck up --backend slurm` with its embedded Redis; Slurm polled each second, a 10-s grace."""
    folder = tmp_path_factory.mktemp("stack")
    env = cluster.env({k: v for k, v in os.environ.items() if not k.startswith("GPUDECK_")})
    env.update(
        GPUDECK_SLURM_POLL="1s",
        GPUDECK_SLURM_GRACE="10s",
        GPUDECK_COMMAND_JOBS="1",
        GPUDECK_WARM="off",
        PYTHONUNBUFFERED="1",
        TF_NUM_INTRAOP_THREADS="1",
    )
    stack = Up(folder / "home", env, folder / "up.log", args=("--backend", "slurm"))
    yield stack
    stack.kill()
    print(stack.output()[-3000:])
    agent = folder / "home" / "logs" / "slurm-agent.log"
    if agent.exists():
        print(agent.read_text(errors="replace")[-3000:])


def job(up: Up, job_id: int) -> dict:
    return requests.get(f"{up.url}/api/v1/jobs/{job_id}", timeout=10).json()


def points(up: Up, job_id: int) -> list[dict]:
    return requests.get(f"{up.url}/api/v1/jobs/{job_id}/metrics", timeout=10).json()["train"]


def squeued(cluster: slurm.Cluster, slurm_id: str) -> str:
    """Slurm's state of one of its jobs ('' once Slurm forgot it)."""
    return cluster.run("squeue", "-h", "--states=all", "-j", slurm_id, "-o", "%T", check=False).stdout.strip()


TICKS = (
    "import json, os, signal, sys, time\n"
    "def stop(*_):\n"
    "    open(os.path.join(os.environ['JOB_DIR'], 'checkpointed'), 'w').write(str(s)); sys.exit(143)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "with open(os.path.join(os.environ['JOB_DIR'], 'metrics.jsonl'), 'a') as f:\n"
    "    for s in range(1, int(sys.argv[1]) + 1):\n"
    "        f.write(json.dumps({'step': s, 'loss': 1 / s}) + '\\n'); f.flush(); print('tick', s, flush=True)\n"
    "        time.sleep(0.2)\n"
)
"""A command job of N steps, 0.2 s each, a metric point and a log line each; on SIGTERM it writes `checkpointed`
(the step it was at) into its job dir and exits 143, as a shell's TERM does."""


def ticks(n: int, **more) -> dict:
    return {"command": [sys.executable, "-c", TICKS, str(n)], "gpus": 1, **more}


def clients(up: Up, cluster: slurm.Cluster) -> dict[str, str]:
    """What a user's shell on the login node has: the CLI, the API's address, Slurm's tools."""
    env = cluster.env({k: v for k, v in os.environ.items() if not k.startswith("GPUDECK_")})
    return {**env, "GPUDECK_API": up.url, "PATH": f"{os.path.dirname(sys.executable)}:{env['PATH']}"}


def test_the_readme_section_as_written(up, cluster, tmp_path):
    """README "On a Slurm cluster": the stack is started as it says (`gpudeck up --backend slurm`, the fixture)."""
    out = run_block("slurm", int(up.url.rsplit(":", 1)[1]), tmp_path, clients(up, cluster))
    shown, listed = out[2], out[3]
    slurm_id = job(up, 1)["slurm"]["id"]
    assert f"job {slurm_id}" in shown and f"slurm-{slurm_id}@{cluster.node}" in shown, shown
    # (gpudeck records the end before the batch script exits: Slurm may still be finishing the job)
    head, line = listed.splitlines()
    assert head.split() == ["JOBID", "NAME", "STATE"] and line.split()[:2] == [slurm_id, "gpudeck-1"], listed
    assert line.split()[2] in ("RUNNING", "COMPLETING", "COMPLETED"), listed
    until(lambda: squeued(cluster, slurm_id) == "COMPLETED", 30, "Slurm's job COMPLETED")
    until(lambda: job(up, 1)["slurm"]["state"] == "COMPLETED", 30, "the record says how Slurm saw it end")


def test_a_zoo_job_and_a_command_job_run_as_slurm_jobs_with_their_logs_and_curves(up, cluster):
    zoo = submit_job(up.url, {"model": "lenet", "dataset": "synthetic:16x16x3", "params": {"steps": 20}})
    told = 'echo "on slurm: id=$SLURM_JOB_ID nodes=$SLURM_JOB_NODELIST tasks=$SLURM_NTASKS gpus=$GPU_COUNT"; '
    command = submit_job(up.url, {**ticks(10), "command": told + shlex.join(ticks(10)["command"])})
    for job_id in (zoo, command):
        ended = wait_ended(up.url, job_id, timeout=180)
        assert ended["status"] == "succeeded", (ended, up.output()[-2000:])
        slurm_id = ended["slurm"]["id"]
        assert ended["worker"].startswith(f"slurm-{slurm_id}@"), ended  # (its attempt ran in that Slurm job)
        # Slurm ran it with one GPU (gpus defaults to 1 on Slurm), and says so while it keeps the job: the batch
        # script's status was 0
        until(lambda sid=slurm_id: squeued(cluster, sid) == "COMPLETED", 30, "Slurm's job COMPLETED")
        shown = cluster.run("scontrol", "show", "job", slurm_id).stdout
        assert "TresPerNode=gres:gpu:1" in shown and f"JobName=gpudeck-{job_id}" in shown, shown
    assert [p["step"] for p in points(up, command)] == list(range(1, 11))
    assert len(points(up, zoo)) >= 2 and points(up, zoo)[-1]["step"] == 20
    logs = requests.get(f"{up.url}/api/v1/jobs/{command}/logs", timeout=10).text
    assert "tick 10" in logs
    # a job on Slurm knows it is one (issue 67 #8): the allocation's variables, and the GPUs Slurm gave it
    slurm_id = wait_ended(up.url, command)["slurm"]["id"]
    assert f"on slurm: id={slurm_id} nodes=" in logs and "tasks=1 gpus=1" in logs, logs


def test_a_waiting_job_says_slurms_reason_and_planned_start_and_cancels_stop_a_job_with_its_grace(up, cluster):
    blocker = submit_job(up.url, ticks(1000, gpus=4, timeout=300))
    until(lambda: (job(up, blocker)["progress"]["step"] or 0) >= 3, 60, lambda: str(job(up, blocker)))
    waiting = submit_job(up.url, ticks(3, gpus=2))
    queued = until(lambda: (j := job(up, waiting))["expected_start"] and j, 30, lambda: str(job(up, waiting)))
    assert queued["status"] == "queued" and queued["slurm"]["reason"] == "Resources", queued
    assert queued["message"] == "in Slurm's queue: waiting for Slurm to free what it asks for (Resources)"
    assert queued["queue_position"] is None  # (Slurm orders its queue)
    # Slurm's backfill planned it for the blocker's time limit (its 300-s timeout and the 10-s grace, in minutes)
    started = datetime.fromisoformat(job(up, blocker)["started_at"].replace("Z", "+00:00")).timestamp()
    planned = datetime.fromisoformat(queued["expected_start"].replace("Z", "+00:00")).timestamp()
    assert planned - started == pytest.approx(360, abs=30), (planned, started)

    # Slurm has the job: a place in line means nothing there (409), a priority goes through scontrol
    moved = requests.post(f"{up.url}/api/v1/jobs/{waiting}/move", json={"top": True}, timeout=10)
    assert moved.status_code == 409 and "Slurm orders its queue" in moved.json()["message"], moved.text
    lowered = requests.patch(f"{up.url}/api/v1/jobs/{waiting}", json={"priority": "low"}, timeout=10)
    assert lowered.status_code == 200 and lowered.json()["spec"]["priority"] == "low", lowered.text
    assert "Nice=1000 " in cluster.run("scontrol", "show", "job", queued["slurm"]["id"]).stdout

    # canceled while Slurm holds it pending: gone from Slurm's queue too
    assert requests.post(f"{up.url}/api/v1/jobs/{waiting}/cancel", timeout=10).json()["status"] == "canceled"
    until(lambda: squeued(cluster, queued["slurm"]["id"]) == "CANCELLED", 30, "the pending Slurm job scancel'ed")

    # canceled while it runs: its attempt gives the script SIGTERM and the grace to checkpoint, as on one box
    requests.post(f"{up.url}/api/v1/jobs/{blocker}/cancel", timeout=10)
    ended = wait_ended(up.url, blocker, timeout=60)
    assert (ended["status"], ended["reason"]) == ("canceled", "canceled"), ended
    checkpointed = up.home / "jobs" / str(blocker) / "checkpointed"
    assert checkpointed.exists() and int(checkpointed.read_text()) >= 3
    until(lambda: squeued(cluster, ended["slurm"]["id"]) not in ("RUNNING", "COMPLETING", "PENDING"), 30, "ended")


def test_a_dependency_waits_for_its_job_and_a_timeout_ends_a_job_with_its_grace(up, cluster):
    first = submit_job(up.url, ticks(15))
    then = submit_job(up.url, ticks(3, after=[first]))
    assert job(up, then)["message"] == f"waiting for job {first}"
    limited = submit_job(up.url, ticks(1000, timeout=5))
    done = wait_ended(up.url, then, timeout=120)
    assert done["status"] == "succeeded", done
    assert done["started_at"] >= job(up, first)["ended_at"]
    timed = wait_ended(up.url, limited, timeout=120)
    assert (timed["status"], timed["reason"]) == ("failed", "timeout"), timed
    assert (up.home / "jobs" / str(limited) / "checkpointed").exists()


def test_what_slurm_cannot_run_is_refused_saying_why(up, cluster):
    share = requests.post(f"{up.url}/api/v1/jobs", json={"command": "true", "gpu_memory": "4G"}, timeout=10)
    assert share.status_code == 400 and "GPUDECK_BACKEND=slurm" in share.json()["details"]["fields"]["gpu_memory"]
    session = requests.post(f"{up.url}/api/v1/jobs", json={"kind": "session", "gpus": 1}, timeout=10)
    assert session.status_code == 501 and session.json()["details"]["field"] == "kind", session.text
    assert "srun --pty" in session.json()["message"]
    # more GPUs than the cluster has: Slurm refuses it at sbatch, in its own words
    big = submit_job(up.url, ticks(1, gpus=8))
    ended = wait_ended(up.url, big, timeout=30)
    assert (ended["status"], ended["reason"]) == ("failed", "bad_input"), ended
    assert ended["message"].startswith("Slurm refused it: ") and "configuration" in ended["message"], ended


PREEMPTOR = "sleep 8"
"""A job of another lab user in Slurm's high partition that needs every GPU (preempting gpudeck's low one)."""


def test_a_job_slurm_preempts_checkpoints_and_resumes_from_its_checkpoint(up, cluster, tmp_path):
    zoo = {
        "model": "resnet20",
        "dataset": "synthetic:16x16x3",
        "params": {"steps": 100000, "batch_size": 16, "log_every": 5},
        "checkpoint_every": 20,
    }
    victim = submit_job(up.url, zoo)
    until(lambda: (job(up, victim)["progress"]["step"] or 0) >= 25, 180, lambda: str(job(up, victim)))
    # (its own output file: without one, Slurm writes slurm-N.out into the folder the tests run in)
    out = f"--output={tmp_path / 'preemptor.out'}"
    made = cluster.run("sbatch", "--parsable", "--partition=high", "--gres=gpu:4", out, "--wrap", PREEMPTOR)
    preempted = until(lambda: (j := job(up, victim))["preemptions"] == 1 and j, 60, lambda: str(job(up, victim)))
    # (what it said when it went back in line stays in `preempted_by`: Slurm may run it again at once)
    said = preempted["preempted_by"]
    assert said["who"] == "Slurm" and said["message"].startswith("preempted by Slurm at step "), preempted
    assert "resumes from the checkpoint of step" in said["message"], preempted
    assert preempted["attempt"] == 2 and preempted["status"] in ("queued", "starting", "running"), preempted
    until(lambda: squeued(cluster, made.stdout.strip()) == "COMPLETED", 120, "the preemptor done")
    # Slurm requeued the same job (--requeue): it runs again, its next attempt resumes from the checkpoint
    back = until(lambda: (j := job(up, victim))["status"] == "running" and j, 180, lambda: str(job(up, victim)))
    assert back["attempt"] == 2 and back["slurm"]["id"] == preempted["slurm"]["id"], back
    until(lambda: (job(up, victim)["progress"]["step"] or 0) >= 60, 180, lambda: str(job(up, victim)))
    steps = [p["step"] for p in points(up, victim)]
    assert steps == sorted(set(steps)) and max(b - a for a, b in zip(steps, steps[1:])) <= 20, steps
    assert "resumed from" in requests.get(f"{up.url}/api/v1/jobs/{victim}/logs", timeout=10).text
    requests.post(f"{up.url}/api/v1/jobs/{victim}/cancel", timeout=10)
    assert wait_ended(up.url, victim, timeout=60)["status"] == "canceled"


SEARCHED = (
    "import json, os, time\n"
    "good = os.environ['LR'] == 'good'\n"
    "with open(os.path.join(os.environ['JOB_DIR'], 'metrics.jsonl'), 'a') as f:\n"
    "    for s in range(1, 31):\n"
    "        f.write(json.dumps({'step': s, 'loss': 1 / s if good else 1.0}) + '\\n'); f.flush()\n"
    "        time.sleep(0.2 if good else 0.6)\n"
)
"""A trial that learns (LR=good: its loss falls, 0.2 s a step) or not (flat: 1.0 throughout, three times slower,
so a good trial started beside it reaches each rung first)."""


def test_a_search_runs_its_trials_as_slurm_jobs_and_stops_the_bad_ones_early(up, cluster):
    body = {
        "search": "random",
        "base": {"command": [sys.executable, "-c", SEARCHED], "gpus": 1},
        "space": {"env.LR": {"choice": ["good", "flat"]}},
        "metric": "loss",
        "stopping": {"kind": "asha", "min_steps": 5, "reduction_factor": 2},
        "max_trials": 3,
        "max_concurrent": 2,
        "seed": 10,  # (its draws: good and flat, then flat)
    }
    made = requests.post(f"{up.url}/api/v1/sweeps", json=body, timeout=30)
    assert made.status_code == 201, made.text
    sweep = f"{up.url}/api/v1/sweeps/{made.json()['id']}"
    until(lambda: requests.get(sweep, timeout=10).json()["state"] != "running", 240, "the search to end")
    shown = requests.get(sweep, timeout=10).json()
    assert shown["state"] == "done" and len(shown["trials"]) == 3, shown
    values = [t["values"]["env.LR"] for t in shown["trials"]]
    assert "good" in values and "flat" in values, values  # (the seed's draw: both kinds)
    for t in shown["trials"]:
        ran = job(up, t["job"])
        assert ran["status"] == "succeeded" and ran["slurm"]["id"], ran
        if t["values"]["env.LR"] == "flat":  # stopped at a rung a good trial reached first
            assert ran["reason"] == "stopped_early" and ran["early_stop"]["metric"] == "loss", ran
            until(lambda i=ran["slurm"]["id"]: squeued(cluster, i) in ("COMPLETED", "FAILED"), 30, "its Slurm job")
        else:
            assert ran["reason"] is None and ran["progress"]["step"] == 30, ran
    assert shown["best"]["values"]["env.LR"] == "good"
    jobs = [job(up, t["job"]) for t in shown["trials"]]
    spans = sorted([(j["started_at"], 1) for j in jobs] + [(j["ended_at"], -1) for j in jobs])
    at_once = [sum(c for _, c in spans[: i + 1]) for i in range(len(spans))]
    assert max(at_once) <= 2, spans  # (max_concurrent, held by gpudeck: Slurm had room for four)


MEET = """\
import json, os, socket, time
rank, addr, port = int(os.environ["RANK"]), os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
heard = ""
if rank == 0:
    with socket.create_server((addr, port)) as server:
        server.settimeout(60)
        conn, _ = server.accept()
        heard = conn.recv(100).decode()
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    conn.sendall(f"rank {rank}".encode())
tf = json.loads(os.environ["TF_CONFIG"])
print(json.dumps({"rank": rank, "world": os.environ["WORLD_SIZE"], "heard": heard, "task": tf["task"],
                  "workers": tf["cluster"]["worker"]}), flush=True)
"""
"""Each task of a two-task gpudeck job on Slurm: task 0 listens at MASTER_ADDR:MASTER_PORT, task 1 finds it there;
each prints what it was told."""


def test_the_tasks_of_a_multi_worker_job_run_as_one_slurm_job_and_meet_at_master_addr(up, cluster):
    made = submit_job(up.url, {"command": [sys.executable, "-c", MEET], "workers": 2, "gpus": 1})
    ended = wait_ended(up.url, made, timeout=120)
    assert ended["status"] == "succeeded", ended
    shown = cluster.run("scontrol", "show", "job", ended["slurm"]["id"]).stdout
    assert "NumTasks=2" in shown and f"JobName=gpudeck-{made}" in shown, shown
    logs = requests.get(f"{up.url}/api/v1/jobs/{made}/logs", timeout=10).text
    said = {}
    for line in logs.splitlines():
        label, _, rest = line.partition("] ")
        if rest.startswith("{"):
            said[label.lstrip("[")] = json.loads(rest)
    assert set(said) == {"worker0", "worker1"}, logs
    assert said["worker0"]["heard"] == "rank 1" and said["worker1"]["rank"] == 1, said
    assert said["worker0"]["workers"] == said["worker1"]["workers"] and len(said["worker0"]["workers"]) == 2
    assert [said[w]["task"] for w in ("worker0", "worker1")] == [{"type": "worker", "index": i} for i in (0, 1)]
    tasks = job(up, made)["tasks"]
    assert [t["status"] for t in tasks] == ["succeeded", "succeeded"], tasks
    assert all(t["worker"].startswith(f"slurm-{ended['slurm']['id']}@") for t in tasks), tasks


def test_the_tui_shows_a_slurm_backed_stack(up, cluster):
    """The jobs table and a job's screen, through Pilot, on the stack's API: jobs with their status, a job's header
    with its Slurm job."""
    from textual.widgets import DataTable, Static

    from tests.support.pilot import on_screen, text_of
    from tests.support.pilot import until as shown
    from tui.app import GpudeckApp
    from tui.screens.job import JobScreen

    last = requests.get(f"{up.url}/api/v1/jobs", params={"limit": 1}, timeout=10).json()["jobs"][0]

    async def scenario() -> None:
        app = GpudeckApp(up.url)
        async with app.run_test(size=(140, 40)) as pilot:
            table = app.screen.query_one("#jobs", DataTable)
            await shown(pilot, lambda: table.row_count >= 2)
            assert str(table.get_cell(str(1), "status")) == "succeeded"
            await pilot.press("home", "enter")
            await on_screen(pilot, app, JobScreen)
            header = app.screen.query_one("#job-summary", Static)
            await shown(pilot, lambda: f"slurm job {last['slurm']['id']}" in text_of(header))
            assert f"on slurm-{last['slurm']['id']}@{cluster.node}" in text_of(header)

    asyncio.run(scenario())


def test_a_users_jobs_go_to_their_slurm_account(up, cluster, tmp_path):
    """README's `gpudeck token create alice --slurm-account physics`, on the server (the last test here: once a
    named token exists, the API wants one)."""
    env = {**clients(up, cluster), "GPUDECK_HOME": str(up.home)}
    alice = {"Authorization": f"Bearer {run_block('slurm-token', 0, tmp_path, env)[0].strip()}"}
    made = requests.post(f"{up.url}/api/v1/jobs", json=ticks(1), headers=alice, timeout=10)
    assert made.status_code == 201, made.text
    url = f"{up.url}/api/v1/jobs/{made.json()['id']}/wait"
    done = requests.get(url, params={"timeout": 60}, headers=alice, timeout=80).json()
    assert (done["status"], done["owner"]) == ("succeeded", "alice"), done
    assert "Account=physics " in cluster.run("scontrol", "show", "job", done["slurm"]["id"]).stdout
