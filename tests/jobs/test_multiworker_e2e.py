"""Multi-worker jobs for real: two CPU worker processes with homes of their own (two "hosts" sharing only
Redis), an API with a third home, and jobs of two TF_CONFIG tasks under MultiWorkerMirroredStrategy."""

import json
import os
import re
import signal
import socket
import sys
from pathlib import Path

import pytest
import requests

from models.states import ENDED
from tests.support.live import alive, descendants, until
from tests.support.readme import run_block

pytestmark = pytest.mark.slow

SPEC = {
    "model": "resnet20",
    "dataset": "synthetic:8x8x3:4",
    "params": {"steps": 6, "batch_size": 16, "log_every": 2, "seed": 3},
    "workers": 2,
}


RUNS_ON = {"model": "lenet", "dataset": "synthetic:28x28x1:4"}
"""A job of two tasks that trains until it is stopped: the lightest model (what is checked is the tasks' end)."""


@pytest.fixture
def hosts(spawn, child_env, tmp_path):
    """Two CPU workers, each with its own GPUDECK_HOME (nothing on disk is shared with each other or the API)."""
    out = {}
    for name in ("host-b", "host-c"):
        env = dict(child_env, GPUDECK_HOME=str(tmp_path / name))
        out[name] = spawn("worker", "--cpu", "--name", f"{name}.cpu", "--stop-grace", "5", env=env, name=name)
    return out


def get(url: str, path: str) -> dict:
    r = requests.get(f"{url}/api/v1{path}", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def wait_workers(url: str, n: int) -> None:
    until(lambda: len(get(url, "/workers")["workers"]) == n, 60, f"{n} workers registered")


def running_trainers(url: str, job_id: int) -> list[int]:
    """Wait until the job runs and every task's trainer has started; their pids."""

    def started():
        job = get(url, f"/jobs/{job_id}")
        return job["status"] == "running" and all(t["pid"] for t in job["tasks"]) and job

    return [t["pid"] for t in until(started, 240, what=f"job {job_id} running with every trainer")["tasks"]]


def steps_and_losses(lines: list[str], task: str) -> list[tuple[str, str]]:
    pattern = re.compile(rf"\[{task}\] .*train step (\d+) .*? loss ([\d.e+-]+)")
    return [m.groups() for line in lines if (m := pattern.match(line))]


def test_the_readme_multi_worker_walkthrough_trains_across_hosts_with_one_loss_trajectory(
    live_api, hosts, tmp_path, child_env
):
    wait_workers(live_api, 2)
    workers = get(live_api, "/workers")["workers"]
    assert {(w["name"], w["host"], tuple(w["gpus"])) for w in workers} == {
        ("host-b.cpu", socket.gethostname(), ()),
        ("host-c.cpu", socket.gethostname(), ()),
    }
    # Two jobs that each need both workers, submitted together (the README's commands, as written): gang
    # scheduling runs them one after the other instead of giving each one worker and waiting forever.
    env = dict(child_env, GPUDECK_API=live_api, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    first, second, followed, waited, shown = run_block("walkthrough-multi", 0, tmp_path, env)
    assert first.strip() in ("submitted job 1 (queued)", "submitted job 1 (starting)")
    assert second.strip() == "submitted job 2 (queued)"  # both workers are job 1's

    job = get(live_api, "/jobs/1")
    lines = followed.splitlines()  # followed live through Redis: the API's home holds no job dir
    assert job["status"] == "succeeded", (job, lines[-40:], hosts["host-b"].output()[-3000:])
    tasks = job["tasks"]
    assert [(t["type"], t["task_index"], t["status"]) for t in tasks] == [
        ("worker", 0, "succeeded"),
        ("worker", 1, "succeeded"),
    ]
    assert {t["worker"] for t in tasks} == {"host-b.cpu", "host-c.cpu"}  # two different workers
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", t["address"]) for t in tasks)
    # One log, every task's lines prefixed by the task; gradients are all-reduced, so the two tasks report
    # the same loss at the same steps.
    assert any(line.startswith("[worker0] ") for line in lines) and any(line.startswith("[worker1] ") for line in lines)
    trajectory = steps_and_losses(lines, "worker0")
    assert [s for s, _ in trajectory] == ["2", "4", "6"]
    assert trajectory == steps_and_losses(lines, "worker1")
    assert any("strategy=CollectiveAllReduceStrategy replicas=2 task=worker1" in line for line in lines)
    metrics = get(live_api, "/jobs/1/metrics")
    assert [p["step"] for p in metrics["train"]] == [2, 4, 6]  # the chief's points only, once each
    assert [f"{p['loss']:.4g}" for p in metrics["train"]] == [loss for _, loss in trajectory]

    # The chief (worker 0) wrote the job dir on its own host; the API's home has none.
    chief_home = tmp_path / tasks[0]["worker"].split(".")[0]
    assert json.loads((chief_home / "jobs" / "1" / "result.json").read_text())["steps"] == 6
    assert not (tmp_path / "home" / "jobs" / "1").exists()

    assert waited.splitlines()[1].split()[:2] == ["2", "succeeded"], waited
    job = get(live_api, "/jobs/2")
    assert job["status"] == "succeeded" and job["spec"]["chief"] is True, job
    assert [(t["type"], t["task_index"]) for t in job["tasks"]] == [("chief", 0), ("worker", 0)]
    assert re.search(r"task  chief:0  succeeded  host-[bc]\.cpu 127\.0\.0\.1:\d+", shown), shown
    assert re.search(r"task  worker:0  succeeded  host-[bc]\.cpu 127\.0\.0\.1:\d+", shown), shown
    lines = requests.get(f"{live_api}/api/v1/jobs/2/logs", timeout=10).text.splitlines()
    assert steps_and_losses(lines, "chief0") == steps_and_losses(lines, "worker0") != []


def test_killing_one_task_fails_the_whole_job_and_leaves_no_process(live_api, hosts):
    wait_workers(live_api, 2)
    spec = {**SPEC, **RUNS_ON, "params": {"steps": 100_000, "batch_size": 16, "log_every": 10}}
    job_id = requests.post(f"{live_api}/api/v1/jobs", json=spec, timeout=10).json()["id"]

    pids = running_trainers(live_api, job_id)
    os.killpg(pids[1], signal.SIGKILL)  # task worker1's trainer dies under it

    job = until(lambda: (j := get(live_api, f"/jobs/{job_id}"))["status"] in ENDED and j, 60, "job ended")
    assert job["status"] == "failed" and job["reason"] == "exit_nonzero", job
    assert job["message"].startswith("task worker1 on ") and "killed by SIGKILL" in job["message"], job
    assert [t["status"] for t in job["tasks"]] in (["stopped", "failed"], ["failed", "failed"])
    assert not any(alive(pid) for pid in pids)
    # No trainer of the job is left anywhere below the workers, and both workers are free for the next job.
    for proc in hosts.values():
        for pid in descendants(proc.proc.pid):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            assert f"GPUDECK_JOB_ID={job_id}".encode() not in environ.split(b"\0"), pid
    until(lambda: all(w["state"] == "idle" for w in get(live_api, "/workers")["workers"]), 30, "both workers idle")


def test_canceling_a_running_multi_worker_job_stops_every_task(live_api, hosts):
    wait_workers(live_api, 2)
    spec = {**SPEC, **RUNS_ON, "params": {"steps": 100_000, "batch_size": 16, "log_every": 10}}
    job_id = requests.post(f"{live_api}/api/v1/jobs", json=spec, timeout=10).json()["id"]

    pids = running_trainers(live_api, job_id)
    assert requests.post(f"{live_api}/api/v1/jobs/{job_id}/cancel", timeout=10).status_code == 200
    job = until(lambda: (j := get(live_api, f"/jobs/{job_id}"))["status"] in ENDED and j, 60, "job ended")
    assert (job["status"], job["reason"]) == ("canceled", "canceled"), job
    assert [t["status"] for t in job["tasks"]] == ["stopped", "stopped"]
    assert not any(alive(pid) for pid in pids)
