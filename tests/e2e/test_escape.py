"""Issue 23 #1 as an attacker would try it: under a real `gpudeck up`, a named user's command job reads every
process's environment, looks for the service's processes, its Redis (socket, TCP listeners), its home, another
job's dir and the service user's home, and writes outside its job dir. Each attempt fails; a zoo job, a script
and a multi-worker job still train in the same sandbox; the banner says how jobs are isolated."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from jobs.proc import python_module
from jobs.redis_server import EmbeddedRedis
from jobs.sandbox import runtime_paths, unavailable
from tests.support.stack import Up

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[1] / "support" / "scripts"
PROJECT = Path(__file__).resolve().parents[2]


def wait(url: str, token: str, job_id: int, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = requests.get(
            f"{url}/api/v1/jobs/{job_id}/wait?timeout=20", headers={"Authorization": f"Bearer {token}"}, timeout=30
        ).json()
        if job["status"] in ("succeeded", "failed", "canceled"):
            return job
        assert time.monotonic() < deadline, job


def test_a_job_cannot_reach_the_service_and_still_trains(tmp_path, child_env):
    assert unavailable() is None, f"this test needs the sandbox: {unavailable()}"
    home = tmp_path / "home"
    env = {k: v for k, v in child_env.items() if k not in ("GPUDECK_COMMAND_JOBS", "REDIS_URL")}  # the embedded one
    stack = Up(home, env, tmp_path / "up.log", args=("--cpu-workers", "2"))
    try:
        assert "sandbox  bubblewrap: each job in its own PID and mount namespace" in stack.output()
        made = subprocess.run(
            python_module("tui.cli", "token", "create", "mallory", "--home", str(home)),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip()
        auth = {"Authorization": f"Bearer {token}"}

        def submit(spec: dict) -> int:
            answer = requests.post(f"{stack.url}/api/v1/jobs", json=spec, headers=auth, timeout=30)
            assert answer.status_code == 201, answer.text
            return answer.json()["id"]

        other = submit({"command": ["sh", "-c", "echo s3cr3t > $JOB_DIR/secret.txt"]})
        assert wait(stack.url, token, other)["status"] == "succeeded"
        socket_path = EmbeddedRedis.running_socket(home / "redis")
        run = subprocess.run(
            [
                *python_module("tui.cli", "run", "--source", str(SCRIPTS), "--api", stack.url, "--token", token),
                *("--env", f"STACK_HOME={home}", "--env", f"STACK_SOCKET={socket_path}"),
                *("--env", f"OTHER_JOB={other}", "--env", f"PROJECT={PROJECT}"),
                *("--", "python", "escape.py"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        report = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("ESCAPE "))[7:])
        assert report["environ_leaks"] == [] and report["own_env_secrets"] == [], report
        assert report["service_processes"] == [] and report["pids_seen"] <= 6, report  # its own namespace only
        assert report["home_files"] == [] and report["redis_socket_reached"] is False, report
        assert not [conf for _, conf in report["redis_on_tcp"] if conf.startswith(str(home))], report
        assert report["other_job_read"] is None and report["other_job_error"] == "FileNotFoundError", report
        # the service user's home: an empty one, where only the Python the job runs with shows (read-only)
        python_only = {p.relative_to(Path.home()).parts[0] for p in runtime_paths() if p.is_relative_to(Path.home())}
        assert set(report["user_home_listing"]) <= python_only, report
        assert "/etc/pwned" not in report["wrote"] and str(PROJECT / "pwned") not in report["wrote"], report
        assert not (home / "pwned").exists() and not Path("/tmp/pwned").exists()  # what it wrote stayed inside
        (escape_job,) = [int(line.split()[1]) for line in run.stderr.splitlines() if line.startswith("job ")][:1]
        assert (home / "jobs" / str(escape_job) / "mine.txt").read_text() == "the job's own dir is writable"

        # and in the same sandbox, jobs still train: a zoo job, a script, a job of two tasks
        zoo = submit({"model": "lenet", "dataset": "synthetic:16x16x3", "params": {"steps": 3, "batch_size": 8}})
        pair = submit({"command": [sys.executable, "-c", "import os; print(os.environ['TF_CONFIG'])"], "workers": 2})
        for job_id in (zoo, pair):
            job = wait(stack.url, token, job_id)
            assert job["status"] == "succeeded", job
        assert "test_accuracy" in wait(stack.url, token, zoo)["result"]
    finally:
        stack.kill()
