"""Issue 23 #1 as an attacker would try it: under a real `gpudeck up`, a named user's command job reads every
process's environment, looks for the service's processes, its Redis (socket, TCP listeners), its home, another
job's dir and the service user's home, and writes outside its job dir. Each attempt fails; a zoo job, a script
and a multi-worker job still train in the same sandbox; the banner says how jobs are isolated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from jobs.redis_server import EmbeddedRedis
from jobs.run.proc import python_module
from jobs.run.sandbox import runtime_paths, unavailable
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


def test_a_job_cannot_reach_the_service_and_still_trains(tmp_path, child_env, service_secrets):
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
                *("--env", f"COVERS={home}:/tmp:{Path.home()}", "--env", f"SECRET_FILE={service_secrets / 'secret'}"),
                *("--env", f"ROOT_SOCKET={service_secrets / 'daemon.sock'}"),
                *("--env", f"WRITE_TARGETS=/etc/pwned:{service_secrets / 'pwned'}:{home / 'pwned'}"),
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
        # and with the powers it may have been left (issue 37): none, whoever runs the workers
        line = next(line for line in run.stdout.splitlines() if line.startswith("PRIVILEGE "))
        powers = json.loads(line[len("PRIVILEGE ") :])
        assert powers["CapEff"] == powers["CapPrm"] == "0000000000000000" and powers["NoNewPrivs"] == "1", powers
        assert all(code != 0 for code in powers["umount_cli"].values()), powers
        assert all(code != 0 for code in powers["umount_syscall"].values()), powers
        assert powers["remount_rw"] != 0 and powers["wrote_outside"] == [] and "redis" not in powers["home_after"]
        if os.geteuid() == 0:  # (as CI runs: the job is GPUDECK_JOB_USER, not root)
            assert powers["uid"] != 0 and powers["shadow"] == powers["secret_file"] == "PermissionError", powers
            assert powers["root_socket"] == "PermissionError", powers
        assert "sandbox  bubblewrap" in stack.output() and "no capability" in stack.output()
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
