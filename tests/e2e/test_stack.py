"""`gpudeck up` as a user runs it: stop within 10 s leaving no process, jobs survive a restart."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from jobs.redis_server import free_port
from jobs.run.proc import python_module
from tests.support.live import alive, cmdline, descendants, parent, until
from tests.support.stack import Up

pytestmark = pytest.mark.slow


def test_stop_restart_and_the_cli(tmp_path, child_env):
    home = tmp_path / "home"
    stack = Up(home, child_env, tmp_path / "up.log")
    try:
        assert f"gpudeck is up: API {stack.url}" in stack.output()
        assert f"home     {home}" in stack.output() and "worker cpu 0" in stack.output()
        long = {"model": "lenet", "dataset": "synthetic:16x16x3", "params": {"steps": 100000, "batch_size": 16}}
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
        # `gpudeck token` on the server finds the stack's embedded Redis by the home alone (no REDIS_URL)
        server = {**{k: v for k, v in env.items() if k != "REDIS_URL"}, "GPUDECK_HOME": str(home)}
        made = subprocess.run(
            [*cli, "token", "create", "ops", "--admin"], env=server, capture_output=True, text=True, timeout=60
        )
        assert made.returncode == 0 and made.stdout.startswith("gpd_"), made.stderr
        assert requests.get(f"{stack.url}/api/v1/jobs").status_code == 401  # a named token exists: one is needed
        token = {**env, "GPUDECK_TOKEN": made.stdout.strip()}
        run = subprocess.run([*cli, "whoami"], env=token, capture_output=True, timeout=60)
        assert run.returncode == 0 and run.stdout.decode().strip() == "ops, admin"
        gone = subprocess.run([*cli, "token", "revoke", "ops"], env=server, capture_output=True, timeout=60)
        assert gone.returncode == 0 and requests.get(f"{stack.url}/api/v1/jobs").status_code == 200
        assert stack.stop() < 10
    finally:
        stack.kill()
    gone = subprocess.run([*cli, "ls"], env=env, capture_output=True, text=True, timeout=60)
    assert gone.returncode == 3 and "cannot reach the gpudeck API" in gone.stderr


def test_a_job_that_ignores_sigterm_does_not_outlive_the_stop(tmp_path, child_env):
    """A job that stays past the warm stop (it ignores SIGTERM, as a trainer still checkpointing would seem): its
    worker and work-horse are killed at the hard stop, and what they leave (the sandbox, the job) is ended with
    them, within the stop's 10 s, not left running for its grace."""
    stack = Up(tmp_path / "home", {**child_env, "GPUDECK_COMMAND_JOBS": "1"}, tmp_path / "up.log")
    try:
        stays = {"command": ["sh", "-c", "trap '' TERM; echo staying; while true; do sleep 1; done"]}
        job_id = requests.post(f"{stack.url}/api/v1/jobs", json=stays, timeout=30).json()["id"]
        logs = f"{stack.url}/api/v1/jobs/{job_id}/logs"
        until(lambda: "staying" in requests.get(logs, timeout=10).text, 60, "the job running")
        procs = descendants(stack.proc.pid)
        took = stack.stop()
        assert took < 10 and stack.proc.returncode == 0, took
        assert [p for p in procs if alive(p)] == []
    finally:
        stack.kill()


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


def test_one_stack_per_home_and_nothing_runs_on_after_a_kill_9(tmp_path, child_env):
    """Issue 23 #13: a second `up` on the same home is refused naming the first's pid; after `kill -9` of `up` its
    API and workers end (they get SIGTERM when it dies); the Redis it left is adopted by the next `up` (never a
    second redis-server on the same socket and append-only file): the jobs are all there, and that `up` stops it
    when it stops."""
    from redis import Redis

    from jobs.redis_server import EmbeddedRedis

    home = tmp_path / "home"
    env = {k: v for k, v in child_env.items() if k != "REDIS_URL"}
    stack = Up(home, child_env, tmp_path / "up.log")
    try:

        def up_again() -> subprocess.CompletedProcess:
            argv = python_module("tui.cli", "up", "--port", str(free_port()), "--home", str(home))
            return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)

        kept = {"model": "lenet", "dataset": "synthetic", "params": {"steps": 2}, "name": "kept"}
        job = requests.post(f"{stack.url}/api/v1/jobs", json=kept, timeout=10).json()
        second = up_again()
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr
        assert f"another gpudeck up (pid {stack.proc.pid}) runs with this home" in second.stderr
        family = descendants(stack.proc.pid)
        sock = EmbeddedRedis.running_socket(home / "redis")
        redis_pid = Redis(unix_socket_path=str(sock)).info("server")["process_id"]
        others = [p for p in family if p != redis_pid and parent(p) == stack.proc.pid]  # the API, the worker
        assert len(others) >= 2
        os.kill(stack.proc.pid, signal.SIGKILL)
        stack.proc.wait()
        until(lambda: not any(alive(p) for p in others), 30, "the API and the workers ended with their `up`")
        again = Up(home, child_env, tmp_path / "up2.log")
        try:
            assert f"pid {redis_pid}, left by an earlier gpudeck up, adopted" in again.output(), again.output()
            assert requests.get(f"{again.url}/api/v1/jobs/{job['id']}", timeout=10).json()["name"] == "kept"
            assert redis_servers(home / "redis") == [redis_pid]  # that one, no second
        finally:
            again.stop()
        until(lambda: not alive(redis_pid), 15, "the adopted Redis stopped with the `up` that adopted it")
    finally:
        stack.kill()


def redis_servers(data_dir) -> list[int]:
    """The live redis-servers working in `data_dir`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and b"redis-server" in cmdline(int(entry)):
            try:
                if os.readlink(f"/proc/{entry}/cwd") == str(data_dir):
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_with_redis_url_set_no_redis_is_started_and_that_one_is_used(tmp_path, child_env, redis, redis_url):
    stack = Up(tmp_path / "home", child_env, tmp_path / "up.log", redis_url=redis_url)
    try:
        assert f"redis    {redis_url} (REDIS_URL)" in stack.output()
        cmdlines = [c for pid in descendants(stack.proc.pid) if (c := cmdline(pid))]  # the live ones
        assert cmdlines and not any(b"redis-server" in c for c in cmdlines)
        assert not (tmp_path / "home" / "redis").exists()
        job = requests.post(
            f"{stack.url}/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic", "params": {"steps": 2}}
        ).json()
        assert redis.exists(f"gpudeck:job:{job['id']}")  # it landed in the Redis we named
    finally:
        stack.kill()


TICK = (
    "import json, os, time\n"
    "with open(os.path.join(os.environ['JOB_DIR'], 'metrics.jsonl'), 'a') as f:\n"
    "    for s in range(1, 151):\n"
    "        f.write(json.dumps({'step': s, 'loss': 1 / s}) + '\\n'); f.flush(); print('tick', s, flush=True)\n"
    "        time.sleep(0.2)\n"
)
"""A command job of 150 steps over ~30 s: a log line and a metric point each."""


def test_a_killed_redis_comes_back_and_a_running_job_rides_the_outage_out(tmp_path, child_env):
    stack = Up(tmp_path / "home", {**child_env, "GPUDECK_COMMAND_JOBS": "1"}, tmp_path / "up.log")
    try:
        job_id = requests.post(f"{stack.url}/api/v1/jobs", json={"command": [sys.executable, "-c", TICK]}).json()["id"]
        job = until(lambda: (j := requests.get(f"{stack.url}/api/v1/jobs/{job_id}").json())["progress"]["step"] and j)
        worker = requests.get(f"{stack.url}/api/v1/workers").json()["workers"][0]["name"]
        redis_pid = next(p for p in descendants(stack.proc.pid) if b"redis-server" in cmdline(p))

        # An outage longer than a heartbeat's life (15 s): `up` is held still (SIGSTOP) so that Redis stays down
        # that long, as a slow AOF load or a host hiccup would keep it, instead of coming back at once.
        os.kill(stack.proc.pid, signal.SIGSTOP)
        os.kill(redis_pid, signal.SIGKILL)
        try:
            down = requests.get(f"{stack.url}/healthz", timeout=10)
            assert down.status_code == 503 and down.json()["status"] == "unavailable"
            time.sleep(17)
        finally:
            os.kill(stack.proc.pid, signal.SIGCONT)
        until(lambda: requests.get(f"{stack.url}/healthz", timeout=10).status_code == 200, 20, "redis restarted")
        assert "redis-server exited (-9); restarting it" in stack.output()
        until(lambda: "redis-server is back" in stack.output(), 10, "up logging that Redis is back")

        job = requests.get(f"{stack.url}/api/v1/jobs/{job_id}/wait?timeout=120", timeout=130).json()
        assert job["status"] == "succeeded" and job["attempt"] == 1, job  # never declared worker_lost
        lines = requests.get(f"{stack.url}/api/v1/jobs/{job_id}/logs").text.splitlines()
        assert [line for line in lines if line.startswith("tick")] == [f"tick {s}" for s in range(1, 151)]
        steps = [p["step"] for p in requests.get(f"{stack.url}/api/v1/jobs/{job_id}/metrics").json()["train"]]
        assert steps == list(range(1, 151))  # every point, in order, none twice
        workers = requests.get(f"{stack.url}/api/v1/workers").json()["workers"]
        assert [w["name"] for w in workers] == [worker]  # the same worker process, not a restarted one
        assert "exited" not in stack.output().split("redis-server is back", 1)[1]  # nothing else died
        worker_log = (tmp_path / "home" / "logs" / "worker-cpu0.log").read_text()
        assert f"job {job_id}: redis is back after" in worker_log
    finally:
        stack.kill()


def test_a_killed_api_is_started_again(tmp_path, child_env):
    stack = Up(tmp_path / "home", child_env, tmp_path / "up.log")
    try:
        job_id = requests.post(
            f"{stack.url}/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic", "params": {"steps": 2}}
        ).json()["id"]
        api_pid = next(  # gunicorn's master (its workers carry the same command line, one level down)
            p for p in descendants(stack.proc.pid) if b"api.serve" in cmdline(p) and parent(p) == stack.proc.pid
        )
        os.kill(api_pid, signal.SIGKILL)
        until(lambda: "api exited (-9); restarting in 1s" in stack.output(), 10, "up noticing the API died")

        def new_api_answers() -> bool:
            """A new master under `up`, answering (the old one's orphaned workers may answer for a moment more)."""
            masters = [
                p for p in descendants(stack.proc.pid) if b"api.serve" in cmdline(p) and parent(p) == stack.proc.pid
            ]
            if not masters or api_pid in masters:
                return False
            try:
                return requests.get(f"{stack.url}/api/v1/jobs/{job_id}", timeout=2).json()["id"] == job_id
            except (requests.ConnectionError, ValueError):
                return False

        until(new_api_answers, 60, "a new API answering, with the job submitted before")  # nothing was lost
        assert stack.proc.poll() is None
    finally:
        stack.kill()
