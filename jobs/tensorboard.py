"""TensorBoard processes over chosen job dirs: started or reused on 127.0.0.1 by the API, one per set of jobs,
stopped when idle (no connection and no request for GPUDECK_TENSORBOARD_IDLE seconds), at most
GPUDECK_TENSORBOARD_MAX at once per host (the least recently used one makes room)."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis import Redis

from jobs.errors import BadRequest, Unavailable, ValidationError
from jobs.keys import tensorboard_key, tensorboard_lock_key
from jobs.periodic import Periodic
from jobs.record import Job
from jobs.redis_server import free_port
from jobs.run.proc import pdeathsig, running, stop_pid
from jobs.settings import Settings
from jobs.store import JobStore, iso
from models.specfields import whole

log = logging.getLogger(__name__)

MAX_JOBS = 100
"""Most jobs one TensorBoard shows."""
START_TIMEOUT_S = 90
"""How long a new TensorBoard may take to listen (it imports TensorFlow when installed)."""


def _job_ids(body: Any) -> list[int]:
    if not isinstance(body, dict):
        raise ValidationError({"body": f"must be a JSON object, got {type(body).__name__}"})
    unknown = [k for k in body if k != "jobs"]
    if unknown:
        raise ValidationError({unknown[0]: "unknown field; accepted: jobs"})
    ids = body.get("jobs")
    if isinstance(ids, list):
        ids = [whole(i) for i in ids]  # 14.0 is the job 14
    if (
        not isinstance(ids, list)
        or not 0 < len(ids) <= MAX_JOBS
        or not all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids)
    ):
        raise ValidationError({"jobs": f"must be a list of 1 to {MAX_JOBS} job ids, got {ids!r}"})
    return sorted(set(ids))


def run_name(rec: Job) -> str:
    """A job's run name in TensorBoard: `<id>-<name>`, with characters TensorBoard's spec splits on replaced."""
    return f"{rec['id']}-{re.sub(r'[^A-Za-z0-9._-]+', '_', str(rec['spec'].get('name') or ''))}"


def _alive(pid: int) -> bool:
    return running(pid, b"jobs.tbnotf")  # (its command line says what it runs: a recycled pid is not ours)


def _connections(port: int) -> int:
    """Established TCP connections to 127.0.0.1:`port` (a browser, or an ssh tunnel, looking at it)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                n += 1
    return n


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _stop_pid(pid: int, grace: float = 5.0) -> None:
    stop_pid(pid, grace, _alive)


class TensorBoards:
    """This host's TensorBoards, shared by every API process through Redis."""

    def __init__(self, redis: Redis, settings: Settings, host: str | None = None):
        self.redis, self.settings = redis, settings
        self.host = host or socket.gethostname()
        self.key = tensorboard_key(self.host)

    def records(self) -> dict[str, dict[str, Any]]:
        return {k.decode(): json.loads(v) for k, v in self.redis.hgetall(self.key).items()}

    def view(self, rec: dict[str, Any], reused: bool | None = None) -> dict[str, Any]:
        port = rec["port"]
        out = {
            "url": f"http://127.0.0.1:{port}/",
            "port": port,
            "host": self.host,
            "jobs": rec["jobs"],
            "runs": rec["runs"],
            "ssh_tunnel": f"ssh -N -L {port}:127.0.0.1:{port} {self.host}",
            "started_at": iso(rec["started_at"]),
            "last_used_at": iso(rec["last_used"]),
            "owner": rec.get("owner"),
        }
        if reused is not None:
            out["reused"] = reused
        return out

    def ensure(self, body: Any, owner: str | None = None) -> dict[str, Any]:
        """Start (for `owner`) or reuse the TensorBoard over exactly these jobs; answers its URL and port."""
        ids = _job_ids(body)
        store = JobStore(self.redis)
        recs = [store.get(i) for i in ids]  # NotFound names the first unknown job
        key = ",".join(map(str, ids))
        with self.redis.lock(
            tensorboard_lock_key(self.host), timeout=START_TIMEOUT_S + 30, blocking_timeout=START_TIMEOUT_S + 30
        ):
            found = self.records().get(key)
            if found and _alive(found["pid"]):
                found["last_used"] = time.time()
                self.redis.hset(self.key, key, json.dumps(found))
                return self.view(found, reused=True)
            self._make_room(exclude=key)
            rec = {**self._start(recs), "owner": owner}
            self.redis.hset(self.key, key, json.dumps(rec))
            return self.view(rec, reused=False)

    def _make_room(self, exclude: str) -> None:
        live = {k: r for k, r in self.records().items() if k != exclude}
        for k, r in list(live.items()):
            if not _alive(r["pid"]):
                self.redis.hdel(self.key, k)
                del live[k]
        while len(live) >= self.settings.tensorboard_max:
            oldest = min(live, key=lambda k: live[k]["last_used"])
            log.info("tensorboard on port %s stopped to make room (GPUDECK_TENSORBOARD_MAX)", live[oldest]["port"])
            self.stop(oldest)
            del live[oldest]

    def _start(self, recs: list[Job]) -> dict[str, Any]:
        # Each job's whole dir: every run folder with event files in it is a run, `<id>-<name>/<its path>` (a zoo
        # job's tensorboard/train, a script's ./logs/fit/20261124-120000 under src), wherever the script wrote it.
        runs = {run_name(r): str(self.settings.job_dir(r["id"])) for r in recs}
        if any("," in path for path in runs.values()):
            raise BadRequest(f"GPUDECK_HOME ({self.settings.home}) must not contain a comma for TensorBoard")
        logs = self.settings.home / "tensorboard"
        logs.mkdir(parents=True, exist_ok=True)
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "jobs.tbnotf",  # tensorboard, on its TensorFlow stub: up in ~1 s, not ~7
            "--logdir_spec",
            ",".join(f"{name}:{path}" for name, path in runs.items()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--reload_interval",
            "5",
        ]
        with open(logs / f"{port}.log", "ab") as out:
            # pdeathsig: it stops with the API process that started it (gthread threads live as long).
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=pdeathsig,  # stops with the API process (gthread threads live as long)
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop_pid(proc.pid)
                tail = (logs / f"{port}.log").read_text(errors="replace")[-1500:]
                raise Unavailable(f"TensorBoard did not start on port {port}: {tail.strip()[-500:]}")
            time.sleep(0.2)
        now = time.time()
        log.info("tensorboard pid %s on port %s over jobs %s", proc.pid, port, [r["id"] for r in recs])
        threading.Thread(target=proc.wait, daemon=True).start()  # reap it when it exits: no zombie
        return {
            "port": port,
            "pid": proc.pid,
            "jobs": [r["id"] for r in recs],
            "runs": list(runs),
            "started_at": now,
            "last_used": now,
        }

    def stop(self, key: str) -> None:
        raw = self.redis.hget(self.key, key)
        if raw:
            pid = json.loads(raw)["pid"]
            if _alive(pid):
                _stop_pid(pid)
        self.redis.hdel(self.key, key)

    def stop_port(self, port: int, may: Callable[[str | None], None] | None = None) -> bool:
        """Stop the TensorBoard on `port` (if `may` its owner's allow it); False when there is none."""
        for key, rec in self.records().items():
            if rec["port"] == port:
                if may is not None:
                    may(rec.get("owner"))
                self.stop(key)
                return True
        return False

    def sweep(self, now: float | None = None) -> None:
        """Forget dead ones; stop those with no connection and no request for tensorboard_idle_s."""
        now = time.time() if now is None else now
        for key, rec in self.records().items():
            if not _alive(rec["pid"]):
                self.redis.hdel(self.key, key)
            elif _connections(rec["port"]):
                rec["last_used"] = now
                self.redis.hset(self.key, key, json.dumps(rec))
            elif now - rec["last_used"] > self.settings.tensorboard_idle_s:
                log.info("tensorboard on port %s idle for %.0f s: stopping", rec["port"], now - rec["last_used"])
                self.stop(key)


class Sweeper(Periodic):
    """Runs TensorBoards.sweep() in the API process, every few seconds."""

    what, first_wait = "tensorboard sweeper", True

    def __init__(self, redis_url: str, settings: Settings):
        super().__init__(redis_url, "gpudeck-tensorboard-sweeper")
        self.boards = TensorBoards(self.redis, settings)
        self.every_s = max(1.0, min(10.0, settings.tensorboard_idle_s / 3))

    def round(self) -> None:
        self.boards.sweep()
