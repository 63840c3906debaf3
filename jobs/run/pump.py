"""The I/O of a running attempt: its output and trainer events turned into log lines, metric points and record
fields (Output), written to Redis in a few batches a second and carried through a Redis outage (Writes), and the
loop that reads the pipes, beats, and acts on stop requests, timeouts and stray processes (pump)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import select
import selectors
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from redis import Redis
from redis.exceptions import RedisError

from jobs import notify, outcome
from jobs.periodic import Beating, stack_of
from jobs.record import Kept
from jobs.run.launch import RUN_ID_ENV, Launch, LogFile, shipped_event_files, signal_group
from jobs.run.proc import Started, end_descendants, kill_marked
from jobs.scalars import ScalarReader, newest_run_result, read_result
from jobs.spec import masked
from jobs.store import LIVE_TTL_S, JobStore, passing
from models import protocol
from models.reporting import chance_warning, nonfinite_warning
from models.states import Reason, Status

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 20
"""Last log lines kept in the record of a failed job."""
HEARTBEAT_EVERY_S = 3.0
"""How often the work-horse refreshes its job's heartbeat (the key lives HEARTBEAT_TTL_S), from a thread of its own
(Heartbeat)."""
STOP_POLL_S = 1.0
"""How often the work-horse looks for a cancel request (the API may be on another host)."""
COALESCE_S = 0.25
"""After a read, the work-horse waits this long before the next, so log lines and metric points reach
Redis in a few batches a second: each wake-up of ours would otherwise preempt a training thread."""
DISK_EVERY_S = 30.0
"""How often the work-horse measures its job dir while the job runs (the record's `disk_bytes`)."""
SCAN_EVERY_S = 1.0
"""How often the work-horse reads a command job's new TensorBoard scalars and metrics.jsonl lines."""
TRIAL_EVERY_S = 0.25
"""How often a search's trial looks for a stop request: its pruner's stop reaches it within a quarter second, which
short trials need. (Its scalars are still read every SCAN_EVERY_S.)"""
LOOP_STUCK_S = 90.0
"""A pump whose loop has not come round for this long is stuck: its heartbeat stops (Heartbeat)."""
LIVE_EVERY_S = 1.0
"""At most how often the line a job is drawing (a progress bar before its newline) is shown anew."""
EXIT_LINGER_S = 2.0
"""After the trainer or command exits, how long processes it left holding its output may live before they are
killed (a background child would otherwise keep the job from ending)."""


CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\r\b]")
"""What a terminal acts on in a line: a CSI sequence (colour, erase), a carriage return, a backspace."""


def as_shown(line: str) -> str:
    """A line as a terminal leaves it: `\r` returns to its start and what follows overwrites, `\b` steps back,
    `ESC[K` erases to its end, colours and other sequences go. Keras' and tqdm's progress bars (one line of up to
    35,000 characters an epoch when piped) read as their final state."""
    if not CONTROL.search(line):
        return line
    cells: list[str] = []
    pos = 0
    for piece in re.split(f"({CONTROL.pattern})", line):
        if not piece:
            continue
        if piece == "\r":
            pos = 0
        elif piece == "\b":
            pos = max(0, pos - 1)
        elif piece.startswith("\x1b["):
            if piece[-1] == "K":  # erase in line: from the cursor on (0, the default), all of it (2)
                del cells[0 if piece[2:-1] == "2" else pos :]
        else:
            for ch in piece:
                if pos < len(cells):
                    cells[pos] = ch
                else:
                    cells.extend(" " * (pos - len(cells)))
                    cells.append(ch)
                pos += 1
    return "".join(cells).rstrip()


class Writes:
    """Pipelines of one attempt's writes. While Redis is away (restarting, a blip) or cannot write (its disk is
    full) the job goes on: its log lines and points wait in a pipeline of their own (in order, scripts and all)
    and go in when Redis takes them again."""

    def __init__(self, redis: Redis, job_id: int):
        self.redis, self.job_id = redis, job_id
        self.carry: Any = None
        self._away_since: float | None = None

    def pipeline(self) -> Any:
        """The pipeline this round's writes go into: the one an outage kept back (written first), else a new one."""
        pipe, self.carry = self.carry, None
        return pipe if pipe is not None else self.redis.pipeline(transaction=False)

    def flush(self, pipe: Any, strict: bool = False) -> None:
        """Write `pipe`; on an outage keep it for the next round (`strict`: and raise)."""
        stack, scripts = list(pipe.command_stack), set(pipe.scripts)
        if not stack:
            return
        try:
            pipe.execute()
        except RedisError as exc:
            if not passing(exc):
                raise
            carry = self.redis.pipeline(transaction=False)
            carry.command_stack, carry.scripts = stack, scripts
            self.carry = carry
            self._away(exc, ", its output waits")
            if strict:
                raise
            return
        self._back(f"; {len(stack)} writes kept meanwhile went in")

    def reachable(self, fn: Callable[[], Any]) -> Any:
        """fn() (a heartbeat, a look for a stop request), or None while Redis is away: the job goes on."""
        try:
            out = fn()
        except RedisError as exc:
            if not passing(exc):
                raise
            self._away(exc, "")
            return None
        if self.carry is None:  # else the next flush says so, once it has written what waits
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


class Output:
    """What an attempt has said: its log lines (the file, the stream, the tail a failed job keeps), the trainer's
    events (running, metric points, the result, divergence) and a command's scalars, as record fields."""

    def __init__(self, store: JobStore, job_id: int, prefix: str = ""):
        self.store, self.job_id, self.prefix = store, job_id, prefix
        self.points = 0
        self.tail: list[str] = []
        self.progress: dict[str, Any] = {}
        self.result: dict[str, Any] | None = None
        self.diverged: dict[str, Any] | None = None
        self.reader: ScalarReader | None = None
        self.seen_step: int | None = None
        """The last step an earlier attempt recorded: a resumed attempt's points up to it are not stored again (the
        curve goes on with no step twice; what was redone since the checkpoint was recorded once already)."""
        self.later = False
        """A later attempt (after_earlier_attempts)."""
        self.loss_clock = False
        """Whether a point with a loss came: from then on only such points move the progress."""
        self.runs: list[str] = []
        """The run folders points came from, in the order they began (a script that trains twice has two)."""
        self.live: str | None = None
        """The line being drawn as last shown (None: none is)."""
        self.went_running = False
        """The job has just become running: its `any` notifications are queued once that is written."""
        self.live_at = 0.0

    def handle(self, kind: str, chunks: list[bytes], log_file: LogFile, pipe: Any) -> None:
        if kind == "log":
            written = [self.prefix + c.decode("utf-8", "replace").rstrip("\r") for c in chunks]
            log_file.write("".join(line + "\n" for line in written))  # log.txt: the bytes as written
            lines = [as_shown(line) for line in written]  # the log everyone reads: a progress bar's last state
            self.store.append_lines(self.job_id, lines, pipe)
            self.tail = (self.tail + lines)[-LOG_TAIL_LINES:]
            if self.live is not None:  # the line being drawn has ended: it is in the log now
                self.store.set_live(self.job_id, None, pipe)
                self.live = None
            return
        for chunk in chunks:
            try:
                event = json.loads(chunk)
            except ValueError:
                log.warning("job %s: unreadable event %r", self.job_id, chunk[:200])
                continue
            self.on_event(event.pop("event", None), event, pipe)

    def on_event(self, kind: str | None, data: dict[str, Any], pipe: Any) -> None:
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
            self.went_running = True
        elif kind == protocol.EVENT_METRIC:
            fields = self.point(data, pipe)
        elif kind == protocol.EVENT_RESULT:
            self.result = data
            fields = {"result": data}
        elif kind == protocol.EVENT_DIVERGED:
            self.diverged = data
        elif kind == protocol.EVENT_STOPPED and self.progress and isinstance(data.get("step"), int):
            self.progress = {**self.progress, "step": data["step"]}  # (between two points: where it stopped)
            fields = {"progress": self.progress}
        if fields:
            self.store.update(self.job_id, pipe=pipe, **fields)

    def drawing(self, partial: bytes, pipe: Any) -> None:
        """Show the line being drawn (output with no newline yet: a progress bar), at most every LIVE_EVERY_S."""
        now = time.monotonic()
        if not partial or now - self.live_at < LIVE_EVERY_S:
            return
        shown = as_shown(self.prefix + partial.decode("utf-8", "replace"))
        if shown != self.live or now - self.live_at > LIVE_TTL_S / 2:  # (a slow step: kept alive meanwhile)
            self.store.set_live(self.job_id, shown, pipe)
            self.live, self.live_at = shown, now

    def point(self, data: dict[str, Any], pipe: Any) -> dict[str, Any]:
        """Store one metric point; the record fields it changes."""
        step = data.get("step")
        if self.seen_step is not None and isinstance(step, int) and step <= self.seen_step:
            return {}
        self.points += 1
        self.store.append_point(self.job_id, self.points, data, pipe)
        # One clock: once a loss is seen, only the steps of the series it comes from move the progress (Keras
        # writes epoch_loss by epoch and evaluation_*_vs_iterations by iteration: 5 epochs read 5,625 of 5).
        first_loss = "loss" in data and not self.loss_clock
        stamp = data.get("time")  # (when the point was written, where it says: else now, as it is read)
        stamp = stamp if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) else time.time()
        self.loss_clock = self.loss_clock or "loss" in data
        fields: dict[str, Any] = {}
        run = data.get("run")
        if run is not None and run not in self.runs:  # a new training (its own run folder): its clock from now on
            self.runs.append(run)
            fields["runs"] = list(self.runs)
            if self.progress.get("run") is not None and isinstance(data.get("step"), int):
                self.progress.update(step=None, first_step=data["step"], since=stamp)  # (its own clock)
            self.progress["run"] = run
        if isinstance(data.get("step"), int) and ("loss" in data or not self.loss_clock):
            if run is None or run == self.progress.get("run"):
                if first_loss:  # (the loss's clock takes over from any other series read before it: a validation
                    # file's per-iteration point read first had the progress at 1,875 of 5 for good — issue 67 #2)
                    self.progress.update(step=None, first_step=data["step"])
                self.progress.setdefault("first_step", data["step"])
                self.progress["step"] = max(data["step"], self.progress.get("step") or 0)
                self.progress["at"] = stamp
        fields["progress"] = self.progress
        if "loss" in data:
            fields["metrics"] = data
        return fields

    def scan(self, pipe: Any) -> None:
        """A command job's new scalars, as metric points."""
        assert self.reader is not None
        fields: dict[str, Any] = {}
        for point in self.reader.poll():
            fields.update(self.point(point, pipe))
        if fields:
            self.store.update(self.job_id, pipe=pipe, **fields)

    def after_earlier_attempts(self) -> None:
        """A later attempt goes on after the newest point stored: the points it redoes from its checkpoint up to
        there are not stored again. (Not after the record's progress: a command's comes from its log lines, which
        can lead its points, read from its files once a second; an attempt that died between the two would have
        the next one drop a point nobody stored. And a command's points that an earlier attempt wrote but nobody
        read, because it died first, are read as its own before this one starts: command_launched.)"""
        step = (self.store.last_point(self.job_id) or {}).get("step")
        self.seen_step = step if isinstance(step, int) else None
        self.later = True

    def command_launched(self, how: Launch, spec: Kept, job_dir: Path, built: Path | None) -> None:
        """A command job that reports (a multi-worker job's task 0) is about to start: its scalars are read from
        its job dir (not the event files its source shipped), its record gets the variables it is given (values
        that look secret masked, secrets by name) and its project environment's digest (`gpudeck compare`)."""
        shipped = shipped_event_files(how.source) if how.source is not None else set()
        self.reader = ScalarReader(job_dir, ignore=shipped)
        if self.later:  # what an earlier attempt wrote that nobody read (it died first) is its own, read now
            with self.store.redis.pipeline(transaction=False) as pipe:
                self.scan(pipe)
                pipe.execute()
            self.reader.save()
            self.after_earlier_attempts()  # (this attempt goes on after those too)
        env_shown = {**masked(spec.env), **dict.fromkeys(spec.secret_env, "***")}
        fields: dict[str, Any] = {"environment": {**how.injected, **env_shown}}
        if built is not None:
            fields["env_digest"] = built.name
        self.store.update(self.job_id, **fields)

    def command_running(self, total_steps: int | None) -> dict[str, Any]:
        """The record fields of a command that has started: it is running once its process is (no trainer says)."""
        self.progress = {"step": None, "total_steps": total_steps, "steps_per_epoch": None}
        return {"status": Status.RUNNING.value, "running_at": time.time(), "progress": self.progress}

    def command_result(self, job_dir: Any, classes: int | None = None) -> None:
        """A command job's result: its result.json, else the last value of each scalar it logged; with a `warning`
        when its accuracy is at chance over the `classes` its spec declares (as a zoo job's result gets)."""
        self.result = read_result(job_dir) or newest_run_result(self.reader)
        if self.result and "warning" not in self.result:  # (a NaN loss always; chance where it declares classes)
            warning = nonfinite_warning(self.result) or (chance_warning(self.result, classes) if classes else None)
            if warning:
                self.result = {**self.result, "warning": warning}
        self.store.update(self.job_id, result=self.result)

    def facts(
        self, returncode: int | None, stop: str | None, killed: bool, command: bool, log_full: bool, **attempt: Any
    ) -> outcome.Facts:
        """The job-end table's facts of an attempt that ended: what its output said (a result, divergence; its last
        lines: out of memory — or the kernel `killed` it —, a full disk — or `log_full`: log.txt found none —, an MPS
        fault) and what the attempt knows (`attempt`: refusal, no_space, environment)."""
        tail = self.tail
        return outcome.Facts(
            stop=stop,
            returncode=returncode,
            has_result=self.result is not None,
            oom=outcome.out_of_memory(returncode, tail, killed),
            command=command,
            diverged=self.diverged,
            full=outcome.disk_full(returncode, tail) or (log_full and returncode not in (0, None)),
            mps_fault=outcome.mps_fault(returncode, tail),
            **attempt,
        )


class Running(Protocol):
    """What pump() needs of the attempt it serves (jobs.run.runner.JobRun)."""

    job_id: int
    reports: bool
    quick: bool
    """A search's trial: its stops looked for every TRIAL_EVERY_S."""

    @property
    def run_id(self) -> str: ...

    output: Output
    writes: Writes

    def beat(self) -> None: ...
    def measure(self) -> None: ...
    def stop_reason(self) -> str | None: ...
    def grace(self, reason: str | None) -> float: ...
    def request_stop(self, reason: str) -> None: ...


def _drain(fd: int) -> tuple[bytes, bool]:
    """Everything a non-blocking pipe holds now, and whether its writer has closed it."""
    parts: list[bytes] = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return b"".join(parts), False
        if not chunk:
            return b"".join(parts), True
        parts.append(chunk)


class Heartbeat(Beating):
    """The attempt's heartbeat every HEARTBEAT_EVERY_S while its pump runs, from a thread of its own: the pump's loop
    can be held for seconds (the first read of event files imports tensorboard's loader; a loaded box), and a
    work-horse that lives must never look lost for that (on a loaded make test a search trial's did, and the reaper
    queued it again). A loop that has not come round for LOOP_STUCK_S is another matter: the beats stop (the reaper
    then retries the job as worker_lost, as for a work-horse that died) and the log says where the loop is stuck."""

    def __init__(self, beat: Callable[[], None], every_s: float | None = None):
        super().__init__(beat, HEARTBEAT_EVERY_S if every_s is None else every_s)
        self.loop_at = time.monotonic()
        """When the pump's loop last came round (`tick`)."""
        self.loop_thread = threading.get_ident()
        """The pump's thread (the one that makes the Heartbeat)."""
        self.said = False

    def tick(self) -> None:
        self.loop_at = time.monotonic()

    def skip(self) -> bool:
        if time.monotonic() - self.loop_at <= LOOP_STUCK_S:
            return False
        if not self.said:
            self.said = True
            log.error("the pump's loop has not come round for %.0fs: its heartbeat stops (the job is retried as "
                      "worker_lost); it is at:\n%s", LOOP_STUCK_S, stack_of(self.loop_thread))  # fmt: skip
        return True


@dataclass
class Every:
    """An action of the pump's loop done every `seconds` (its first after `seconds`)."""

    seconds: float
    action: Callable[[float], object]
    last: float = field(default_factory=time.monotonic)

    def tick(self, now: float) -> None:
        if now - self.last >= self.seconds:
            self.last = now
            self.action(now)


@dataclass
class Stopping:
    """A stop of the attempt's process: asked for (a request, or its timeout) -> SIGTERM to its group -> SIGKILL
    once the stop's grace has passed."""

    run: Running
    proc: Started
    timeout: int | None
    deadline: float | None = None
    termed_at: float | None = None
    grace: float = 0.0

    def poll(self, now: float) -> None:
        if self.termed_at is not None:
            return
        run, writes = self.run, self.run.writes
        if self.deadline is not None and now > self.deadline:
            log.warning("job %s: timeout of %ss passed; stopping its trainer", run.job_id, self.timeout)
            writes.reachable(lambda: run.request_stop(Reason.TIMEOUT.value))
        reason = writes.reachable(run.stop_reason)
        if reason:
            log.info("job %s: stop requested (%s): SIGTERM to its process group", run.job_id, reason)
            signal_group(self.proc.pid, signal.SIGTERM)
            self.termed_at, self.grace = now, run.grace(reason)

    def escalate(self, now: float) -> None:
        if self.termed_at is not None and now - self.termed_at > self.grace:
            log.warning("job %s: still running %.0fs after SIGTERM: SIGKILL", self.run.job_id, self.grace)
            signal_group(self.proc.pid, signal.SIGKILL)
            self.termed_at = float("inf")


@contextlib.contextmanager
def _exit_of(pid: int) -> Iterator[int | None]:
    """A descriptor that becomes readable when process `pid` ends (Linux's pidfd), or None where there is none."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _linger(exit_fd: int | None, seconds: float) -> None:
    """Wait `seconds`, or less: until the process `exit_fd` watches ends."""
    if exit_fd is None:
        time.sleep(seconds)
    else:
        select.select([exit_fd], [], [], seconds)


def pump(run: Running, proc: Started, events: IO[bytes], log_file: LogFile, timeout: int | None) -> None:
    """Stream the process's output and events until both pipes close, the job's heartbeat beating meanwhile; act
    on stop requests (SIGTERM, SIGKILL after the grace), on the job's timeout, and on processes it left holding its
    output once it exited."""
    heart = Heartbeat(run.beat)
    with heart:
        _pump(run, proc, events, log_file, timeout, heart)


def _pump(
    run: Running, proc: Started, events: IO[bytes], log_file: LogFile, timeout: int | None, heart: Heartbeat
) -> None:
    assert proc.stdout is not None
    for f in (proc.stdout, events):
        os.set_blocking(f.fileno(), False)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "log")
    sel.register(events, selectors.EVENT_READ, "events")
    buffers = {"log": b"", "events": b""}
    out, writes = run.output, run.writes
    poll_s = TRIAL_EVERY_S if run.quick else STOP_POLL_S
    stopping = Stopping(run, proc, timeout, time.monotonic() + timeout if timeout else None, grace=run.grace(None))
    timers = [  # (what the loop does every so often, after reading and writing what came)
        *([Every(DISK_EVERY_S, lambda now: writes.reachable(run.measure))] if run.reports else []),
        Every(poll_s, stopping.poll),
    ]
    last_scan = time.monotonic()
    exited_at: float | None = None
    ended_strays_at: float | None = None
    with _exit_of(proc.pid) as exit_fd:
        while sel.get_map():
            heart.tick()
            ready = sel.select(poll_s)
            if ready and exited_at is None and proc.poll() is None:
                _linger(exit_fd, COALESCE_S)  # let more output gather (the pipes hold 64 KiB each meanwhile), but
                # not past the process's exit: what it wrote last is read at once, and its end recorded (issue 65)
            pipe = writes.pipeline()
            for key, _ in ready:
                chunk, eof = _drain(key.fd)
                if chunk:
                    *complete, buffers[key.data] = (buffers[key.data] + chunk).split(b"\n")
                    out.handle(key.data, complete, log_file, pipe)
                if eof:
                    sel.unregister(key.fileobj)
                    rest, buffers[key.data] = buffers[key.data], b""
                    if rest:
                        out.handle(key.data, [rest], log_file, pipe)
            out.drawing(buffers["log"], pipe)
            now = time.monotonic()
            scanned = out.reader is not None and now - last_scan >= SCAN_EVERY_S
            if scanned:  # (its points go in with this flush; what it read is marked read once they are in)
                out.scan(pipe)
                last_scan = now
            writes.flush(pipe)
            if scanned:
                out.reader.save()  # type: ignore[union-attr]
            if out.went_running and run.reports and writes.carry is None:  # (written: its notifications, for `any`)
                out.went_running = False
                writes.reachable(lambda: notify.enqueue(out.store.redis, out.store.get(out.job_id)))
            for timer in timers:
                timer.tick(now)
            stopping.escalate(now)
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            elif exited_at is not None and now - exited_at > EXIT_LINGER_S and sel.get_map():
                if ended_strays_at is None:
                    log.info("job %s: its process exited; ending what it left holding its output", run.job_id)
                    signal_group(proc.pid, signal.SIGKILL)
                    kill_marked(RUN_ID_ENV, run.run_id)
                    end_descendants(keep=frozenset({proc.pid}))
                    ended_strays_at = now
                elif now - ended_strays_at > EXIT_LINGER_S:  # something out of reach still holds them: stop reading
                    log.warning("job %s: its output is still held open; the attempt ends without it", run.job_id)
                    for key in list(sel.get_map().values()):
                        sel.unregister(key.fileobj)
    events.close()
    if out.reader is not None:
        pipe = writes.pipeline()
        out.scan(pipe)
        writes.flush(pipe)
        out.reader.save()
        out.reader.close()
    if stopping.termed_at is not None:
        signal_group(proc.pid, signal.SIGKILL)  # anything the trainer left in its group goes with it
