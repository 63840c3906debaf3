"""An interactive session in a work-horse: a job of kind `session` (jobs.spec) whose process is a shell on a
pseudo-terminal (jobs.run.terminal serves it to `gpudeck session attach`) or a Jupyter server on 127.0.0.1 with a
token, in the sandbox, environment and source copy of a command job, on the GPUs the scheduler gave it.

Its end: the shell exits (succeeded); nobody attached and its GPUs under 5 % for `idle` seconds (succeeded,
reason idle); `max` seconds passed (reason timeout: the spec's timeout); a cancel. Ten minutes before an idle
release or the max, the terminal says so and the record's `session.warning` does. A stop hangs the terminal up
(the shell gets SIGHUP), and the sandbox's end takes every process the session started."""

from __future__ import annotations

import json
import logging
import os
import secrets
import site
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from jobs import gpus, jobfiles, outcome, usage
from jobs.record import Kept
from jobs.redis_server import free_port
from jobs.run import launch, terminal
from jobs.run.hooks import Hooks, Run
from jobs.run.launch import Refused, WorkerContext
from jobs.run.proc import descendants, listening_pids
from models.common import duration
from models.states import Reason

log = logging.getLogger(__name__)

BUSY_UTILIZATION = 5
"""A session's GPU at or above this utilization (%) keeps it from being idle."""
WARN_BEFORE_S = 600
"""How long before an idle release or the max the session warns."""
LOOK_EVERY_S = 2.0
"""How often the work-horse reads its GPUs' utilization and the notebook's activity."""
JUPYTER_APPS = (("jupyterlab", "lab"), ("jupyter_server", ""))
"""What a notebook session runs (`python -m MODULE`, with the session environment's own python: its kernel is that
environment's), the first its environment sees, and the page its URL opens."""
NO_JUPYTER = (
    "this session's environment has no {what} ({where}): add jupyterlab and ipykernel to the project's "
    "requirements, or pip install jupyterlab ipykernel in that environment"
)
OWN_READ_S = 1.0
"""Jupyter's last activity up to this long after the work-horse read /api/kernels is that reading's."""
BUSY_CPU_PERCENT = 50.0
"""A session whose processes use this much CPU (of one core) is in use, whatever its GPUs do."""


def visible_sites(bin_dir: Path) -> list[Path]:
    """The site-packages folders an environment's python imports from: its own, what its `.pth` files add (a project
    environment that is not isolated sees the worker's packages that way), the worker's own for the worker's."""
    if bin_dir == Path(sys.executable).parent:
        return [Path(p) for p in site.getsitepackages()]
    own = sorted(bin_dir.parent.glob("lib/python3*/site-packages"))
    added = []
    for sp in own:
        for pth in sp.glob("*.pth"):
            try:
                lines = jobfiles.read_text(sp, pth.name, 1 << 20).splitlines()  # (no link a build left)
            except OSError:
                continue
            added += [Path(line.strip()) for line in lines if line.strip().startswith("/")]
    return [*own, *(p for p in added if p.is_dir())]


def sees(sites: list[Path], module: str) -> bool:
    """Whether a package `module` is in one of `sites` (a file check: nothing of the environment runs)."""
    return any((sp / module / "__init__.py").is_file() for sp in sites)


def host_name(ctx: WorkerContext) -> str:
    """The name a user's ssh reaches this worker's host by (GPUDECK_ADVERTISE_HOST, else its host name)."""
    return ctx.settings.advertise_host or socket.gethostname()


class SessionHooks(Hooks):
    """A session's attempt: a command job's launch with a shell (or Jupyter) as its command, started on a terminal,
    and the idle and max rules read where a job's stops are (`stop_reason`, every second). One object an attempt:
    it keeps the session's state, and the attempt it serves (`run`)."""

    run: Run

    def __init__(self) -> None:
        self.relay: terminal.Relay | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.jupyter: tuple[int, str, str] | None = None  # (port, token, the path its page is at)
        self.spawned = 0.0
        self.busy_at = 0.0  # when its GPUs were last busy or somebody was attached (monotonic)
        self.looked = 0.0
        self.used = False  # what the last look (every LOOK_EVERY_S) found: a busy GPU, a notebook client
        self.warned: set[str] = set()
        self.info: dict[str, Any] = {}
        self.kernels_read_at: float | None = None  # (when this work-horse last read /api/kernels: not a user's use)

    def begin(self, run: Run) -> None:
        self.run = run

    # -- what it runs --------------------------------------------------------------------------------------
    def plan_launch(
        self, run: Run, spec: Kept, extra_env: dict[str, str], events_w: int, built: Path | None = None
    ) -> launch.Launch:
        bin_dir = self._bin_dir(spec, built)
        env = {**extra_env, "TERM": os.environ.get("TERM") or "xterm-256color"}
        secret_env = dict(spec.secret_env)
        if spec.jupyter:
            sites = visible_sites(bin_dir)
            app = next(((m, page) for m, page in JUPYTER_APPS if sees(sites, m)), None)
            if app is None or not sees(sites, "ipykernel"):
                what = "Jupyter" if app is None else "Jupyter kernel (ipykernel)"
                raise Refused(NO_JUPYTER.format(what=what, where=bin_dir.parent))
            port, token = free_port(), secrets.token_urlsafe(24)
            self.jupyter = (port, token, app[1])
            secret_env["JUPYTER_TOKEN"] = token  # (in no argv, no record: only the owner reads it, from the API)
            idle = str(spec.idle)
            argv = [
                str(bin_dir / "python"),
                "-m",
                app[0],
                "--ip=127.0.0.1",
                f"--port={port}",
                "--port-retries=0",
                "--ServerApp.open_browser=False",
                "--allow-root",  # (a worker run as root, in a container: the sandbox is what confines it)
                f"--MappingKernelManager.cull_idle_timeout={idle}",  # (Jupyter's own culling of idle kernels)
                "--MappingKernelManager.cull_interval=30",
            ]
        else:
            shell = next((s for s in ("/bin/bash", "/usr/bin/bash") if os.path.exists(s)), "/bin/sh")
            argv = [shell, "-i"]
            env["PS1"] = f"[gpudeck {run.job_id}] \\w\\$ " if shell.endswith("bash") else f"[gpudeck {run.job_id}] $ "
        return super().plan_launch(run, spec.with_(command=argv, secret_env=secret_env), env, events_w, built)

    def _bin_dir(self, spec: Kept, built: Path | None) -> Path:
        if built is not None:
            return built / "bin"
        if spec.env_name:
            found = self.run.ctx.settings.env_python(spec.env_name)
            if found is not None:
                return found
        return Path(sys.executable).parent

    def start(self, run: Run, how: launch.Launch, fds: tuple[int, ...]) -> subprocess.Popen[bytes]:
        if self.jupyter is not None:
            self.proc = run.spawn(how, fds)  # (its URL is published once it answers: stop_reason)
            self.spawned = self.busy_at = time.monotonic()
            return self.proc
        master, slave = terminal.open_pty()
        log_r, log_w = os.pipe()
        self.relay = terminal.Relay(master, log_w)
        base = launch.preexec(run.ctx.max_memory, how.sandboxed)

        def preexec() -> None:
            base()
            terminal.controlling_terminal()

        self.proc = subprocess.Popen(
            how.argv,
            cwd=how.cwd,
            env=how.env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            pass_fds=how.fds() + fds,
            start_new_session=True,
            preexec_fn=preexec,
        )
        os.close(slave)
        # the pump reads the relay's lines as the job's output: it ends when the terminal is gone
        self.proc.stdout = os.fdopen(log_r, "rb")
        self.relay.start()
        self._publish(kind="shell", port=self.relay.port, secret=self.relay.secret)
        return self.proc

    def _publish(self, **fields: Any) -> None:
        if not self.spawned:
            self.spawned = self.busy_at = time.monotonic()
        host = host_name(self.run.ctx)
        kept: dict[str, Any] = {k: self.info[k] for k in ("warning", "warned") if k in self.info}
        self.info = {"host": host, **fields, **kept}
        self.run.store.update(self.run.job_id, session=self.info)
        if self.relay is not None:
            self.relay.note(f"gpudeck: session started on {host}: gpudeck session attach {self.run.job_id}")

    # -- its end -------------------------------------------------------------------------------------------
    def grace(self, run: Run, reason: str | None) -> float:
        return min(run.ctx.stop_grace_s, 5.0)  # (a shell or a notebook server has nothing to checkpoint)

    def facts(self, run: Run, returncode: int | None, oom_before: int | None) -> outcome.Facts:
        return replace(super().facts(run, returncode, oom_before), session="notebook" if self.jupyter else "shell")

    def stop_reason(self, run: Run) -> str | None:
        reason = super().stop_reason(run)
        live = self.proc is not None and self.proc.poll() is None
        if reason or not live:
            if reason and self.relay is not None and "stop" not in self.warned:
                self.warned.add("stop")
                self.relay.say(f"session {run.job_id} ends now ({reason})")
                self.relay.hangup()
            return reason
        if self.jupyter is not None and "url" not in self.info:  # (a warning may have come first)
            port, token, page = self.jupyter
            if self._status() is not None:
                self._publish(kind="notebook", port=port, url=f"http://127.0.0.1:{port}/{page}?token={token}")
        now = time.monotonic()
        if now - self.looked >= LOOK_EVERY_S:
            self.looked = now
            self.used = self._in_use()
            log.debug("job %s: session in use: %s", run.job_id, self.used)
        if self.used or (self.relay is not None and self.relay.attached):
            self.busy_at = now
        idle_s = run.spec.idle
        idle_left = idle_s - (now - self.busy_at)
        max_left = run.spec.timeout - (now - self.spawned) if run.spec.timeout else None
        if idle_left <= 0:
            log.info("job %s: session idle for %ss: releasing it", run.job_id, idle_s)
            run.request_stop(Reason.IDLE.value)
            return self.stop_reason(run)
        if self.busy_at == now:
            if "idle" in self.warned:  # somebody came back: the warning no longer holds
                self._unwarn("idle")
        elif idle_left <= min(WARN_BEFORE_S, idle_s * 2 / 3) and "idle" not in self.warned:  # (not at once)
            self._warn(
                "idle", f"idle: released in {duration(max(0.0, idle_left))} unless someone attaches or its GPUs work"
            )
        if max_left is not None and max_left <= WARN_BEFORE_S and "max" not in self.warned:
            self._warn("max", f"ends in {duration(max(0.0, max_left))}, at its max time")
        return None

    def _warn(self, what: str, text: str) -> None:
        self.warned.add(what)
        if self.relay is not None:
            self.relay.say(f"session {self.run.job_id} {text}")
        self.info = {**self.info, "warning": f"{text} (said at {datetime.now().astimezone():%H:%M:%S})"}
        self.info["warned"] = what
        self.run.store.update(self.run.job_id, session=self.info)

    def _unwarn(self, what: str) -> None:
        """`what`'s warning no longer holds: off the record (unless a later one of another kind replaced it)."""
        self.warned.discard(what)
        if self.info.get("warned") == what:
            self.info = {k: v for k, v in self.info.items() if k not in ("warning", "warned")}
            self.run.store.update(self.run.job_id, session=self.info)

    def _in_use(self) -> bool:
        """Somebody uses the session: a notebook client is connected or was active within the idle time, one of its
        kernels is busy (a cell running, nobody watching), its processes work the CPU (BUSY_CPU_PERCENT), or one of
        its GPUs is at BUSY_UTILIZATION or more."""
        if self.jupyter is not None and self._notebook_active():
            return True
        return self._cpu_busy() or self._gpus_busy()

    def _cpu_busy(self) -> bool:
        used = usage.read(self.run.redis, [self.run.job_id]).get(self.run.job_id) or {}
        return float(used.get("cpu_percent") or 0) >= BUSY_CPU_PERCENT

    def _gpus_busy(self) -> bool:
        used = gpus.utilization(self.run.redis, socket.gethostname())  # (the host's sampler: jobs.gpus.Sampler)
        return any(
            isinstance(used.get(str(g)), (int, float)) and used[str(g)] >= BUSY_UTILIZATION
            for g in self.run.ctx.gpu_ids
        )

    def _jupyter_get(self, path: str) -> Any:
        """GET `path` of the session's own notebook server with its token (None: it does not answer yet, or not
        now, or what listens on its port is not the session's: the token goes to nobody else)."""
        assert self.jupyter is not None
        port, token, _ = self.jupyter
        if not self._ours(port):
            return None
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"token {token}"})
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:  # noqa: S310 (our own server, on loopback)
                return json.loads(answer.read())
        except (OSError, ValueError):
            return None

    def _status(self) -> dict[str, Any] | None:
        """The notebook server's /api/status (None: it does not answer yet, or not now)."""
        status = self._jupyter_get("/api/status")
        return status if isinstance(status, dict) else None

    def _ours(self, port: int) -> bool:
        """Whether what listens on `port` is this session's own process (the port was free when it was chosen, but
        any job on the host could bind it before the notebook server does)."""
        listeners = listening_pids(port)
        return bool(listeners) and self.proc is not None and listeners <= descendants(self.proc.pid)

    def _notebook_active(self) -> bool:
        """Jupyter's own account of use (/api/status, which does not count as activity itself): a kernel
        connection now, a kernel running a cell, or activity since the last look that was not this look's own
        reading of the kernels (/api/kernels counts as activity to Jupyter)."""
        status = self._status()
        if status is None:
            return True  # (starting, or too busy to answer: not idle)
        if status.get("connections") or self._kernel_busy():
            return True
        try:
            last = datetime.fromisoformat(str(status["last_activity"]).replace("Z", "+00:00")).timestamp()
        except (KeyError, ValueError):
            return False
        ours = self.kernels_read_at is not None and last <= self.kernels_read_at + OWN_READ_S
        return time.time() - last < LOOK_EVERY_S * 2 and not ours

    def _kernel_busy(self) -> bool:
        """Whether one of the notebook's kernels runs a cell now (`execution_state`, /api/kernels)."""
        try:
            kernels = self._jupyter_get("/api/kernels")
        finally:
            self.kernels_read_at = time.time()
        return isinstance(kernels, list) and any(
            isinstance(k, dict) and k.get("execution_state") == "busy" for k in kernels
        )
