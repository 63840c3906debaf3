"""`gpudeck up` as a user runs it: stop within 10 s leaving no process, jobs survive a restart."""

import json
import subprocess
import time
from pathlib import Path

import pytest
import requests

from jobs.proc import python_module
from tests.support.live import alive, descendants
from tests.support.stack import Up

pytestmark = pytest.mark.slow


def test_stop_restart_and_the_cli(tmp_path, child_env):
    home = tmp_path / "home"
    stack = Up(home, child_env, tmp_path / "up.log")
    try:
        assert f"gpudeck is up: API {stack.url}" in stack.output()
        assert f"home     {home}" in stack.output() and "worker cpu 0" in stack.output()
        long = {"model": "resnet20", "dataset": "synthetic:16x16x3", "params": {"steps": 100000, "batch_size": 16}}
        job_id = requests.post(f"{stack.url}/api/v1/jobs", json=long).json()["id"]
        deadline = time.monotonic() + 120
        while requests.get(f"{stack.url}/api/v1/jobs/{job_id}").json()["progress"]["step"] in (None, 0):
            assert time.monotonic() < deadline, stack.output()[-3000:]
            time.sleep(0.2)
        procs = descendants(stack.proc.pid)
        assert len(procs) >= 5  # redis, api (gunicorn master + workers), worker, work-horse, trainer
        took = stack.stop()
        assert took < 10, f"stop took {took:.1f}s"
        assert stack.proc.returncode == 0
        assert [p for p in procs if alive(p)] == []
        assert list((home / "jobs" / str(job_id) / "checkpoints").glob("ckpt-*.index"))
    finally:
        stack.kill()

    # A second `up` on the same home still has the job: it was queued again (worker_lost is retried)
    # and the new worker resumes it from the checkpoint the stop saved.
    stack = Up(home, child_env, tmp_path / "up2.log")
    env = {**child_env, "GPUDECK_API": stack.url}
    cli = python_module("tui.cli")
    try:
        deadline = time.monotonic() + 120
        # queued again by the stop (its worker marked it lost) or, when a loaded machine made the stop kill that
        # worker before it could, by the new stack's reaper once the old heartbeat has expired
        while (job := requests.get(f"{stack.url}/api/v1/jobs/{job_id}").json())["attempt"] != 2:
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
        while "resumed from" not in requests.get(f"{stack.url}/api/v1/jobs/{job_id}/logs").text:
            assert time.monotonic() < deadline, stack.output()[-3000:]
            time.sleep(0.2)
        run = subprocess.run([*cli, "cancel", str(job_id)], env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0 and "stopping" in run.stdout
        run = subprocess.run([*cli, "wait", str(job_id)], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and "canceled" in run.stdout  # a canceled job fails a CI gate
        run = subprocess.run(
            [
                *cli,
                "submit",
                "--model",
                "lenet",
                "--dataset",
                "synthetic:28x28x1",
                "--param",
                "steps=3",
                "--param",
                "batch_size=8",
                "--wait",
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["status"] == "succeeded" and json.loads(run.stdout)["id"] == job_id + 1
        run = subprocess.run([*cli, "ls"], env=env, capture_output=True, text=True, timeout=60)
        lines = run.stdout.splitlines()
        assert lines[0].split()[:2] == ["ID", "STATUS"]
        assert lines[1].split()[:2] == [str(job_id + 1), "succeeded"] and lines[2].split()[:2] == [
            str(job_id),
            "canceled",
        ]
        bad = subprocess.run(
            [*cli, "submit", "--model", "resnet21", "--dataset", "synthetic"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 2 and "model: unknown model 'resnet21'" in bad.stderr
        assert stack.stop() < 10
    finally:
        stack.kill()
    gone = subprocess.run([*cli, "ls"], env=env, capture_output=True, text=True, timeout=60)
    assert gone.returncode == 3 and "cannot reach the gpudeck API" in gone.stderr


def test_a_second_up_on_a_taken_port_says_so(tmp_path, child_env):
    stack = Up(tmp_path / "home", child_env, tmp_path / "up.log")
    try:
        run = subprocess.run(
            python_module("tui.cli", "up", "--port", str(stack.port), "--home", str(tmp_path / "other")),
            env=child_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 2
        assert f"cannot listen on 127.0.0.1:{stack.port}" in run.stderr and "Traceback" not in run.stderr
    finally:
        stack.kill()


def test_with_redis_url_set_no_redis_is_started_and_that_one_is_used(tmp_path, child_env, redis, redis_url):
    stack = Up(tmp_path / "home", child_env, tmp_path / "up.log", redis_url=redis_url)
    try:
        assert f"redis    {redis_url} (REDIS_URL)" in stack.output()
        cmdlines = []
        for pid in descendants(stack.proc.pid):
            try:
                cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes())
            except OSError:
                pass
        assert cmdlines and not any(b"redis-server" in c for c in cmdlines)
        assert not (tmp_path / "home" / "redis").exists()
        job = requests.post(f"{stack.url}/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic"}).json()
        assert redis.exists(f"gpudeck:job:{job['id']}")  # it landed in the Redis we named
    finally:
        stack.kill()
