"""The job lifecycle with real worker processes: cancel, timeout, worker death, OOM, drain, GPUs (which job a
worker takes next and how sweeps rank are engine logic, tested without training in test_queues.py)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest.mock import ANY

import pytest

from tests.support.live import FAKE_SMI, alive, fake_nvidia_smi, until, wait_job

pytestmark = pytest.mark.slow

LONG = {
    "model": "lenet",
    "dataset": "synthetic:16x16x3",
    "params": {"steps": 100000, "batch_size": 16, "log_every": 5},
}
TINY = {"model": "lenet", "dataset": "synthetic:28x28x1", "params": {"steps": 2, "batch_size": 8}}


def stepped(n):
    return lambda job: (job["progress"]["step"] or 0) >= n


def ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def trainer_pid(redis, job_id: int) -> int:
    return int(redis.hget(f"gpudeck:job:{job_id}", "pid"))


def test_cancel_a_running_job_stops_its_process_group(client, worker, settings, redis):
    job_id = client.post("/api/v1/jobs", json=LONG).json["id"]
    wait_job(client, job_id, stepped(5))
    pid = trainer_pid(redis, job_id)
    assert alive(pid)
    resp = client.post(f"/api/v1/jobs/{job_id}/cancel")
    assert resp.status_code == 200 and resp.json["status"] in ("starting", "running")
    t0 = time.monotonic()
    job, _ = wait_job(client, job_id, timeout=60)
    assert job["status"] == "canceled" and job["reason"] == "canceled", job
    assert time.monotonic() - t0 < 15
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the whole process group is gone: no orphan
    assert list((settings.job_dir(job_id) / "checkpoints").glob("ckpt-*.index"))  # it checkpointed on SIGTERM
    assert client.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 409
    # issue 25 #8: its progress says the step it stopped at, as its log does (not the last metric point's)
    text = client.get(f"/api/v1/jobs/{job_id}/logs").get_data(as_text=True)
    stopped = int(text.split("stopped at step ")[1].split(";")[0])
    assert job["progress"]["step"] == stopped, (job["progress"], stopped)


def test_a_canceled_queued_job_never_runs(client, spawn, child_env):
    job_id = client.post("/api/v1/jobs", json=TINY).json["id"]
    client.post(f"/api/v1/jobs/{job_id}/cancel")
    burst = spawn("worker", "--cpu", "--burst", env=child_env)
    burst.proc.wait(60)
    job = client.get(f"/api/v1/jobs/{job_id}").json
    assert job["status"] == "canceled" and job["started_at"] is None


def ticking(steps: int) -> str:
    """A command job's script that writes a metric point every tenth of a second for `steps` steps."""
    return (
        "import json, os, time\n"
        "with open(os.path.join(os.environ['JOB_DIR'], 'metrics.jsonl'), 'a') as f:\n"
        f"    for s in range(1, {steps} + 1):\n"
        "        f.write(json.dumps({'step': s, 'loss': 1 / s}) + '\\n'); f.flush(); time.sleep(0.1)"
    )


def test_timeout(command_client, worker):
    # A job that makes progress forever (a command: no TensorFlow start-up for a loaded machine to stretch past
    # the timeout, so it is always stopped while running); the rule is the same for every job.
    forever = {"command": [sys.executable, "-c", ticking(10**6)], "timeout": 4}
    job_id = command_client.post("/api/v1/jobs", json=forever).json["id"]
    job, _ = wait_job(command_client, job_id, timeout=90)
    assert job["status"] == "failed" and job["reason"] == "timeout" and job["progress"]["step"] > 0
    assert job["message"] == "the job ran past its timeout" and 4 <= job["elapsed_s"] < 4 + 30


def test_kill_9_of_worker_and_horse_is_worker_lost_then_resumed(client, spawn, child_env, redis):
    first = spawn("worker", "--cpu", env=child_env, name="doomed")
    job_id = client.post("/api/v1/jobs", json={**LONG, "params": {**LONG["params"], "steps": 60}}).json["id"]
    wait_job(client, job_id, stepped(10))
    trainer = trainer_pid(redis, job_id)
    horse = ppid(trainer)
    assert ppid(horse) == first.proc.pid
    os.kill(first.proc.pid, signal.SIGKILL)
    os.kill(horse, signal.SIGKILL)
    killed = time.monotonic()
    spawn("worker", "--cpu", env=child_env, name="rescuer")  # its reaper finds the lost job, then it runs it
    deadline = time.monotonic() + 30
    while alive(trainer):  # the trainer got SIGTERM from PDEATHSIG: it checkpoints and exits
        assert time.monotonic() < deadline
        time.sleep(0.1)
    job, _ = wait_job(client, job_id, lambda j: j["attempt"] == 2, timeout=40)
    detected = time.monotonic() - killed
    assert detected < 30, f"worker_lost after {detected:.1f}s"
    job, _ = wait_job(client, job_id, timeout=180)
    assert job["status"] == "succeeded" and job["attempt"] == 2, job
    logs = client.get(f"/api/v1/jobs/{job_id}/logs").text
    assert "resumed from" in logs
    steps = [p["step"] for p in client.get(f"/api/v1/jobs/{job_id}/metrics").json["train"]]
    assert steps == sorted(set(steps)) and steps[-1] == 60  # the step count continued, no restart from 0
    print(f"kill -9 -> worker_lost detected in {detected:.1f}s")


def test_an_out_of_memory_trainer_is_oom_and_a_killed_one_exit_nonzero(client, spawn, child_env, redis):
    spawn("worker", "--cpu", "--max-memory", "3G", env=child_env)
    # 2048 images of 512x512x3 plus their noise need ~5 GB: more than the worker lets a trainer have
    oom = client.post(
        "/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic:512x512x3", "params": {"steps": 1}}
    ).json["id"]
    job, _ = wait_job(client, oom, timeout=120)
    assert job["status"] == "failed" and job["reason"] == "oom", job
    assert any("MemoryError" in line for line in job["log_tail"])

    victim = client.post("/api/v1/jobs", json=LONG).json["id"]
    wait_job(client, victim, stepped(10))
    os.kill(trainer_pid(redis, victim), signal.SIGKILL)
    job, _ = wait_job(client, victim, timeout=60)
    assert job["status"] == "failed" and job["reason"] == "exit_nonzero" and "SIGKILL" in job["message"]
    assert any("train step" in line for line in job["log_tail"])  # the last log lines are in the record


def test_two_workers_pinned_to_two_fake_gpus(client, spawn, child_env, tmp_path):
    fake_nvidia_smi(tmp_path / "bin", FAKE_SMI)
    env = {**child_env, "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}"}
    spawn("worker", "--gpus", "0", env=env)
    spawn("worker", "--gpus", "1", env=env)
    deadline = time.monotonic() + 30
    while len(client.get("/api/v1/workers").json["workers"]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    ids = [client.post("/api/v1/jobs", json=LONG).json["id"] for _ in range(2)]
    assert [client.get(f"/api/v1/jobs/{i}").json["spec"]["gpus"] for i in ids] == [1, 1]  # GPU workers are live
    for i in ids:
        wait_job(client, i, stepped(5))
    hosts: list = []
    deadline = time.monotonic() + 60
    while not (hosts and sum(len(g["processes"]) for g in hosts[0]["gpus"]) == 2):
        assert time.monotonic() < deadline, json.dumps(hosts)
        time.sleep(0.2)
        hosts = client.get("/api/v1/gpus").json["hosts"]
    gpus = hosts[0]["gpus"]
    assert gpus[0]["utilization"] == 97 and gpus[1]["utilization"] is None and gpus[1]["power_draw_w"] is None
    on_gpu = {g["index"]: [p["job_id"] for p in g["processes"]] for g in gpus}
    for i in ids:
        job = client.get(f"/api/v1/jobs/{i}").json
        seen = client.get(f"/api/v1/jobs/{i}/logs").text.split("CUDA_VISIBLE_DEVICES=")[1].split()[0]
        assert [seen] == job["gpu_ids"]  # the trainer saw exactly the GPU its worker owns
        assert on_gpu[int(seen)] == [i]  # and nvidia-smi's process on that GPU maps back to this job
        deadline = time.monotonic() + 30  # the job's own usage: its GPU, and the CPU and memory of its processes
        while not ((used := client.get(f"/api/v1/jobs/{i}").json["usage"]) and used["cpu_percent"] is not None):
            assert time.monotonic() < deadline, used
            time.sleep(0.2)
        assert used["gpus"] == [
            {"index": int(seen), "utilization": 97 if seen == "0" else None, "memory_used_mib": 512, "host": ANY}
        ]
        assert used["rss_bytes"] > 100 * 2**20 and used["processes"] >= 1  # a TensorFlow trainer
        if seen == "0":  # its GPU over its life (the fake reads 97 %; GPU 1's [N/A] is not counted)
            deadline = time.monotonic() + 30
            while not (life := client.get(f"/api/v1/jobs/{i}").json["gpu_life"]):
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert life["mean_percent"] == 97.0 and life["idle_percent"] == 0.0 and life["gpu_seconds"] > 0, life
        else:
            assert client.get(f"/api/v1/jobs/{i}").json["gpu_life"] is None
    workers = client.get("/api/v1/workers").json["workers"]
    assert sorted(w["gpus"] for w in workers) == [["0"], ["1"]]
    assert all(w["queues"] == ["gpus-1"] for w in workers)
    assert sorted(w["job_id"] for w in workers) == ids
    for i in ids:
        client.post(f"/api/v1/jobs/{i}/cancel")
        assert wait_job(client, i)[0]["status"] == "canceled"


def test_drain_finishes_the_job_takes_no_new_one_and_exits(command_client, worker):
    client = command_client  # (commands: what is checked is the worker's drain, the same for every job)
    first = client.post("/api/v1/jobs", json={"command": [sys.executable, "-c", ticking(30)]}).json["id"]
    wait_job(client, first, stepped(5))
    second = client.post("/api/v1/jobs", json={"command": "true"}).json["id"]
    name = client.get("/api/v1/workers").json["workers"][0]["name"]
    assert client.post(f"/api/v1/workers/{name}/drain").json == {"worker": name, "draining": True}
    assert worker.proc.wait(120) == 0
    job = client.get(f"/api/v1/jobs/{first}").json
    assert job["status"] == "succeeded" and job["progress"]["step"] == 30, job
    assert client.get(f"/api/v1/jobs/{second}").json["status"] == "queued"


def test_rq_info_shows_gpudecks_queues_and_workers(command_client, worker, settings):
    client = command_client  # (a command: what is checked is where RQ shows the job and the worker)
    job_id = client.post("/api/v1/jobs", json={"command": "true", "gpus": 0, "priority": "low"}).json["id"]
    rq = os.path.join(os.path.dirname(sys.executable), "rq")

    def listed() -> str:
        """rq info's text once it lists the worker by its host.cpu.pid name (the worker registers with RQ once its
        process is up, which on a loaded machine takes more than a moment), else ''."""
        run = subprocess.run([rq, "info", "--url", settings.redis_url], capture_output=True, text=True, timeout=30)
        return run.stdout if ".cpu." in run.stdout else ""

    out = until(listed, 60, "rq info listing the worker")
    # the worker serves its own queue, where the scheduler put the job (or it is running it already)
    assert "tasks@" in out and ".cpu." in out and worker.output() is not None
    assert client.get(f"/api/v1/jobs/{job_id}").json["queue"] == "cpu-low"


def test_gpudeck_failing_in_the_work_horse_ends_the_attempt_at_once_with_its_error(client, spawn, child_env, settings):
    """gpudeck's own code raising in the work-horse (here: the job dir cannot be made, as on a broken disk) ends the
    attempt as worker_lost with the error as its message, and the retry comes at once, not after a heartbeat
    expired with no cause given (the chaos soak found jobs waiting 15 s for that)."""
    job_id = client.post("/api/v1/jobs", json={**TINY, "max_retries": 1}).json["id"]
    settings.jobs_dir.mkdir(parents=True, exist_ok=True)
    settings.job_dir(job_id).write_text("not a folder")
    burst = spawn("worker", "--cpu", "--burst", env=child_env)
    assert burst.proc.wait(90) == 0
    job = client.get(f"/api/v1/jobs/{job_id}").json
    assert (job["status"], job["reason"], job["attempt"]) == ("failed", "worker_lost", 2), job
    assert job["message"].startswith("gpudeck failed on worker ") and "FileExistsError" in job["message"], job


def test_a_run_whose_loss_becomes_nan_fails_as_diverged_unless_the_spec_opts_out(client, worker, settings):
    """Issue 16 #2: plain SGD at lr 100 sends the loss to NaN within a few steps. The job fails as diverged at the
    step it happened (not a green `succeeded` with loss nan), saves no checkpoint of the broken weights, and the
    answers stay strict JSON; with stop_on_nonfinite false it trains on to the end and the loss reads null with its
    flag."""
    params = {"steps": 40, "batch_size": 64, "optimizer": "sgd", "lr": 100.0, "log_every": 1, "seed": 1}
    job_id = client.post("/api/v1/jobs", json={**TINY, "params": params}).json["id"]
    job, _ = wait_job(client, job_id, timeout=180)
    assert (job["status"], job["reason"]) == ("failed", "diverged"), job
    step = int(job["message"].split(" at step ")[1].split(";")[0])
    assert job["message"].startswith("the training loss became "), job["message"]
    assert job["progress"]["step"] < 40 and job["progress"]["step"] >= step
    assert not [c for c in (settings.job_dir(job_id) / "checkpoints").glob("ckpt-*.index") if int(c.stem[5:]) >= step]
    assert any("stopped without saving" in line for line in job["log_tail"]), job["log_tail"]
    points = client.get(f"/api/v1/jobs/{job_id}/metrics").json["train"]
    assert points[-1]["loss"] is None and points[-1]["nonfinite"]["loss"] in ("nan", "inf")

    on = client.post("/api/v1/jobs", json={**TINY, "params": {**params, "steps": 12, "stop_on_nonfinite": False}})
    job, _ = wait_job(client, on.json["id"], timeout=180)
    assert job["status"] == "succeeded" and job["progress"]["step"] == 12, job
    assert job["metrics"]["loss"] is None and job["metrics"]["nonfinite"] == {"loss": "nan"}, job["metrics"]
