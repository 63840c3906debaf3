"""`gpudeck up`: Redis, the API and the workers of each GPU (GPUDECK_JOBS_PER_GPU, and more while shares that fit a
GPU wait for a job slot: Stack._grow) as child processes; Ctrl-C stops them all."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from redis import Redis
from redis.exceptions import RedisError

from jobs import mps
from jobs.backends import base as backends
from jobs.errors import ConfigError
from jobs.gpus import list_gpus
from jobs.keys import alive_key, slots_wanted_key, worker_name
from jobs.redis_server import EmbeddedRedis
from jobs.run import sandbox
from jobs.run.proc import become_subreaper, descendants, end_descendants, pdeathsig, python_module
from jobs.settings import DEFAULT_PORT, Settings

log = logging.getLogger(__name__)

WARM_STOP_S = 6.0
"""After SIGTERM, how long workers get to let their trainers checkpoint before a cold stop."""
HARD_STOP_S = 8.5
"""After SIGTERM, when whatever is left of the stack is killed (the whole stop stays under 10 s)."""
RESTART_BACKOFF_S = (1, 2, 5, 10, 30)
"""Waits before restarting a worker that died, growing with each death in a row."""
MPS_CHECK_S = 2.0
"""How often `gpudeck up` looks whether each GPU's MPS control daemon still runs."""
HEALTHY_S = 30.0
"""A worker that lived this long before it died starts the backoff over: it was not crash-looping."""
GROW_EVERY_S = 1.0
"""How often `gpudeck up` reads the job slots its GPUs want (jobs.schedule: shares that fit but found no slot)."""
SLOT_IDLE_S = 60.0
"""An extra job slot's worker that has had no job this long exits (`worker --idle-exit`): slots follow demand."""


SPARE_CORES_PER_GPU = 4
"""A GPU host with at least this many cores for each GPU (and 4 more) gets a CPU worker from `gpudeck up` too."""


def cpu_workers_default(gpus: int, cores: int | None) -> int:
    """`gpudeck up`'s CPU workers where --cpu-workers is not given: one where there is no GPU, and one on a GPU host
    whose cores are to spare (an H200 box of 16 cores: its `--gpus 0` jobs run, rather than wait for good — issue
    67 #4); none on a GPU host short of cores (its jobs' input pipelines need them)."""
    if not gpus:
        return 1
    return 1 if (cores or 0) >= SPARE_CORES_PER_GPU * (gpus + 1) else 0


def restart_delay(deaths_in_a_row: int, lived_s: float) -> tuple[float, int]:
    """(seconds to wait before restarting a worker that died after `lived_s`, its deaths in a row now)."""
    if lived_s >= HEALTHY_S:
        deaths_in_a_row = 0
    return RESTART_BACKOFF_S[min(deaths_in_a_row, len(RESTART_BACKOFF_S) - 1)], deaths_in_a_row + 1


@dataclass
class Child:
    """One supervised process."""

    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    deaths: int = 0
    restart_at: float | None = None
    started_at: float = 0.0
    env: dict[str, str] = field(default_factory=dict)
    drained: bool = False
    extra_of: str | None = None
    """The GPU an extra job slot serves (started for shares that waited; never restarted: wanted again, started
    again)."""

    def start(self) -> None:
        self.started_at = time.monotonic()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            # Its own session: a Ctrl-C reaches only the supervisor, which stops things in order. SIGTERM when the
            # supervisor dies (kill -9): an API or a worker never runs on unsupervised (a worker's warm stop lets
            # its trainer checkpoint; Redis, which they need for that, stays until a next `up` finds it).
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
                preexec_fn=pdeathsig,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass


class Stack:
    """The processes of one `gpudeck up`."""

    def __init__(self, settings: Settings, *, host: str, port: int, gpus: list[str] | None, cpu_workers: int | None):
        self.settings = settings
        self.host, self.port = host, port
        self.redis: EmbeddedRedis | None = None
        self.redis_url = settings.redis_url
        self.gpus = gpus
        self.cpu_workers = cpu_workers
        self.api: Child | None = None
        self.workers: list[Child] = []
        self.mps_gpus: list[str] = []
        """The GPUs whose MPS control daemon this stack started (GPUDECK_MPS=on): stopped with it."""
        self._mps_checked = 0.0
        self._mps_down: set[str] = set()
        self._stopping = False
        self._redis_deaths = 0
        self._redis_started = 0.0
        self._redis_restart_at: float | None = None
        self._lock: IO[str] | None = None
        self._served: list[str] = []
        """The GPUs this stack's workers serve (their job slots may grow: _grow)."""
        self._grown_at = 0.0
        self._env: dict[str, str] = {}
        self._client: Redis | None = None
        self._grow_after: dict[str, float] = {}
        """GPUs whose last extra worker failed: when one may be started there again."""

    @property
    def logs_dir(self) -> Path:
        return self.settings.home / "logs"

    @property
    def api_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        home = self.settings.home
        home.mkdir(parents=True, exist_ok=True)
        self._lock = lock_home(home)
        _check_port_free(self.host, self.port)
        if self.redis_url is None:
            self.redis = EmbeddedRedis(home / "redis")
            self.redis_url = self.redis.adopt() or self.redis.start()  # (one a killed `up` left runs on: taken over)
            self._redis_started = time.monotonic()
        env = {"REDIS_URL": self.redis_url, "GPUDECK_HOME": str(home), "GPUDECK_BACKEND": self.settings.backend}
        py = python_module("jobs.cli")
        self.api = Child(
            "api",
            [*python_module("api.serve"), "--host", self.host, "--port", str(self.port)],
            self.logs_dir / "api.log",
            env=env,
        )
        self.api.start()
        agent_module = backends.of(self.settings).agent_module
        if agent_module:  # (the compute nodes are another's, Slurm's: its agent, no workers)
            agent = Child(
                f"{self.settings.backend} agent",
                python_module(agent_module),
                self.logs_dir / f"{self.settings.backend}-agent.log",
                env=env,
            )
            self.workers.append(agent)
            agent.start()
            self._wait_api()
            return
        gpus = self.gpus if self.gpus is not None else [g["index"] for g in list_gpus()]
        if self.settings.mps:  # (one control daemon a GPU, before its workers: they refuse to start without it)
            for gpu in gpus:
                mps.start(self.settings, gpu)
                self.mps_gpus.append(gpu)
        per_gpu = self.settings.jobs_per_gpu  # (a GPU's job slots: whole-GPU jobs take one, shares the others)
        self._served, self._env = list(gpus), env
        for gpu in gpus:
            for k in range(per_gpu):
                suffix = f"-{k}" if per_gpu > 1 else ""
                self.workers.append(
                    Child(
                        f"worker gpu {gpu}" + (f" #{k}" if per_gpu > 1 else ""),
                        [*py, "worker", "--gpus", gpu],
                        self.logs_dir / f"worker-gpu{gpu}{suffix}.log",
                        env=env,
                    )
                )
        cpu = self.cpu_workers if self.cpu_workers is not None else cpu_workers_default(len(gpus), os.cpu_count())
        for i in range(cpu):
            self.workers.append(
                Child(f"worker cpu {i}", [*py, "worker", "--cpu"], self.logs_dir / f"worker-cpu{i}.log", env=env)
            )
        for w in self.workers:
            w.start()
        self._wait_api()

    def _wait_api(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        assert self.api is not None
        while time.monotonic() < deadline:
            if not self.api.alive():
                raise ConfigError(f"the API exited at start; see {self.api.log_path}:\n{_tail(self.api.log_path)}")
            try:
                with urllib.request.urlopen(f"{self.api_url}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise ConfigError(f"the API did not answer on {self.api_url} within {timeout:.0f}s; see {self.api.log_path}")

    def banner(self) -> str:
        lines = [
            f"gpudeck is up: API {self.api_url}",
            f"  home     {self.settings.home}",
            f"  redis    {self.redis_url}" + (f" ({self._redis_kind()})" if self.redis else " (REDIS_URL)"),
            f"  logs     {self.logs_dir}/",
            f"  {sandbox.describe(self.settings.sandbox, self.settings.command_jobs_trusted, self.settings.job_user)}",
        ]
        for w in self.workers:
            lines.append(f"  {w.name:<12} pid {w.proc.pid if w.proc else '-'}, log {w.log_path}")
        lines.append("Ctrl-C stops everything.")
        return "\n".join(lines)

    def _redis_kind(self) -> str:
        adopted = self.redis.adopted if self.redis else None
        return "embedded" if adopted is None else f"embedded; pid {adopted}, left by an earlier gpudeck up, adopted"

    def watch(self) -> int:
        """Restart what dies (Redis, the API, workers) until asked to stop."""
        assert self.api is not None
        while not self._stopping:
            self._keep_redis()
            now = time.monotonic()
            self._keep_mps(now)
            self._keep(self.api, now, drainable=False)
            for w in self.workers:
                self._keep(w, now, drainable=True)
            self._grow(now)
            time.sleep(0.2)
        return 0

    def _grow(self, now: float) -> None:
        """Job slots that follow demand (issue 64): where the scheduler's last round wanted slots more on a GPU of
        this host (shares that fit its memory found its workers busy: jobs.keys.slots_wanted_key), one worker more
        on it, up to GPUDECK_MAX_JOBS_PER_GPU, one at a time (the next once the last one serves). An extra worker
        exits after SLOT_IDLE_S without a job, and is not restarted."""
        s = self.settings
        if s.max_jobs_per_gpu <= s.jobs_per_gpu or not self._served or now < self._grown_at + GROW_EVERY_S:
            return
        self._grown_at = now
        for w in self.workers:
            if w.extra_of is not None and not w.alive() and w.proc is not None and w.proc.returncode != 0:
                self._grow_after[w.extra_of] = now + HEALTHY_S  # (one that failed: none more there for a while)
                log.warning("%s exited (%s); see %s", w.name, w.proc.returncode, w.log_path)
        self.workers = [w for w in self.workers if w.extra_of is None or w.alive()]
        try:
            if self._client is None:
                self._client = Redis.from_url(self.redis_url or "", socket_timeout=2)
            redis = self._client
            host = socket.gethostname()
            wanted = json.loads(redis.get(slots_wanted_key(host)) or "{}")
            for gpu, n in sorted(wanted.items()):
                extra = [w for w in self.workers if w.extra_of == gpu]
                if gpu not in self._served or n < 1 or s.jobs_per_gpu + len(extra) >= s.max_jobs_per_gpu:
                    continue
                if now < self._grow_after.get(gpu, 0.0):
                    continue
                if any(not redis.exists(alive_key(worker_name(host, [gpu], w.proc.pid))) for w in extra if w.proc):
                    continue  # (the last one started does not serve yet: it may be the slot wanted)
                self._start_slot(gpu, s.jobs_per_gpu + len(extra))
        except (RedisError, ValueError, AttributeError) as exc:  # (Redis away or restarting: the next look)
            log.debug("job slots wanted: not read (%s)", exc)

    def _start_slot(self, gpu: str, k: int) -> None:
        child = Child(
            f"worker gpu {gpu} #{k}",
            [*python_module("jobs.cli"), "worker", "--gpus", gpu, "--idle-exit", f"{SLOT_IDLE_S:g}"],
            self.logs_dir / f"worker-gpu{gpu}-{k}.log",
            env=self._env,
            extra_of=gpu,
        )
        child.start()
        self.workers.append(child)
        pid = child.proc.pid if child.proc else "-"
        log.info("%s started: a share that fits GPU %s waits for a job slot (pid %s)", child.name, gpu, pid)

    @staticmethod
    def _keep(child: Child, now: float, drainable: bool) -> None:
        """Restart `child` after it died, with a backoff that grows while it keeps dying; a worker that exits 0
        was drained or stopped on purpose and is left alone."""
        if child.alive() or child.drained or child.extra_of is not None:
            return
        if drainable and child.proc is not None and child.proc.returncode == 0 and child.restart_at is None:
            child.drained = True
            log.info("%s exited cleanly (drained); not restarting it", child.name)
            return
        if child.restart_at is None:
            delay, child.deaths = restart_delay(child.deaths, now - child.started_at)
            child.restart_at = now + delay
            code = child.proc.returncode if child.proc else "?"
            log.warning("%s exited (%s); restarting in %ss. See %s", child.name, code, delay, child.log_path)
        elif now >= child.restart_at:
            child.restart_at = None
            child.start()

    def _keep_mps(self, now: float) -> None:
        """Start a GPU's MPS control daemon again when it is gone (killed, or its control pipe removed) at two looks
        in a row, MPS_CHECK_S apart (one that is starting has its pipe before its process, or the other way round);
        its workers wait meanwhile (their jobs' CUDA calls fail until it is back)."""
        if not self.mps_gpus or now < self._mps_checked + MPS_CHECK_S:
            return
        self._mps_checked = now
        for gpu in self.mps_gpus:
            if self._stopping or mps.alive(self.settings, gpu):
                self._mps_down.discard(gpu)
                continue
            if gpu not in self._mps_down:
                self._mps_down.add(gpu)
                continue
            self._mps_down.discard(gpu)
            log.error("the MPS control daemon of GPU %s is gone; starting it again", gpu)
            try:
                mps.start(self.settings, gpu)
            except (ConfigError, OSError, subprocess.SubprocessError) as exc:
                log.error("the MPS control daemon of GPU %s did not start: %s", gpu, exc)

    def _keep_redis(self) -> None:
        """Restart the embedded Redis when it died (kill -9, OOM killer): from its append-only file, at the same
        address; the API and workers reconnect on their own."""
        if self.redis is None or self.redis.alive() or self._stopping:
            return
        now = time.monotonic()
        if self._redis_restart_at is None:
            code = self.redis.proc.returncode if self.redis.proc else "?"
            delay, self._redis_deaths = restart_delay(self._redis_deaths, now - self._redis_started)
            delay = min(delay, 5)  # everything waits on Redis: never long
            self._redis_restart_at = now + delay if self._redis_deaths > 1 else now
            log.error("redis-server exited (%s); restarting it from %s", code, self.redis.data_dir)
        if now < self._redis_restart_at:
            return
        self._redis_restart_at = None
        try:
            self.redis.restart()
            self._redis_started = time.monotonic()
            log.warning("redis-server is back at %s (restart %d in a row)", self.redis_url, self._redis_deaths)
        except ConfigError as exc:
            log.error("redis-server did not come back: %s", exc)

    def request_stop(self, *_: object) -> None:
        self._stopping = True

    def stop(self) -> None:
        """Workers first (their trainers checkpoint), then the API, then Redis; all within 10 s. What a worker
        killed at the end leaves (its work-horse's sandbox, a trainer still checkpointing) comes up to this process,
        a subreaper from here on, and is ended before Redis stops: nothing of the stack outlives it."""
        t0 = time.monotonic()
        become_subreaper()
        for w in self.workers:
            w.signal(signal.SIGTERM)  # warm: the trainer gets SIGTERM, checkpoints, its job ends worker_lost
        if self.api:
            self.api.signal(signal.SIGTERM)
        self._wait(self.workers, t0 + WARM_STOP_S)
        for w in self.workers:
            w.signal(signal.SIGTERM)  # second signal: RQ's cold shutdown kills the work-horse
        self._wait([*self.workers, *([self.api] if self.api else [])], t0 + HARD_STOP_S)
        for c in [*self.workers, *([self.api] if self.api else [])]:
            c.signal(signal.SIGKILL)
            if c.proc:
                c.proc.wait()
        for gpu in self.mps_gpus:  # (their clients, the jobs, have ended)
            mps.stop(self.settings, gpu)
        redis = self.redis.proc.pid if self.redis and self.redis.proc else None
        end_descendants(keep=frozenset({redis, *descendants(redis)}) if redis else frozenset())
        if self.redis:
            self.redis.stop(timeout=max(0.5, 9.5 - (time.monotonic() - t0)))

    @staticmethod
    def _wait(children: list[Child], until: float) -> None:
        while time.monotonic() < until and any(c.alive() for c in children):
            time.sleep(0.05)


LOCK_NAME = "up.lock"
"""`gpudeck up` holds an exclusive lock on this file of its home, which names its pid, while it runs."""


def lock_home(home: Path) -> IO[str]:
    """One `gpudeck up` per home: the lock (held until this process exits, however it exits), or ConfigError naming
    the pid of the one that holds it."""
    lock = open(home / LOCK_NAME, "a+")  # noqa: SIM115 (held for the life of the process)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        pid = lock.read().strip() or "?"
        lock.close()
        raise ConfigError(
            f"another gpudeck up (pid {pid}) runs with this home ({home}): one stack per home. Stop it (kill {pid}), "
            "or give this one another --home"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def _check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        # As the server will (gunicorn sets it too): a port whose last connections linger in TIME-WAIT after a
        # restart is free to listen on, while one another process listens on is not.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port} ({exc.strerror}): is gpudeck already up? Pick another --port"
            ) from None


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def up(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    gpus: list[str] | None = None,
    cpu_workers: int | None = None,
) -> int:
    """Run the whole stack in the foreground until Ctrl-C or SIGTERM; returns an exit status."""
    stack = Stack(settings, host=host, port=port, gpus=gpus, cpu_workers=cpu_workers)
    signal.signal(signal.SIGINT, stack.request_stop)
    signal.signal(signal.SIGTERM, stack.request_stop)
    try:
        stack.start()
        print(stack.banner(), flush=True)
        code = stack.watch()
    finally:
        print("gpudeck: stopping ...", flush=True)
        stack.stop()
        print("gpudeck: stopped.", flush=True)
    return code
