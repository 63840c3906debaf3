"""Runs one job in a work-horse: a fresh training process, its output streamed to the job dir and Redis."""

from __future__ import annotations

import errno
import json
import logging
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from redis import Redis
from rq import get_current_job

from jobs import datasets, gang, lifecycle, outcome, sources
from jobs.archives import tree_bytes
from jobs.keys import metrics_key, rq_job_id, rq_task_id, task_beat_key, task_key
from jobs.proc import kill_marked, pdeathsig, python_module
from jobs.redis_server import free_port
from jobs.scalars import EVENT_FILE_MARK, ScalarReader, read_result
from jobs.settings import Settings
from jobs.spec import is_command, masked
from jobs.store import HEARTBEAT_TTL_S, OUTAGE, JobStore, through_outage
from models import protocol, sourcetree, tfconfig
from models.catalog import parse_dataset
from models.states import ACTIVE, Reason, Status

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
DISK_EVERY_S = 30.0
"""How often the work-horse measures its job dir while the job runs (the record's `disk_bytes`)."""
SCAN_EVERY_S = 1.0
"""How often the work-horse reads a command job's new TensorBoard scalars and metrics.jsonl lines."""
EXIT_LINGER_S = 2.0
"""After the trainer or command exits, how long processes it left holding its output may live before they are
killed (a background child would otherwise keep the job from ending)."""
RUN_ID_ENV = "GPUDECK_RUN_ID"
"""Set in every trainer's and command's environment (the RQ id of the attempt or task): processes that carry it
are swept when the attempt ends, even those that left its process group."""
HIDDEN_ENV = ("GPUDECK_TOKENS", "GPUDECK_TOKEN", "REDIS_URL")
"""The worker's own secrets and its Redis, not handed to a command job."""


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
"""A write's errno when the disk (or the user's quota) is full."""


class LogFile:
    """An attempt's log.txt. A full disk stops neither the job nor its log in Redis: a write that finds no space
    is dropped (noted once, in `full`), and a job that then fails ends as disk_full."""

    def __init__(self, path: Path):
        self.file = open(path, "ab", buffering=0)
        self.full = False

    def write(self, text: str) -> None:
        try:
            self.file.write(text.encode())
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            if not self.full:
                log.warning("%s: %s; its lines go on to Redis only", self.file.name, exc.strerror)
            self.full = True

    def __enter__(self) -> LogFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # no space taken; the trainer only ever replaces files, never writes into them
    except OSError:
        shutil.copy2(src, dst)


def _unfinished(folder: str, names: list[str]) -> list[str]:
    """What copytree leaves out of a checkpoints folder: saves cut short (`ckpt-300_temp…`)."""
    return [n for n in names if "_temp" in n]


class Refused(Exception):
    """A command job cannot start on this worker (its environment or its source is not here)."""


@dataclass
class WorkerContext:
    """What the worker process hands its work-horses (set once before the work loop)."""

    settings: Settings
    name: str = ""
    gpu_ids: list[str] = field(default_factory=list)
    stop_grace_s: float = protocol.DEFAULT_GRACE_S
    max_memory: int | None = None


CONTEXT: WorkerContext | None = None


def run_current(job_id: int) -> str:
    """Entry from the RQ task: run with the worker's context and RQ's connection."""
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
    """One attempt of one job: start the trainer, pump its output and events, record the end. TaskRun
    (below) is one task of a multi-worker job; the hooks `_claim`, `_prepare`, `_beat`, `_stop_reason`,
    `_started` and `_finish` are where the two differ."""

    prefix = ""
    """Put before every log line (a task's `[worker1] `)."""
    reports = True
    """Whether this run reports for the job: a command's scalars, environment and result (a multi-worker job's
    task 0 only, as the chief reports for a zoo job)."""

    def __init__(self, job_id: int, redis: Redis, ctx: WorkerContext):
        self.job_id = job_id
        self.redis = redis
        self.ctx = ctx
        self.store = JobStore(redis)
        self.job_dir = ctx.settings.job_dir(job_id)
        self.points = 0
        self.tail: list[str] = []
        self.preamble: list[str] = []
        self.result: dict[str, Any] | None = None
        self.progress: dict[str, Any] = {}
        self.spec: dict[str, Any] = {}
        self.command = False
        self.attempt = 1
        self.refused: str | None = None
        self.reader: ScalarReader | None = None
        self.diverged: dict[str, Any] | None = None
        self._run_id: str | None = None
        self.no_space: str | None = None
        self.log_full = False
        self.resumes: int | None = None
        self._carry: Any = None
        self._away_since: float | None = None

    def run(self) -> str:
        if not self._claim():
            status = self.store.get(self.job_id)["status"]
            log.info("job %s is %s, not for this worker now; skipping", self.job_id, status)
            return status
        rec = self.store.get(self.job_id)
        spec = self.spec = rec["spec"]
        self.command = is_command(spec)
        self.attempt = rec.get("attempt", 1)
        self.resumes = rec.get("resumes")
        try:
            self.job_dir.mkdir(parents=True, exist_ok=True)
            (self.job_dir / "spec.json").write_text(json.dumps(self._trainer_spec(spec), indent=2) + "\n")
            log_file = LogFile(self.job_dir / "log.txt")
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            self.no_space = f"{exc.strerror}: {exc.filename}"
            log.error("job %s cannot start: %s", self.job_id, self.no_space)
            return self._finish(None, oom_before=None)
        with log_file:
            return self._run(spec, log_file)

    def _run(self, spec: dict[str, Any], log_file: LogFile) -> str:
        self.points = self.store.stream_length(metrics_key(self.job_id))
        extra_env = self._prepare(spec)
        if extra_env is None:
            return self._stand_down()
        if self._stop_reason():  # canceled between dequeue and now
            return self._finish(None, oom_before=None)
        events_r, events_w = os.pipe()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env[protocol.JOB_ID_ENV] = str(self.job_id)
        env[RUN_ID_ENV] = self.run_id
        oom_before = oom_kills()
        try:
            argv, cwd = self._launch(spec, env, extra_env, events_w)
        except Refused as exc:
            self.refused = str(exc)
            self.preamble.append(f"gpudeck: cannot start the command: {exc}")
        if self.preamble:
            pipe = self.redis.pipeline(transaction=False)
            self._handle("log", [line.encode() for line in self.preamble], log_file, pipe)
            pipe.execute()
        if self.refused:
            os.close(events_r)
            os.close(events_w)
            return self._finish(None, oom_before=None)
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            pass_fds=() if self.command else (events_w,),  # a command has no events to send
            start_new_session=True,  # its own process group: cancel and timeout signal the whole tree
            preexec_fn=_trainer_preexec(self.ctx.max_memory),
        )
        os.close(events_w)
        self._started(proc.pid)
        try:
            os.nice(HORSE_NICENESS)
        except OSError:
            pass
        log.info("job %s%s: trainer pid %s in %s", self.job_id, self.prefix.rstrip(), proc.pid, self.job_dir)
        self._pump(proc, os.fdopen(events_r, "rb"), log_file, spec.get("timeout"))
        returncode = proc.wait()
        self.log_full = log_file.full
        kill_marked(RUN_ID_ENV, self.run_id)  # what it started and left behind, in its group or not
        if self._carry is not None:  # what the outage kept back goes in before the end
            through_outage(lambda: self._flush(self._pipeline(), strict=True), "the job's output")
        return through_outage(lambda: self._finish(returncode, oom_before), f"the end of job {self.job_id}")

    @property
    def run_id(self) -> str:
        """The mark on every process this attempt starts: its RQ id and a token of its own, so that no other
        attempt's processes (another gpudeck on this host, a test's) ever carry it."""
        if self._run_id is None:
            self._run_id = f"{self._rq_id()}.{uuid.uuid4().hex[:12]}"
        return self._run_id

    def _rq_id(self) -> str:
        return rq_job_id(self.job_id, self.attempt)

    def _measure(self) -> None:
        """The job dir's size, into a record that is still active (never one that ended or went meanwhile)."""
        self.store.transition(self.job_id, ACTIVE, disk_bytes=tree_bytes(self.job_dir))

    def _take_checkpoints(self) -> None:
        """A retried model job starts from the last complete checkpoint of the job it retries: its files are
        linked (copied across filesystems) into this job's checkpoints/, which the trainer resumes from."""
        if not self.resumes:
            return
        mine, theirs = self.job_dir / "checkpoints", self.ctx.settings.job_dir(int(self.resumes)) / "checkpoints"
        if (mine / "checkpoint").exists():
            return  # an earlier attempt of this job saved its own
        if not (theirs / "checkpoint").exists():
            self.preamble.append(f"gpudeck: job {self.resumes} left no checkpoint here; training from the start")
            return
        shutil.copytree(theirs, mine, copy_function=_link_or_copy, ignore=_unfinished, dirs_exist_ok=True)
        self.preamble.append(f"gpudeck: resuming from the last checkpoint of job {self.resumes}")

    def _launch(
        self, spec: dict[str, Any], env: dict[str, str], extra_env: dict[str, str], events_w: int
    ) -> tuple[list[str], Path]:
        """argv and working dir of what this attempt runs; fills in `env`. Refused when it cannot start here."""
        if not self.command:
            env[protocol.EVENTS_FD_ENV] = str(events_w)
            env[protocol.STOP_GRACE_ENV] = str(protocol.trainer_grace(self.ctx.stop_grace_s))
            env.update(extra_env)
            self._take_checkpoints()
            return python_module("models.train", "--spec", "spec.json", "--job-dir", "."), self.job_dir
        for name in HIDDEN_ENV:
            env.pop(name, None)
        src = self._source_copy(spec)
        bin_dir = Path(sys.executable).parent  # `python` is the worker's own, with TensorFlow
        if spec.get("env_name"):
            found = self.ctx.settings.env_python(spec["env_name"])
            if found is None or not found.is_dir():
                raise Refused(
                    f"environment {spec['env_name']!r} is not registered on worker {self.ctx.name} "
                    f"(GPUDECK_ENVS there: {', '.join(n for n, _ in self.ctx.settings.envs) or 'none'})"
                )
            bin_dir = found
            env["VIRTUAL_ENV"] = str(found.parent)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        injected = {
            "GPUDECK_JOB_ID": str(self.job_id),
            "BUILD_ID": str(self.job_id),
            "GPUDECK_ATTEMPT": str(self.attempt),
            RUN_ID_ENV: self.run_id,
            "JOB_DIR": str(self.job_dir),
            "TRAINING_DIR": str(self.job_dir),
            "TENSORBOARD_DIR": str(self.job_dir / "tensorboard"),
            "SRC_DIR": str(src),
            "GPU_COUNT": str(len(self.ctx.gpu_ids)),
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(self.ctx.gpu_ids)),
            "PYTHONUNBUFFERED": "1",
        }
        if spec.get("dataset"):
            injected["DATA_DIR"] = str(self._data_dir(spec["dataset"]))
        injected.update(extra_env)  # a task's TF_CONFIG, GPUDECK_TASK_TYPE, GPUDECK_TASK_INDEX
        env.update(injected)
        env.update(spec.get("env") or {})
        if self.reports:
            self.reader = ScalarReader(self.job_dir, ignore=self._shipped_event_files(src))
            self.store.update(self.job_id, environment={**injected, **masked(spec.get("env") or {})})
        cmd = spec["command"]
        return (["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)), src

    def _source_copy(self, spec: dict[str, Any]) -> Path:
        """`$JOB_DIR/src`: this job's own writable copy of its source snapshot (kept for a later attempt)."""
        src = self.job_dir / "src"
        if src.exists():
            return src
        if not spec.get("source"):
            src.mkdir(exist_ok=True)  # another task of the job on this host may make it at the same moment
            return src
        sha = sourcetree.parse_ref(spec["source"]) or ""
        stored = sources.local_path(self.ctx.settings, sha)
        if not stored.is_dir():
            raise Refused(
                f"source {spec['source']} is not under {self.ctx.settings.sources_dir} on worker {self.ctx.name} "
                "(workers on other hosts need the API's GPUDECK_HOME on shared storage)"
            )
        tmp = self.job_dir / f".src-{os.getpid()}"
        shutil.copytree(stored, tmp, symlinks=True)
        for here, dirs, names in os.walk(tmp):
            for n in dirs + names:
                p = os.path.join(here, n)
                if not os.path.islink(p):
                    os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
        try:
            os.rename(tmp, src)
        except OSError:  # another task of the job on this host copied it first
            if not src.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
        return src

    @staticmethod
    def _shipped_event_files(src: Path) -> set[str]:
        """Event files that came with the source: not this job's curves."""
        return {f"src/{n}" for n in sourcetree.files(src) if EVENT_FILE_MARK in n}

    def _data_dir(self, dataset: str) -> Path:
        ref = parse_dataset(dataset)
        if ref.kind == "stored":
            return datasets.local_path(self.redis, self.ctx.settings, dataset)
        return Path(ref.path or dataset)

    # -- hooks -------------------------------------------------------------------------------
    def _claim(self) -> bool:
        """Take the job: queued -> starting on this worker; False when it is not queued any more."""
        self.store.beat(self.job_id, self.ctx.name)
        return self.store.transition(
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

    def _prepare(self, spec: dict[str, Any]) -> dict[str, str] | None:
        """Extra environment for the trainer; None when the attempt must stand down without training."""
        return {}

    def _stand_down(self) -> str:
        return self.store.get(self.job_id)["status"]

    def _beat(self) -> None:
        self.store.beat(self.job_id, self.ctx.name)

    def _stop_reason(self) -> str | None:
        return self.store.stop_reason(self.job_id)

    def _grace(self, reason: str) -> float:
        """Seconds between SIGTERM and SIGKILL for a stop with this reason."""
        return self.ctx.stop_grace_s

    def _started(self, pid: int) -> None:
        self.store.update(self.job_id, pid=pid, spawned_at=time.time(), **self._command_running())

    def _command_running(self) -> dict[str, Any]:
        """A command job is running once its process is: there is no trainer to say so."""
        if not self.command:
            return {}
        self.progress = {"step": None, "total_steps": self.spec.get("total_steps"), "steps_per_epoch": None}
        return {"status": Status.RUNNING.value, "running_at": time.time(), "progress": self.progress}

    def _trainer_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The spec the trainer reads: an uploaded dataset's folder on this host is filled in."""
        if is_command(spec):
            return spec
        if parse_dataset(spec["dataset"]).kind != "stored":
            return spec
        return dict(spec, dataset_path=str(self._data_dir(spec["dataset"])))

    def _pump(self, proc: subprocess.Popen[bytes], events: IO[bytes], log_file: LogFile, timeout: int | None) -> None:
        """Stream the trainer's output and events until both pipes close; beat, and act on stop requests."""
        assert proc.stdout is not None
        for f in (proc.stdout, events):
            os.set_blocking(f.fileno(), False)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "log")
        sel.register(events, selectors.EVENT_READ, "events")
        buffers = {"log": b"", "events": b""}
        deadline = time.monotonic() + timeout if timeout else None
        last_beat = last_poll = last_scan = last_disk = time.monotonic()
        termed_at: float | None = None
        exited_at: float | None = None
        grace = self.ctx.stop_grace_s
        while sel.get_map():
            ready = sel.select(STOP_POLL_S)
            if ready:
                time.sleep(COALESCE_S)  # let more output gather; the pipes hold 64 KiB each meanwhile
            pipe = self._pipeline()
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
            now = time.monotonic()
            scanned = self.reader is not None and now - last_scan >= SCAN_EVERY_S
            if scanned:
                self._scan(pipe)
                last_scan = now
            self._flush(pipe)
            if scanned:
                self.reader.save()  # type: ignore[union-attr]
            if now - last_beat >= HEARTBEAT_EVERY_S:
                self._reachable(self._beat)
                last_beat = now
            if self.reports and now - last_disk >= DISK_EVERY_S:
                self._reachable(self._measure)
                last_disk = now
            if termed_at is None and now - last_poll >= STOP_POLL_S:
                last_poll = now
                if deadline is not None and now > deadline:
                    log.warning("job %s: timeout of %ss passed; stopping its trainer", self.job_id, timeout)
                    self._reachable(lambda: self.store.request_stop(self.job_id, Reason.TIMEOUT.value))
                reason = self._reachable(self._stop_reason)
                if reason:
                    log.info("job %s: stop requested (%s): SIGTERM to its process group", self.job_id, reason)
                    signal_group(proc.pid, signal.SIGTERM)
                    termed_at, grace = now, self._grace(reason)
            if termed_at is not None and now - termed_at > grace:
                log.warning("job %s: still running %.0fs after SIGTERM: SIGKILL", self.job_id, grace)
                signal_group(proc.pid, signal.SIGKILL)
                termed_at = float("inf")
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            elif exited_at is not None and now - exited_at > EXIT_LINGER_S and sel.get_map():
                log.info("job %s: its process exited; ending what it left holding its output", self.job_id)
                signal_group(proc.pid, signal.SIGKILL)
                kill_marked(RUN_ID_ENV, self.run_id)
                exited_at = float("inf")
        events.close()
        if self.reader is not None:
            pipe = self._pipeline()
            self._scan(pipe)
            self._flush(pipe)
            self.reader.save()
        if termed_at is not None:
            signal_group(proc.pid, signal.SIGKILL)  # anything the trainer left in its group goes with it

    def _pipeline(self) -> Any:
        """The pipeline this round's writes go into: the one an outage kept back (written first), else a new one."""
        pipe, self._carry = self._carry, None
        return pipe if pipe is not None else self.redis.pipeline(transaction=False)

    def _flush(self, pipe: Any, strict: bool = False) -> None:
        """Write `pipe`. While Redis is away (restarting, a blip) the job goes on: its log lines and points wait
        in a pipeline of their own (in order, scripts and all) and go in when Redis answers again."""
        stack, scripts = list(pipe.command_stack), set(pipe.scripts)
        if not stack:
            return
        try:
            pipe.execute()
        except OUTAGE as exc:
            carry = self.redis.pipeline(transaction=False)
            carry.command_stack, carry.scripts = stack, scripts
            self._carry = carry
            self._away(exc, ", its output waits")
            if strict:
                raise
            return
        self._back(f"; {len(stack)} writes kept meanwhile went in")

    def _reachable(self, fn: Any) -> Any:
        """fn() (a heartbeat, a look for a stop request), or None while Redis is away: the job goes on."""
        try:
            out = fn()
        except OUTAGE as exc:
            self._away(exc, "")
            return None
        if self._carry is None:  # else the next flush says so, once it has written what waits
            self._back("")
        return out

    def _away(self, exc: Exception, what: str) -> None:
        """Note (once per outage) that Redis stopped answering."""
        if self._away_since is None:
            self._away_since = time.monotonic()
            log.warning("job %s: redis unreachable (%s); the job goes on%s", self.job_id, exc, what)

    def _back(self, what: str) -> None:
        if self._away_since is not None:
            away, self._away_since = time.monotonic() - self._away_since, None
            log.warning("job %s: redis is back after %.1fs%s", self.job_id, away, what)

    def _handle(self, kind: str, chunks: list[bytes], log_file: LogFile, pipe: Any) -> None:
        if kind == "log":
            lines = [self.prefix + c.decode("utf-8", "replace").rstrip("\r") for c in chunks]
            log_file.write("".join(line + "\n" for line in lines))
            self.store.append_lines(self.job_id, lines, pipe)
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
        if kind == protocol.EVENT_RUNNING:
            self.progress = {
                "step": data["step"],
                "total_steps": data["total_steps"],
                "steps_per_epoch": data["steps_per_epoch"],
                "epochs": data["epochs"],
                "first_step": data["step"],
            }
            fields = {"status": Status.RUNNING.value, "running_at": time.time(), "progress": self.progress}
        elif kind == protocol.EVENT_METRIC:
            fields = self._point(data, pipe)
        elif kind == protocol.EVENT_RESULT:
            self.result = data
            fields = {"result": data}
        elif kind == protocol.EVENT_DIVERGED:
            self.diverged = data
        if fields:
            self.store.update(self.job_id, pipe=pipe, **fields)

    def _point(self, data: dict[str, Any], pipe: Any) -> dict[str, Any]:
        """Store one metric point; the record fields it changes."""
        self.points += 1
        self.store.append_point(self.job_id, self.points, data, pipe)
        if isinstance(data.get("step"), int):
            self.progress.setdefault("first_step", data["step"])
            self.progress["step"] = max(data["step"], self.progress.get("step") or 0)
        fields: dict[str, Any] = {"progress": self.progress}
        if "loss" in data:
            fields["metrics"] = data
        return fields

    def _scan(self, pipe: Any) -> None:
        """A command job's new scalars, as metric points."""
        assert self.reader is not None
        fields: dict[str, Any] = {}
        for point in self.reader.poll():
            fields.update(self._point(point, pipe))
        if fields:
            self.store.update(self.job_id, pipe=pipe, **fields)

    def _command_result(self, returncode: int | None) -> None:
        """A command job's result: its result.json, else the last value of each scalar it logged."""
        if not (self.command and self.reports) or returncode != protocol.EXIT_OK:
            return
        self.result = read_result(self.job_dir) or dict(self.reader.last if self.reader else {})
        self.store.update(self.job_id, result=self.result)

    def _finish(self, returncode: int | None, oom_before: int | None) -> str:
        """Record the honest final state (jobs.outcome decides, jobs.lifecycle applies): succeeded, canceled,
        failed with a typed reason, or queued again after a worker_lost stop while retries last."""
        stop = self.store.stop_reason(self.job_id)
        self._command_result(returncode)
        if self.refused:
            end = outcome.refused(self.refused)
        elif self.no_space:
            end = outcome.DISK_FULL
        else:
            end = outcome.of_job(
                stop,
                returncode,
                self.result is not None,
                self._oom(returncode, oom_before),
                command=self.command,
                diverged=self.diverged,
                full=self._full(returncode),
            )
        size = tree_bytes(self.job_dir)
        status = lifecycle.end(self.redis, self.job_id, end, log_tail=self.tail, disk_bytes=size)
        return status or self.store.get(self.job_id)["status"]

    def _full(self, returncode: int | None) -> bool:
        """Whether the process failed for want of disk space: its last lines say so, or log.txt found none."""
        return outcome.disk_full(returncode, self.tail) or (self.log_full and returncode not in (0, None))

    def _oom(self, returncode: int | None, oom_before: int | None) -> bool:
        killed = oom_before is not None and (oom_kills() or 0) > oom_before
        return outcome.out_of_memory(returncode, self.tail, killed)


def run_current_task(job_id: int, index: int, gen: int) -> str:
    """Entry from the RQ task of one task of a multi-worker job."""
    ctx = CONTEXT or WorkerContext(Settings.from_env())
    current = get_current_job()
    redis = current.connection if current is not None else ctx.settings.redis()
    return TaskRun(job_id, index, gen, redis, ctx).run()


class TaskRun(JobRun):
    """Task `index` of placement `gen` of a multi-worker job: publishes its host:port, waits for the other
    tasks' (the rendezvous), trains with TF_CONFIG, and on its end lets gang.finish decide for the job."""

    def __init__(self, job_id: int, index: int, gen: int, redis: Redis, ctx: WorkerContext):
        super().__init__(job_id, redis, ctx)
        self.index, self.gen = index, gen
        self.reports = index == 0
        self.key = task_key(job_id, index)
        self.spec = self.store.get(job_id)["spec"]
        self.prefix = f"[{gang.label(self.spec, index)}] "

    def _claim(self) -> bool:
        if not gang.current(self.redis, self.job_id, self.gen) or self.store.stop_reason(self.job_id):
            return False
        self.redis.hset(self.key, mapping={"started_at": time.time(), "worker": self.ctx.name})
        self._beat()
        return True

    def _prepare(self, spec: dict[str, Any]) -> dict[str, str] | None:
        address = f"{gang.advertise_host(self.ctx.settings.redis_url, dict(os.environ))}:{free_port()}"
        self.redis.hset(self.key, "address", address)
        n = spec["workers"]
        go = gang.arrive(self.redis, self.job_id, self.gen, n)
        give_up = time.monotonic() + 2 * gang.RENDEZVOUS_S  # the reaper puts it back in line well before
        while not self.redis.blpop([go], timeout=1):  # the last task to arrive lets everyone go at once
            if self._stop_reason() or time.monotonic() > give_up:
                return None
            self._beat()
        addresses = [t.get("address") for t in gang.tasks(self.redis, self.job_id, n)]
        chief = addresses[0] if spec.get("chief") else None
        spec_ = tfconfig.cluster(list(addresses[1:] if chief else addresses), chief=chief)
        kind, i = gang.task_name(spec, self.index)
        config = tfconfig.tf_config(spec_, kind, i)
        self.preamble = [f"gpudeck: task {kind}:{i} of {n} on {self.ctx.name} at {address}; cluster {spec_}"]
        return {"TF_CONFIG": json.dumps(config), "GPUDECK_TASK_TYPE": kind, "GPUDECK_TASK_INDEX": str(i)}

    def _stand_down(self) -> str:
        why = self._stop_reason() or "the rendezvous did not complete"
        self.redis.hset(self.key, mapping={"status": "stopped", "message": f"stood down before training: {why}"})
        self.redis.delete(task_beat_key(self.job_id, self.index))
        return gang.finish(self.redis, self.job_id) or "stopped"

    def _beat(self) -> None:
        self.redis.set(task_beat_key(self.job_id, self.index), self.ctx.name, ex=HEARTBEAT_TTL_S)

    def _stop_reason(self) -> str | None:
        reason = self.store.stop_reason(self.job_id)
        if reason is None and not gang.current(self.redis, self.job_id, self.gen):
            return "unplaced"
        return reason

    def _grace(self, reason: str) -> float:
        # A peer that failed or left cannot take part in a collective checkpoint: do not wait long for one.
        return self.ctx.stop_grace_s if reason == Reason.CANCELED.value else min(self.ctx.stop_grace_s, 10.0)

    def _started(self, pid: int) -> None:
        self.redis.hset(self.key, mapping={"pid": pid, "spawned_at": time.time()})
        if self.index == 0:
            self.store.update(self.job_id, spawned_at=time.time(), **self._command_running())

    def _rq_id(self) -> str:
        return rq_task_id(self.job_id, self.gen, self.index)

    def _finish(self, returncode: int | None, oom_before: int | None) -> str:
        self._command_result(returncode)
        status, failure = outcome.of_task(
            self._stop_reason(),
            returncode,
            self._oom(returncode, oom_before),
            command=self.command,
            diverged=self.diverged,
            full=self._full(returncode),
        )
        if self.refused:
            status, failure = "failed", outcome.refused(self.refused)
        elif self.no_space:
            status, failure = "failed", outcome.DISK_FULL
        fields: dict[str, Any] = {"status": status, "exited_at": time.time(), "log_tail": json.dumps(self.tail)}
        if returncode is not None:
            fields["returncode"] = returncode
        if status == "stopped":
            fields["message"] = f"stopped ({self._stop_reason()})"
        if failure is not None:
            fields.update(reason=failure.reason.value if failure.reason else "", message=failure.message or "")
        self.redis.hset(self.key, mapping=fields)
        if failure is not None:
            self.store.request_stop(self.job_id, outcome.TASK_FAILED, only_first=True)  # the others stop
            log.warning("job %s task %s failed: %s", self.job_id, self.prefix.strip(), failure.message)
        self.redis.delete(task_beat_key(self.job_id, self.index))
        return gang.finish(self.redis, self.job_id) or status
