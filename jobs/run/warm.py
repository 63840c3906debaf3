"""Warm starts: a zoo trainer made ahead of time by an idle worker, handed to the work-horse of the next zoo job.

A cold zoo job spends its first seconds importing TensorFlow, Keras and the zoo in a fresh process. A worker that
has run a zoo job (in the last GPUDECK_WARM_MAX_AGE) keeps one `python -m models.warm` ready instead: started
as every trainer is (its own sandbox, the job user, the worker's allowlisted environment), with no GPU visible
(`CUDA_VISIBLE_DEVICES` empty) and nothing touched, in a folder of its own under `$GPUDECK_HOME/warm/`. Its
life:

1. The worker starts it (`start`), keeping the parent ends of its pipes: its output, its events, its job line
   (`go`), its lifeline, bubblewrap's status.
2. The worker forks the work-horse of a zoo job with it (`WorkerContext.warm`) when it is alive, younger than
   GPUDECK_WARM_MAX_AGE and made from the code on disk now (`code_version`: an upgrade lets it go); the worker
   closes its own ends at once (the work-horse holds them now) and starts the next.
3. The work-horse (jobs.run.runner) uses it when the job can (`unusable`: not a command, not a task of several,
   its dataset in the warm sandbox's sight, no MPS pipe to bind): the job dir's files move into the warm folder,
   which is renamed to the job dir (the sandbox's bind follows the folder: the trainer writes the job dir); the
   job's environment and arguments go down `go`; the trainer takes them and trains (models.warm). The work-horse
   watches it as its own (`Adopted`): output, events, stops to its process group, and its exit status from
   bubblewrap's `--json-status-fd` (it is the worker's child, not the work-horse's). A job that cannot use it lets
   it go and starts cold.
4. One job, then it exits. Closing its `go` and lifeline (a worker stopping, a stale one let go, a work-horse that
   did not use it) ends it; the worker reaps it and removes its folder if it is still there.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from redis import Redis

from jobs import usage
from jobs.keys import WARM_READY_KEY
from jobs.periodic import Periodic
from jobs.record import Kept
from jobs.run import launch, sandbox, warmpy
from jobs.run.launch import Attempt, Launch, WorkerContext
from jobs.run.proc import python_module
from jobs.run.warmwant import (  # noqa: F401 (re-exported: their home before warmwant)
    RECORD_NAME,
    WARMPY_FILE,
    Invocation,
    PythonWant,
    note_python,
    plain_file,
    python_invocation,
    read_at_start,
    recorded_imports,
    want_of,
    wanted,
)
from models.protocol import EVENTS_FD_ENV
from models.warm import WARM_FD_ENV

log = logging.getLogger(__name__)

KILLED = 128 + signal.SIGKILL
"""The status an adopted trainer gets when bubblewrap went without saying its child's (killed with its group)."""


def code_version() -> str:
    """A digest of the trainer's code on disk (models/ and the shim: names, sizes, modification times): a warm
    trainer made before an upgrade has another."""
    root = sandbox.runtime_paths()[-1]
    h = hashlib.sha256()
    ours = [root / "jobs" / "run" / "shim.py", root / "jobs" / "run" / "warmpy.py"]
    for path in sorted([*(root / "models").rglob("*.py"), *ours]):
        try:
            st = path.stat()
        except OSError:
            continue
        h.update(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


@dataclass
class Warm:
    """One warm trainer and the parent ends of its pipes (in the worker, then in the work-horse it is handed to)."""

    proc: subprocess.Popen[bytes]
    folder: Path
    run_id: str
    version: str
    events_inside: int
    """The descriptor number its events go to, as the trainer sees it."""
    go: int
    lifeline: int
    status: int
    events: int
    readable: list[Path] = field(default_factory=list)
    want: PythonWant | None = None
    """A warm interpreter's environment (jobs.run.warmpy); None: a zoo trainer (models.warm)."""
    born: float = field(default_factory=time.time)
    returncode: int | None = None
    _said: bytes = b""

    def alive(self) -> bool:
        """In the worker (its parent): whether it still runs."""
        return self.proc.poll() is None

    def stale(self, max_age_s: float) -> str | None:
        """Why it must be let go before it serves a job, or None."""
        if not self.alive():
            return f"it exited ({self.proc.returncode})"
        if time.time() - self.born > max_age_s:
            return f"it is older than {max_age_s:.0f}s (GPUDECK_WARM_MAX_AGE)"
        if self.version != code_version():
            return "the trainer's code changed since it was made"
        return None

    def close(self) -> None:
        """Close this process's ends of its pipes. Where nobody else holds them, that lets it go: its job line and
        its lifeline end, and it exits."""
        for fd in (self.go, self.lifeline, self.status, self.events):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def reap(self) -> bool:
        """In the worker: True once it exited (reaped), its folder removed if no job took it."""
        if self.alive():
            return False
        shutil.rmtree(self.folder, ignore_errors=True)
        return True

    # -- in the work-horse -----------------------------------------------------------------------
    def unusable(self, command: bool, tasks: bool, data_dir: Path | None, env: dict[str, str]) -> str | None:
        """Why the work-horse's job cannot start in it (it then starts cold), or None (a command job's is weighed
        again once its launch is planned: unusable_command)."""
        if command != (self.want is not None):
            return "a command job" if command else "a zoo job (the warm process here is a Python interpreter)"
        if tasks:
            return "a task of a job of several workers"
        if env.get("CUDA_MPS_PIPE_DIRECTORY"):
            return "its GPU's MPS pipes are bound into a sandbox at its start"
        if data_dir is not None and not any(data_dir.resolve().is_relative_to(r) for r in self.readable):
            return f"its dataset {data_dir} was not in the warm sandbox's sight"
        if self.exit_status() is not None:  # (bubblewrap said it ended: it went meanwhile)
            return "it exited"
        return None

    def unusable_command(
        self, how: Launch, inv: Invocation | str, want: PythonWant | str, data_dir: Path | None
    ) -> str | None:
        """Why a command job, as `how` would start cold, cannot start in this warm interpreter (`inv`: its command as
        Python would run it, `want`: the interpreter it needs, each else why there is none: warmwant), or None."""
        if isinstance(inv, str) or isinstance(want, str):
            return inv if isinstance(inv, str) else str(want)
        assert self.want is not None
        if want.python != self.want.python or want.readable != self.want.readable:
            return f"the warm interpreter is another environment's ({self.want.python})"
        if (want.owner, want.env) != (self.want.owner, self.want.env):
            return "the warm interpreter was made for jobs with other variables (its env), or another user's"
        read = sorted(k for k in {*how.env, *self.want.start_vars} if read_at_start(k))
        differ = [k for k in read if how.env.get(k) != self.want.start_vars.get(k)]
        if differ:
            return f"its environment sets {', '.join(differ)}, which Python reads as it starts"
        if inv.argv[0] != "-m" and not plain_file(how.cwd / inv.argv[0]):
            return f"its script {inv.argv[0]} is not a plain file of its source"
        return self.unusable(True, False, data_dir, how.env)

    def begin_command(self, how: Launch, spec: Kept, job_dir: Path, user: tuple[int, int] | None) -> Adopted:
        """Hand a command job to this warm interpreter (jobs.run.warmpy): the job dir becomes its folder, mounted at
        the job dir's path inside by its shim; then its environment, cwd and arguments go down `go`."""
        inv = python_invocation(spec.command)
        assert isinstance(inv, Invocation)
        self._move_in(job_dir)
        sandbox.hand_over(job_dir, user)
        env = dict(how.env)
        if isinstance(spec.command, str):  # (run cold by `/bin/sh -c`, which exports its cwd as PWD)
            env["PWD"] = str(how.cwd)
        line = {
            "job_dir": str(job_dir),
            "env": env,
            "cwd": str(how.cwd),
            "argv": inv.argv,
            "orig_argv": [inv.word, *inv.flags, *inv.argv],
            "record": str(job_dir / RECORD_NAME),
        }
        _write_all(self.go, json.dumps(line).encode() + b"\n")
        os.close(self.go)
        self.go = -1
        return Adopted(self)

    def exit_status(self) -> int | None:
        """In the work-horse (not its parent): its exit status as bubblewrap writes it to the status pipe (after the
        line with its child's pid), KILLED when bubblewrap went without a word; None while it runs."""
        while self.returncode is None and _readable_now(self.status):
            chunk = os.read(self.status, 4096)
            if not chunk:  # (bubblewrap went without a word: killed with its group)
                self.returncode = KILLED
                break
            self._said += chunk
            *lines, self._said = self._said.split(b"\n")
            for line in lines:
                said = json.loads(line or b"{}")
                if "exit-code" in said:
                    self.returncode = int(said["exit-code"])
        return self.returncode

    def begin(self, env: dict[str, str], argv: list[str], job_dir: Path, user: tuple[int, int] | None) -> Adopted:
        """Hand it the job: the job dir becomes its folder, its environment and arguments go down `go`.
        OSError (the files stay where they were) when the job dir cannot become its folder."""
        self._move_in(job_dir)
        sandbox.hand_over(job_dir, user)
        sent = {k: v for k, v in env.items() if k != EVENTS_FD_ENV}
        os.write(self.go, json.dumps({"env": sent, "argv": argv}).encode() + b"\n")
        os.close(self.go)
        self.go = -1
        return Adopted(self)

    def _move_in(self, job_dir: Path) -> None:
        """Move the job dir's files (its spec, log, a retry's checkpoints) into the warm folder, then rename the folder
        to the job dir; on a failure, put back what moved."""
        if os.stat(self.folder).st_dev != os.stat(job_dir).st_dev:
            raise OSError(errno.EXDEV, "the warm folder and the job dir are on different filesystems")
        moved: list[str] = []
        try:
            for _ in range(3):  # (something may write into the job dir meanwhile: move again)
                for name in os.listdir(job_dir):
                    os.rename(job_dir / name, self.folder / name)
                    moved.append(name)
                try:
                    os.rmdir(job_dir)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
            os.rename(self.folder, job_dir)
        except OSError:
            job_dir.mkdir(exist_ok=True)
            for name in moved:
                try:
                    os.rename(self.folder / name, job_dir / name)
                except OSError:
                    log.exception("warm start: could not put %s back into %s", name, job_dir)
            raise


class Adopted:
    """A warm trainer a work-horse was handed, watched as a Popen it started (jobs.run.proc.Started): its process
    group leads with bubblewrap's pid; its exit status is what bubblewrap writes to the status pipe."""

    def __init__(self, warm: Warm):
        self.warm = warm
        self.pid = warm.proc.pid
        self.stdout: IO[bytes] | None = warm.proc.stdout

    @property
    def returncode(self) -> int | None:
        return self.warm.returncode

    def poll(self) -> int | None:
        return self.warm.exit_status()

    def wait(self) -> int:
        while (code := self.poll()) is None:
            select.select([self.warm.status], [], [], 1.0)
        return code

    def events(self) -> IO[bytes]:
        """Its events pipe, for the pump (which closes it)."""
        fd, self.warm.events = self.warm.events, -1
        return os.fdopen(fd, "rb")

    def close(self) -> None:
        """The attempt is over: its lifeline and status closed here."""
        self.warm.close()


def _readable_now(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def choose_warm(
    warm: Warm | None, job_id: int, command: bool, tasks: bool, data_dir: Path | None, env: dict[str, str]
) -> Warm | None:
    """`warm` (the trainer the worker handed a work-horse) where the attempt can start in it, else None (the caller
    lets it go: the attempt starts cold; the log says why)."""
    if warm is None:
        return None
    why = warm.unusable(command, tasks, data_dir, env)
    if why is not None:
        log.info("job %s starts cold: the warm trainer cannot serve it (%s)", job_id, why)
        return None
    return warm


def taken(
    ctx: WorkerContext, job_id: int, command: bool, tasks: bool, data_dir: Path | None, env: dict[str, str]
) -> tuple[WorkerContext, Warm | None]:
    """(the context, the warm trainer the attempt starts in): the one the worker handed its work-horse where the
    attempt can start in it (its run mark is then the warm trainer's: what the end of the attempt sweeps); else it
    is let go (the attempt starts cold)."""
    warm = choose_warm(ctx.warm, job_id, command, tasks, data_dir, env)
    return (ctx, warm) if warm is not None else (let_go(ctx), None)


def let_go(ctx: WorkerContext) -> WorkerContext:
    """The context without its warm trainer, which is closed (the attempt starts cold)."""
    if ctx.warm is not None:
        ctx.warm.close()
    return replace(ctx, warm=None)


def start(ctx: WorkerContext) -> Warm | None:
    """Start a warm trainer for this worker (its parent): `python -m models.warm` in a sandbox as every trainer's,
    its events going to the trainer; None where it cannot (no sandbox here: GPUDECK_WARM needs one; or the start
    failed, logged)."""
    datasets = ctx.settings.datasets_dir
    readable = [datasets] if datasets.is_dir() else []

    def boxed(attempt: Attempt, events_w: int, go_r: int, life_r: int, status_w: int) -> tuple[Launch, tuple]:
        how = launch.trainer(ctx, attempt, events_w, {WARM_FD_ENV: str(go_r), "CUDA_VISIBLE_DEVICES": ""})
        how = replace(how, argv=python_module("models.warm"))
        return launch.sandboxed(ctx, how, attempt.job_dir, readable, life_r, status_fd=status_w), (events_w, go_r)

    return _made(ctx, "trainer", "", boxed, readable, None)


def start_python(ctx: WorkerContext, want: PythonWant) -> Warm | None:
    """Start a warm interpreter of `want` for this worker (its parent): the environment's Python running
    jobs.run.warmpy in a sandbox as a command's (the job's user, the worker's allowlisted variables, no GPU), whose
    shim mounts the job dir when it comes; no events pipe reaches it (a command sends none: its pump reads end of
    file). None where it cannot (no sandbox; a failed start, logged)."""
    readable = [Path(r) for r in want.readable]

    def boxed(attempt: Attempt, events_w: int, go_r: int, life_r: int, status_w: int) -> tuple[Launch, tuple]:
        env = launch.base_env(attempt, ctx.settings)
        env.update(want.start_vars)
        env.update(want.env)  # (its jobs' own variables, as a cold one has them when it imports: never a secret)
        env.update({"PATH": want.path, "CUDA_VISIBLE_DEVICES": "", warmpy.IMPORTS_ENV: ",".join(want.imports)})
        if want.venv:
            env["VIRTUAL_ENV"] = want.venv
        folder = attempt.job_dir
        how = launch.Launch([want.python, WARMPY_FILE], folder, env)
        inside = launch.sandboxed(ctx, how, folder, readable, life_r, status_fd=status_w, warm_go=(go_r, folder))
        return inside, (go_r,)

    return _made(ctx, "interpreter", "py-", boxed, readable, want)


Boxed = Callable[[Attempt, int, int, int, int], tuple[Launch, tuple]]
"""What a warm process runs, sandboxed, given its attempt and its ends of the pipes (events, go, lifeline,
bubblewrap's status), and which of those ends it inherits beside bubblewrap's status."""


def _made(
    ctx: WorkerContext, what: str, tag: str, boxed: Boxed, readable: list[Path], want: PythonWant | None
) -> Warm | None:
    """Start a warm `what` (trainer, interpreter) as `boxed` says, in a folder of its own under GPUDECK_HOME/warm,
    keeping the parent ends of its pipes; None where no sandbox is made here, or it failed to start (logged, its
    folder and pipes gone)."""
    s = ctx.settings
    if not sandbox.active(s.sandbox):
        return None
    token = uuid.uuid4().hex[:12]
    folder = s.home / "warm" / f"{socket.gethostname()}-{os.getpid()}-{tag}{token}"
    opened: list[int] = []

    def pipe() -> tuple[int, int]:
        r, w = os.pipe()
        opened.extend((r, w))
        return r, w

    try:
        folder.mkdir(parents=True, mode=0o755)
        (events_r, events_w), (go_r, go_w), (life_r, life_w), (status_r, status_w) = pipe(), pipe(), pipe(), pipe()
        attempt = Attempt(0, 0, f"warm-{ctx.name}.{token}", folder)
        how, inherited = boxed(attempt, events_w, go_r, life_r, status_w)
        try:
            proc = launch.spawn(how, ctx.max_memory, (*inherited, status_w))
        finally:
            how.close_files()  # (its options, and the lifeline's read end: the sandbox's now)
            opened.remove(life_r)
        for fd in (events_w, go_r, status_w):  # (the child's ends: its own now, or, not inherited, closed)
            os.close(fd)
            opened.remove(fd)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("worker %s: no warm %s (%s); its jobs start cold", ctx.name, what, exc)
        for fd in opened:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    log.info("worker %s: warm %s pid %s made ready in %s", ctx.name, what, proc.pid, folder)
    return Warm(
        proc,
        folder,
        attempt.run_id,
        code_version(),
        events_inside=events_w,
        go=go_w,
        lifeline=life_w,
        status=status_r,
        events=events_r,
        readable=[p.resolve() for p in readable],
        want=want,
    )


def warm_wanted(spec: Kept) -> bool:
    """Whether a job of this spec may start warm, as the worker sees it before forking its work-horse: a zoo job of
    one worker, or a command of one that runs a Python script or module (the work-horse checks the rest:
    `Warm.unusable`, `Warm.unusable_command`)."""
    if spec.workers != 1 or spec.is_session:
        return False
    return not spec.runs_code or isinstance(python_invocation(spec.command), Invocation)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


REPORT_EVERY_S = 5.0
"""How often a worker says what its warm trainer holds (Report)."""
REPORT_FRESH_S = 30.0
"""A report older than this is a worker's that is gone: not counted."""


class Report(Periodic):
    """In each worker: its warm trainer's processes and their resident memory, what warm costs (issue 65 #4), for
    /metrics, the workers' list and `gpudeck doctor` (WARM_READY_KEY); nothing when it keeps none."""

    what, every_s = "warm report", REPORT_EVERY_S

    def __init__(self, redis_url: str, worker: str, held: Callable[[], Warm | None]):
        super().__init__(redis_url, "gpudeck-warm-report")
        self.worker, self.held = worker, held

    def round(self) -> None:
        w = self.held()
        if w is None or not w.alive():
            self.redis.hdel(WARM_READY_KEY, self.worker)
            return
        kind = "interpreter" if w.want is not None else "trainer"
        said = {"pid": w.proc.pid, "rss_bytes": usage.tree_rss(w.proc.pid), "since": w.born, "at": time.time()}
        self.redis.hset(WARM_READY_KEY, self.worker, json.dumps({**said, "kind": kind}))

    def closing(self) -> None:
        self.redis.hdel(WARM_READY_KEY, self.worker)


def ready(redis: Redis) -> dict[str, dict[str, Any]]:
    """Each worker's warm process as its worker last said (Report): pid, rss_bytes, since, kind; fresh reports
    only."""
    out = {}
    for name, raw in redis.hgetall(WARM_READY_KEY).items():
        said = json.loads(raw)
        if time.time() - float(said.pop("at", 0)) <= REPORT_FRESH_S:
            out[name.decode()] = said
    return out
