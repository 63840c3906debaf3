"""Runs one job in a work-horse: a fresh training process, its output streamed to the job dir and Redis."""

from __future__ import annotations

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

from jobs import datasets
from jobs.proc import pdeathsig, python_module
from jobs.settings import Settings
from jobs.states import Reason, Status
from jobs.store import JobStore, log_key, metrics_key
from models.catalog import parse_dataset

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 20
"""Last log lines kept in the record of a failed job."""
HEARTBEAT_EVERY_S = 3.0
"""How often the work-horse refreshes its job's heartbeat (the key lives HEARTBEAT_TTL_S)."""
STOP_POLL_S = 1.0
"""How often the work-horse looks for a cancel request (the API may be on another host)."""
COALESCE_S = 0.25
"""After a read, the work-horse waits this long before the next, so log lines and metric points reach
Redis in a few batches a second: each wake-up of ours would otherwise preempt a training thread."""
HORSE_NICENESS = 5
"""The work-horse lowers its CPU priority by this much once its trainer runs (the trainer keeps its own)."""
OOM_MARKERS = ("MemoryError", "ResourceExhaustedError", "OOM when allocating", "out of memory")
"""Log text by which a training process that ran out of memory is recognised."""


@dataclass
class WorkerContext:
    """What the worker process hands its work-horses (set once before the work loop)."""

    settings: Settings
    name: str = ""
    gpu_ids: list[str] = field(default_factory=list)
    stop_grace_s: float = 30.0
    max_memory: int | None = None


CONTEXT: WorkerContext | None = None


def run_current(job_id: int) -> str:
    """Entry from the RQ task: run with the worker's context and RQ's connection."""
    from rq import get_current_job

    ctx = CONTEXT or WorkerContext(Settings.from_env())
    current = get_current_job()
    redis = current.connection if current is not None else ctx.settings.redis()
    return JobRun(job_id, redis, ctx).run()


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a trainer's whole process group; False when it is already gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def oom_kills() -> int | None:
    """The kernel's count of OOM kills in this cgroup (cgroup v2), if it can be read."""
    try:
        for line in Path("/sys/fs/cgroup/memory.events").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _trainer_preexec(max_memory: int | None):
    def preexec() -> None:
        pdeathsig()  # SIGTERM when the work-horse dies, so no trainer outlives it (it checkpoints and exits)
        if max_memory:
            import resource

            resource.setrlimit(resource.RLIMIT_DATA, (max_memory, max_memory))

    return preexec


def _drain(fd: int) -> tuple[bytes, bool]:
    """Everything a non-blocking pipe holds now, and whether its writer has closed it."""
    parts = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return b"".join(parts), False
        if not chunk:
            return b"".join(parts), True
        parts.append(chunk)


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
        self.store.beat(self.job_id, self.ctx.name)
        started = self.store.transition(
            self.job_id,
            (Status.QUEUED.value,),
            status=Status.STARTING.value,
            worker=self.ctx.name,
            gpu_ids=self.ctx.gpu_ids,
            started_at=time.time(),
            reason=None,
            message=None,
            pid=None,
        )
        rec = self.store.get(self.job_id)
        if not started:
            log.info("job %s is %s, not queued; skipping", self.job_id, rec["status"])
            return rec["status"]
        spec = rec["spec"]
        self.job_dir.mkdir(parents=True, exist_ok=True)
        (self.job_dir / "spec.json").write_text(json.dumps(self._trainer_spec(spec), indent=2) + "\n")
        self.lines = self.store.stream_length(log_key(self.job_id))
        self.points = self.store.stream_length(metrics_key(self.job_id))
        if self.store.stop_reason(self.job_id):  # canceled between dequeue and now
            return self._finish(None, oom_before=None)
        events_r, events_w = os.pipe()
        env = dict(os.environ, PYTHONUNBUFFERED="1", GPUDECK_EVENTS_FD=str(events_w), GPUDECK_JOB_ID=str(self.job_id))
        oom_before = oom_kills()
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
                preexec_fn=_trainer_preexec(self.ctx.max_memory),
            )
            os.close(events_w)
            self.store.update(self.job_id, pid=proc.pid, spawned_at=time.time())
            try:
                os.nice(HORSE_NICENESS)
            except OSError:
                pass
            log.info("job %s: trainer pid %s in %s", self.job_id, proc.pid, self.job_dir)
            self._pump(proc, os.fdopen(events_r, "rb"), log_file, spec.get("timeout"))
        return self._finish(proc.wait(), oom_before)

    def _trainer_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The spec the trainer reads: an uploaded dataset's folder on this host is filled in."""
        ref = parse_dataset(spec["dataset"])
        if ref.kind != "stored":
            return spec
        return dict(spec, dataset_path=str(datasets.local_path(self.redis, self.ctx.settings, spec["dataset"])))

    def _pump(self, proc: subprocess.Popen[bytes], events: IO[bytes], log_file: IO[str], timeout: int | None) -> None:
        """Stream the trainer's output and events until both pipes close; beat, and act on stop requests."""
        assert proc.stdout is not None
        for f in (proc.stdout, events):
            os.set_blocking(f.fileno(), False)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "log")
        sel.register(events, selectors.EVENT_READ, "events")
        buffers = {"log": b"", "events": b""}
        deadline = time.monotonic() + timeout if timeout else None
        last_beat = last_poll = time.monotonic()
        termed_at: float | None = None
        while sel.get_map():
            ready = sel.select(STOP_POLL_S)
            if ready:
                time.sleep(COALESCE_S)  # let more output gather; the pipes hold 64 KiB each meanwhile
            pipe = self.redis.pipeline(transaction=False)
            for key, _ in ready:
                chunk, eof = _drain(key.fd)
                if chunk:
                    *complete, buffers[key.data] = (buffers[key.data] + chunk).split(b"\n")
                    self._handle(key.data, complete, log_file, pipe)
                if eof:
                    sel.unregister(key.fileobj)
                    rest, buffers[key.data] = buffers[key.data], b""
                    if rest:
                        self._handle(key.data, [rest], log_file, pipe)
            pipe.execute()
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_EVERY_S:
                self.store.beat(self.job_id, self.ctx.name)
                last_beat = now
            if termed_at is None and now - last_poll >= STOP_POLL_S:
                last_poll = now
                if deadline is not None and now > deadline:
                    log.warning("job %s: timeout of %ss passed; stopping its trainer", self.job_id, timeout)
                    self.store.request_stop(self.job_id, Reason.TIMEOUT.value)
                reason = self.store.stop_reason(self.job_id)
                if reason:
                    log.info("job %s: stop requested (%s): SIGTERM to its process group", self.job_id, reason)
                    signal_group(proc.pid, signal.SIGTERM)
                    termed_at = now
            if termed_at is not None and now - termed_at > self.ctx.stop_grace_s:
                log.warning("job %s: still running %.0fs after SIGTERM: SIGKILL", self.job_id, self.ctx.stop_grace_s)
                signal_group(proc.pid, signal.SIGKILL)
                termed_at = float("inf")
        events.close()
        if termed_at is not None:
            signal_group(proc.pid, signal.SIGKILL)  # anything the trainer left in its group goes with it

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

    def _finish(self, returncode: int | None, oom_before: int | None) -> str:
        """Record the honest final state: succeeded, canceled, or failed with a typed reason."""
        stop = self.store.stop_reason(self.job_id)
        ended = {"ended_at": time.time(), "log_tail": self.tail}
        if returncode == 0 and self.result is not None:
            status, reason, message = Status.SUCCEEDED, None, None
        elif stop == Reason.CANCELED.value:
            status, reason, message = Status.CANCELED, Reason.CANCELED, "canceled on request"
        elif stop == Reason.WORKER_LOST.value:
            status, reason, message = Status.FAILED, Reason.WORKER_LOST, "its worker shut down while it ran"
        elif stop == Reason.TIMEOUT.value:
            status, reason, message = Status.FAILED, Reason.TIMEOUT, "the job ran past its timeout"
        elif returncode == 2:
            status, reason, message = Status.FAILED, Reason.BAD_INPUT, "the trainer refused the spec or its data"
        elif self._out_of_memory(returncode, oom_before):
            status, reason, message = Status.FAILED, Reason.OOM, "the training process ran out of memory"
        elif returncode is not None and returncode < 0:
            status, reason = Status.FAILED, Reason.EXIT_NONZERO
            message = f"the trainer was killed by {signal.Signals(-returncode).name}"
        else:
            status, reason, message = Status.FAILED, Reason.EXIT_NONZERO, f"the trainer exited with status {returncode}"
        if reason == Reason.WORKER_LOST:
            from jobs.reaper import worker_lost

            # Infrastructure, not the job: retried while max_retries lasts, from the checkpoint just saved.
            rec = self.store.get(self.job_id)
            return worker_lost(self.redis, self.job_id, rec, message, log_tail=self.tail) or status.value
        if status != Status.SUCCEEDED:
            log.warning("job %s %s: %s (%s)", self.job_id, status.value, reason.value if reason else "", message)
        self.store.transition(
            self.job_id,
            (Status.STARTING.value, Status.RUNNING.value),
            status=status.value,
            reason=reason.value if reason else None,
            message=message,
            **ended,
        )
        return status.value

    def _out_of_memory(self, returncode: int | None, oom_before: int | None) -> bool:
        if returncode == -signal.SIGKILL and oom_before is not None and (oom_kills() or 0) > oom_before:
            return True  # the kernel's OOM killer took it
        return returncode not in (0, None) and any(m in line for line in self.tail for m in OOM_MARKERS)
