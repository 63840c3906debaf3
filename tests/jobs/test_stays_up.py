"""Small defects of staying up (issue 17): a restart on a port in TIME-WAIT, a restart backoff that resets after a
healthy run, and 405 answers that say what is allowed."""

from __future__ import annotations

import os
import socket

import pytest

from jobs.errors import ConfigError
from jobs.supervisor import HEALTHY_S, RESTART_BACKOFF_S, _check_port_free, restart_delay


def test_a_port_in_time_wait_is_free_but_one_in_use_is_not():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn listens
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    with pytest.raises(ConfigError, match="is gpudeck already up"):
        _check_port_free("127.0.0.1", port)
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end of the connection waits in TIME-WAIT
    server.close()
    client.close()
    _check_port_free("127.0.0.1", port)  # Ctrl-C then `make up` again: no minute of "Address already in use"


def test_the_restart_backoff_grows_while_a_worker_crash_loops_and_resets_after_a_healthy_run():
    deaths, delays = 0, []
    for _ in range(7):
        delay, deaths = restart_delay(deaths, lived_s=1.0)
        delays.append(delay)
    assert delays == [*RESTART_BACKOFF_S, RESTART_BACKOFF_S[-1], RESTART_BACKOFF_S[-1]]
    delay, deaths = restart_delay(deaths, lived_s=HEALTHY_S + 15)  # it lived 45 s: not a crash loop
    assert (delay, deaths) == (RESTART_BACKOFF_S[0], 1)


def test_405_says_which_methods_are_allowed(client):
    resp = client.delete("/api/v1/jobs")
    assert resp.status_code == 405 and resp.json["error"] == "method_not_allowed"
    assert set(resp.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS", "POST"}


def test_a_long_home_keeps_redis_on_a_private_socket_never_on_tcp(tmp_path):
    from redis import Redis

    from jobs.redis_server import EmbeddedRedis

    home = tmp_path / ("h" * (120 - len(str(tmp_path)) - 1))
    assert len(str(home)) == 120
    server = EmbeddedRedis(home / "redis")
    url = server.start()
    try:
        assert url.startswith("unix://") and "port 0" in (home / "redis" / "redis.conf").read_text()
        sock = url.removeprefix("unix://")
        assert len(sock) <= 100 and (os.stat(os.path.dirname(sock)).st_mode & 0o777) == 0o700
        client = Redis.from_url(url)
        assert client.ping() and client.config_get("port") == {"port": "0"}  # no TCP listener at all
        client.close()
    finally:
        server.stop()
    assert not os.path.exists(os.path.dirname(sock))


def test_a_worker_that_stopped_beating_is_lost_and_health_degraded(client, redis):
    from rq import Worker

    from jobs import keys

    for name in ("w1", "w2"):
        w = Worker([keys.private_queue(name)], name=name, connection=redis)
        w.register_birth()  # what RQ keeps for minutes after a kill -9
        w.set_state("busy")
    redis.set(keys.alive_key("w1"), "1", ex=10)  # w1's own thread beats; w2 was killed
    workers = {w["name"]: w for w in client.get("/api/v1/workers").json["workers"]}
    assert (workers["w1"]["state"], workers["w1"]["alive"]) == ("busy", True)
    assert (workers["w2"]["state"], workers["w2"]["alive"], workers["w2"]["job_id"]) == ("lost", False, None)
    health = client.get("/healthz").json
    assert health == {**health, "status": "degraded", "redis": "ok", "workers": 2, "workers_alive": 1}
    assert 'gpudeck_workers{state="lost"} 1.0' in client.get("/metrics").text
    redis.set(keys.alive_key("w2"), "1", ex=10)
    assert client.get("/healthz").json["status"] == "ok"


def test_two_tasks_on_one_host_may_make_the_source_folder_at_the_same_moment(tmp_path, monkeypatch):
    """Tasks of a multi-worker job without a source, on one host, share `$JOB_DIR/src`: the one that finds it made
    by the other between its check and its mkdir goes on (the chaos soak found that race: FileExistsError)."""
    from pathlib import Path

    from jobs.record import Kept
    from jobs.run.launch import WorkerContext, source_copy
    from jobs.settings import Settings

    job_dir = tmp_path / "jobs" / "7"
    (job_dir / "src").mkdir(parents=True)  # the other task was a moment faster
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda p: False if p.name == "src" else real_exists(p))
    assert source_copy(WorkerContext(Settings(home=tmp_path)), Kept({"command": "true"}), job_dir) == job_dir / "src"
