"""Runs one job in a work-horse: a fresh training process, its output streamed to the job dir and Redis."""
from __future__ import annotations

import ctypes
import json
import logging
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from redis import Redis

from jobs.proc import python_module
from jobs.settings import Settings
from jobs.states import Reason, Status
from jobs.store import JobStore, log_key, metrics_key

log = logging.getLogger(__name__)

KILL_GRACE_S = 30.0
"""Seconds between SIGTERM to a trainer (it checkpoints) and SIGKILL, on timeout."""
LOG_TAIL_LINES = 20
"""Last log lines kept in the record of a failed job."""
PR_SET_PDEATHSIG = 1


@dataclass
class WorkerContext:
    """What the worker process hands its work-horses (set once before the work loop)."""

    settings: Settings
    name: str = ""
    gpu_ids: list[str] = field(default_factory=list)


CONTEXT: WorkerContext | None = None


def run_current(job_id: int) -> str:
    """Entry from the RQ task: run with the worker's context and RQ's connection."""
    from rq import get_current_job

    ctx = CONTEXT or WorkerContext(Settings.from_env())
    current = get_current_job()
    redis = current.connection if current is not None else ctx.settings.redis()
    return JobRun(job_id, redis, ctx).run()


def _die_with_parent() -> None:
    """In the trainer, before exec: SIGTERM when the work-horse dies, so no trainer outlives it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a trainer's whole process group; False when it is already gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


class JobRun:
    """One attempt of one job: start the trainer, pump its output and events, record the end."""

    def __init__(self, job_id: int, redis: Redis, ctx: WorkerContext):
        self.job_id = job_id
        self.redis = redis
        self.ctx = ctx
        self.store = JobStore(redis)
        self.job_dir = ctx.settings.job_dir(job_id)
        self.lines = 0
        self.points = 0
        self.tail: list[str] = []
        self.result: dict[str, Any] | None = None
        self.progress: dict[str, Any] = {}

    def run(self) -> str:
        rec = self.store.get(self.job_id)
        if Status(rec["status"]).ended:
            log.info("job %s is already %s; skipping", self.job_id, rec["status"])
            return rec["status"]
        spec = rec["spec"]
        self.job_dir.mkdir(parents=True, exist_ok=True)
        (self.job_dir / "spec.json").write_text(json.dumps(spec, indent=2) + "\n")

        self.lines = self.store.stream_length(log_key(self.job_id))
        self.points = self.store.stream_length(metrics_key(self.job_id))
        self.store.update(
            self.job_id,
            status=Status.STARTING.value,
            worker=self.ctx.name,
            gpu_ids=self.ctx.gpu_ids,
            started_at=time.time(),
        )
        events_r, events_w = os.pipe()
        env = dict(os.environ, PYTHONUNBUFFERED="1", GPUDECK_EVENTS_FD=str(events_w), GPUDECK_JOB_ID=str(self.job_id))
        with open(self.job_dir / "log.txt", "a", buffering=1) as log_file:
            proc = subprocess.Popen(
                python_module("models.train", "--spec", "spec.json", "--job-dir", "."),
                cwd=self.job_dir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                pass_fds=(events_w,),
                start_new_session=True,  # its own process group: cancel and timeout signal the whole tree
                preexec_fn=_die_with_parent,
            )
            os.close(events_w)
            self.store.update(self.job_id, pid=proc.pid)
            log.info("job %s: trainer pid %s in %s", self.job_id, proc.pid, self.job_dir)
            timed_out = self._pump(proc, os.fdopen(events_r, "rb"), log_file, spec.get("timeout"))
        return self._finish(proc.wait(), timed_out)

    def _pump(self, proc: subprocess.Popen[bytes], events: IO[bytes], log_file: IO[str], timeout: int | None) -> bool:
        """Stream the trainer's output and events until both pipes close; True if it timed out."""
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "log")
        sel.register(events, selectors.EVENT_READ, "events")
        buffers = {"log": b"", "events": b""}
        deadline = time.monotonic() + timeout if timeout else None
        timed_out = False
        killed_at: float | None = None
        while sel.get_map():
            wait = None if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            ready = sel.select(wait)
            pipe = self.redis.pipeline(transaction=False)
            for key, _ in ready:
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    rest = buffers[key.data]
                    if rest:
                        self._handle(key.data, [rest], log_file, pipe)
                    continue
                data = buffers[key.data] + chunk
                *complete, buffers[key.data] = data.split(b"\n")
                self._handle(key.data, complete, log_file, pipe)
            pipe.execute()
            if deadline is not None and time.monotonic() > deadline and not timed_out:
                timed_out = True
                log.warning("job %s: timeout of %ss passed; stopping its trainer", self.job_id, timeout)
                self._signal_group(proc, signal.SIGTERM)
                killed_at = time.monotonic()
            if killed_at is not None and time.monotonic() - killed_at > KILL_GRACE_S:
                self._signal_group(proc, signal.SIGKILL)
                killed_at = None
        events.close()
        return timed_out

    def _handle(self, kind: str, chunks: list[bytes], log_file: IO[str], pipe: Any) -> None:
        if kind == "log":
            lines = [c.decode("utf-8", "replace").rstrip("\r") for c in chunks]
            log_file.write("".join(line + "\n" for line in lines))
            self.store.append_lines(self.job_id, self.lines + 1, lines, pipe)
            self.lines += len(lines)
            self.tail = (self.tail + lines)[-LOG_TAIL_LINES:]
            return
        for chunk in chunks:
            try:
                event = json.loads(chunk)
            except ValueError:
                log.warning("job %s: unreadable event %r", self.job_id, chunk[:200])
                continue
            self._on_event(event.pop("event", None), event, pipe)

    def _on_event(self, kind: str | None, data: dict[str, Any], pipe: Any) -> None:
        fields: dict[str, Any] = {}
        if kind == "running":
            self.progress = {
                "step": data["step"],
                "total_steps": data["total_steps"],
                "steps_per_epoch": data["steps_per_epoch"],
                "epochs": data["epochs"],
                "first_step": data["step"],
            }
            fields = {"status": Status.RUNNING.value, "running_at": time.time(), "progress": self.progress}
        elif kind == "metric":
            self.points += 1
            self.store.append_point(self.job_id, self.points, data, pipe)
            self.progress["step"] = data["step"]
            fields = {"progress": self.progress}
            if "loss" in data:
                fields["metrics"] = data
        elif kind == "result":
            self.result = data
            fields = {"result": data}
        if fields:
            self.store.update(self.job_id, pipe=pipe, **fields)

    def _signal_group(self, proc: subprocess.Popen[bytes], sig: int) -> None:
        signal_group(proc.pid, sig)

    def _finish(self, returncode: int, timed_out: bool) -> str:
        ended = {"ended_at": time.time(), "log_tail": self.tail}
        stop = self.store.stop_reason(self.job_id)
        if returncode == 0 and self.result is not None:
            self.store.update(self.job_id, status=Status.SUCCEEDED.value, **ended)
            return Status.SUCCEEDED.value
        if stop == Reason.CANCELED.value:
            self.store.update(self.job_id, status=Status.CANCELED.value, reason=stop, **ended)
            return Status.CANCELED.value
        if stop == Reason.WORKER_LOST.value:
            reason, message = Reason.WORKER_LOST, "its worker shut down while it ran"
        elif timed_out:
            reason, message = Reason.TIMEOUT, "the job ran past its timeout"
        elif returncode == 2:
            reason, message = Reason.BAD_INPUT, "the trainer refused the spec or its data"
        elif returncode < 0:
            reason, message = Reason.EXIT_NONZERO, f"the trainer was killed by {signal.Signals(-returncode).name}"
        else:
            reason, message = Reason.EXIT_NONZERO, f"the trainer exited with status {returncode}"
        log.warning("job %s failed: %s (%s)", self.job_id, reason.value, message)
        self.store.update(self.job_id, status=Status.FAILED.value, reason=reason.value, message=message, **ended)
        return Status.FAILED.value
