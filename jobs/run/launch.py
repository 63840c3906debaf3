"""Launching one attempt's process, Redis-free: what the worker hands its work-horses (WorkerContext), the argv,
working dir and environment of a trainer or a command (Launch), the job's own copy of its source, a retried job's
checkpoints, and the process-level helpers (its log file, limits, signals, the kernel's OOM count).

Everything here reads and writes files and processes only, so it is tested without Redis or RQ
(tests/jobs/test_launch.py); jobs.run.runner drives it for an attempt."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from jobs import jobfiles, mps, objectstore, sources
from jobs.record import Kept
from jobs.redis_server import free_port
from jobs.run import sandbox
from jobs.run.proc import pdeathsig, python_module
from jobs.scalars import EVENT_FILE_MARK
from jobs.settings import Cache, Settings
from jobs.spec import shown
from models import protocol, sourcetree
from models.catalog import parse_dataset
from models.protocol import KEEP_CHECKPOINTS_ENV

log = logging.getLogger(__name__)

RUN_ID_ENV = "GPUDECK_RUN_ID"
"""Set in every trainer's and command's environment (the RQ id of the attempt or task): processes that carry it
are swept when the attempt ends, even those that left its process group."""
HIDDEN_ENV = ("GPUDECK_TOKENS", "GPUDECK_TOKEN", "REDIS_URL", "GPUDECK_WEBHOOKS", "GPUDECK_WEBHOOK_SECRETS")
"""The worker's own secrets and its Redis, handed to no job's process (whatever GPUDECK_PASS_ENV says)."""
PASSED_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
              KEEP_CHECKPOINTS_ENV)  # fmt: skip
PASSED_PREFIXES = ("LC_", "CUDA_", "NCCL_", "NVIDIA_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "ONEDNN_", "DNNL_", "TF_",
                   "XLA_", "SLURM_")  # fmt: skip
"""What of the worker's own environment a job gets (an allowlist: the locale, the time zone, what an operator sets for
GPUs and CPU math, and, on Slurm, the allocation's SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_NTASKS, SLURM_PROCID…,
which scripts use for scratch folders and logs); GPUDECK_PASS_ENV adds names. Everything else of the shell that ran
`gpudeck up` (an operator's HF_TOKEN, AWS_SECRET_ACCESS_KEY, GPUDECK_HOME…) stays out of jobs."""
BUILD_PREFIXES = ("UV_", "PIP_")
"""What an environment's build gets besides (the operator's package index)."""
UNSANDBOXED = (
    "this worker runs jobs without a sandbox ({why}), so a user's command could act as the service; it runs the "
    "commands of named users only where the operator accepts that (GPUDECK_COMMAND_JOBS=trusted)"
)
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
"""A write's errno when the disk (or the user's quota) is full."""


@dataclass
class WorkerContext:
    """What the worker process hands each of its work-horses, explicitly (jobs.worker passes it with the RQ job)."""

    settings: Settings
    name: str = ""
    gpu_ids: list[str] = field(default_factory=list)
    stop_grace_s: float = protocol.DEFAULT_GRACE_S
    max_memory: int | None = None
    warm: Any = None
    """A warm trainer (jobs.run.warm.Warm) the worker hands this work-horse for its zoo job, or None."""


class Refused(Exception):
    """A command job cannot start on this worker (its environment or its source is not here)."""


@dataclass
class Launch:
    """What an attempt runs: argv in `cwd` with `env`; `injected`: the variables gpudeck set for a command (shown
    in the job's record), `source`: a command's source copy."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    injected: dict[str, str] = field(default_factory=dict)
    source: Path | None = None
    sandboxed: bool = False
    files: tuple[Any, ...] = ()
    """What the process inherits beside its pipes (file objects or descriptors), closed here once it started."""

    def fds(self) -> tuple[int, ...]:
        return tuple(f if isinstance(f, int) else f.fileno() for f in self.files)

    def close_files(self) -> None:
        for f in self.files:
            os.close(f) if isinstance(f, int) else f.close()


@dataclass
class Attempt:
    """Who this attempt is: the job, its attempt number, its run mark and its job dir."""

    job_id: int
    attempt: int
    run_id: str
    job_dir: Path


SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
"""A variable whose name holds one of these (any case) passes by a prefix never (`TF_TOKEN_*`, `TF_VAR_db_password`,
`NVIDIA_API_KEY`): only where PASSED_ENV or GPUDECK_PASS_ENV name it whole (issue 62 #9)."""


def passed(name: str, extra: tuple[str, ...] = (), build: bool = False) -> bool:
    """Whether the worker's variable `name` reaches a job (PASSED_ENV, and `extra`: GPUDECK_PASS_ENV's names, a
    trailing `*` a prefix), or an environment's build (`build`). A prefix passes no name that looks secret
    (SECRET_WORDS); a name given whole does."""
    if name in HIDDEN_ENV:
        return False
    if name in PASSED_ENV or name in extra:
        return True
    if any(word in name.upper() for word in SECRET_WORDS):
        return False
    prefixes = PASSED_PREFIXES + (BUILD_PREFIXES if build else ()) + tuple(e[:-1] for e in extra if e.endswith("*"))
    return name.startswith(prefixes)


def base_env(attempt: Attempt, settings: Settings, build: bool = False) -> dict[str, str]:
    """The job's share of the worker's environment (`passed`), its HOME (the sandbox's empty one), marked with the
    job and the run id (what kill_marked sweeps at the end)."""
    env = {k: v for k, v in os.environ.items() if passed(k, settings.pass_env, build)}
    env["HOME"] = os.path.expanduser("~")  # (an empty tmpfs in the sandbox, the job's to write)
    env["PYTHONUNBUFFERED"] = "1"
    env[protocol.JOB_ID_ENV] = str(attempt.job_id)
    env[RUN_ID_ENV] = attempt.run_id
    return env


def torch_env(master_addr: str, master_port: int, nodes: int, node_rank: int) -> dict[str, str]:
    """What `torchrun --nnodes=$NNODES --node_rank=$NODE_RANK --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT`
    and a plain `torch.distributed.init_process_group()` (env://) read: one process per task (RANK = the task's
    index, WORLD_SIZE = the tasks; torchrun sets its own for the processes it starts)."""
    return {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(nodes),
        "RANK": str(node_rank),
        "NODE_RANK": str(node_rank),
        "NNODES": str(nodes),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }


@functools.lru_cache(maxsize=1)
def own_code_env() -> dict[str, str]:
    """What gpudeck's own processes in a sandbox (the trainer, a warm one, an environment's builder) need to import
    it: nothing where this Python finds it by itself (installed), else — a checkout on the service's PYTHONPATH,
    issue 68 §4 — PYTHONPATH naming the checkout, which the sandbox shows read-only (sandbox.runtime_paths): a
    job's allowlisted environment carries no PYTHONPATH of the service's."""
    root = os.path.realpath(sandbox.runtime_paths()[2])
    given = [os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": root} if root in given else {}


def trainer(ctx: WorkerContext, attempt: Attempt, events_w: int, extra_env: dict[str, str]) -> Launch:
    """`python -m models.train` in the job dir, writing its events to `events_w` (models.protocol)."""
    env = base_env(attempt, ctx.settings)
    env.update(own_code_env())
    env[protocol.EVENTS_FD_ENV] = str(events_w)
    env[protocol.STOP_GRACE_ENV] = str(protocol.trainer_grace(ctx.stop_grace_s))
    env["CUDA_VISIBLE_DEVICES"] = ",".join(ctx.gpu_ids)  # every GPU of the job's place
    env.update(extra_env)
    return Launch(python_module("models.train", *TRAINER_ARGS), attempt.job_dir, env)


TRAINER_ARGS = ("--spec", "spec.json", "--job-dir", ".")
"""What a trainer is told, in its job dir (a warm one gets them with its job: jobs.run.warm)."""


def command(
    ctx: WorkerContext,
    attempt: Attempt,
    spec: Kept,
    data_dir: Path | None,
    extra_env: dict[str, str],
    built: Path | None = None,
) -> Launch:
    """A command job's `/bin/sh -c COMMAND` in its own source copy, with the variables of the README's table; none
    of the worker's secrets. Refused when its environment or source is not on this worker. `built`: the project's
    own environment (jobs.run.pyenv), whose python comes first."""
    env = base_env(attempt, ctx.settings)
    src = source_copy(ctx, spec, attempt.job_dir)
    bin_dir = Path(sys.executable).parent  # `python` is the worker's own, with TensorFlow
    if built is not None:
        bin_dir = built / "bin"
        env["VIRTUAL_ENV"] = str(built)
    elif spec.env_name:
        found = ctx.settings.env_python(spec.env_name)
        if found is None or not found.is_dir():
            raise Refused(
                f"environment {spec.env_name!r} is not registered on worker {ctx.name} "
                f"(GPUDECK_ENVS there: {', '.join(n for n, _ in ctx.settings.envs) or 'none'})"
            )
        bin_dir = found
        env["VIRTUAL_ENV"] = str(found.parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    if not (bin_dir / "python").exists() and (bin_dir / "python3").exists():  # (Debian's /usr: python3 alone)
        own = attempt.job_dir / ".gpudeck-bin"
        fd = jobfiles.make_dirs(attempt.job_dir, own.name)  # (no link an earlier attempt left is followed)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink("python", dir_fd=fd)
            os.symlink(bin_dir / "python3", "python", dir_fd=fd)
        finally:
            os.close(fd)
        env["PATH"] = f"{own}{os.pathsep}{env['PATH']}"
    job_dir = attempt.job_dir
    injected = {
        "GPUDECK_JOB_ID": str(attempt.job_id),
        "BUILD_ID": str(attempt.job_id),
        "GPUDECK_ATTEMPT": str(attempt.attempt),
        RUN_ID_ENV: attempt.run_id,
        "JOB_DIR": str(job_dir),
        "TRAINING_DIR": str(job_dir),
        "TENSORBOARD_DIR": str(job_dir / "tensorboard"),
        "SRC_DIR": str(src),
        "GPU_COUNT": str(len(ctx.gpu_ids)),
        "CUDA_VISIBLE_DEVICES": ",".join(ctx.gpu_ids),  # the GPUs of the job's place, not only its worker's
        "PYTHONUNBUFFERED": "1",
    }
    if data_dir is not None:
        injected["DATA_DIR"] = str(data_dir)
    for cache in caches_of(ctx.settings, spec):  # (the operator's shared caches the job names: at their path)
        injected[cache.name] = str(cache.path)
    injected.update(torch_env("127.0.0.1", free_port(), 1, 0))  # (a job of one task: its own master)
    injected.update(extra_env)  # a task's TF_CONFIG, GPUDECK_TASK_TYPE, GPUDECK_TASK_INDEX and torch's
    env.update(injected)
    env.update(spec.env)
    env.update(spec.secret_env)
    cmd = spec.command or []
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    return Launch(argv, src, env, injected, src)


def caches_of(settings: Settings, spec: Kept) -> list[Cache]:
    """The operator's shared caches (GPUDECK_CACHES) a job names in `caches`."""
    named = spec.caches
    return [c for c in settings.caches if c.name in named]


def sandbox_notes(settings: Settings, spec: Kept, job_dir: Path) -> list[str]:
    """What the job's log says at its start of a host path its `env` names that its sandbox hides or shows read-only
    (a cache a tool then cannot write fails later with words that say nothing of permissions)."""
    if not sandbox.active(settings.sandbox):
        return []
    shared = {c.path: c.writable for c in caches_of(settings, spec)}
    hidden = [Path("/tmp"), Path(os.path.expanduser("~")), settings.home]
    notes = []
    for name, value in spec.env.items():
        path = Path(value) if isinstance(value, str) and value.startswith("/") else None
        if path is None or not path.exists() or path == job_dir or path.is_relative_to(job_dir):
            continue
        if any(path == p or path.is_relative_to(p) for p, w in shared.items() if w):
            continue
        seen = "read-only"
        if not any(path == p or path.is_relative_to(p) for p in shared) and any(
            path == h or path.is_relative_to(h) for h in hidden if str(h) not in ("", "/")
        ):
            seen = "hidden (an empty folder, or missing)"
        offered = ", ".join(f"{c.name}{' (rw)' if c.writable else ''}" for c in settings.caches) or "none"
        notes.append(
            f"gpudeck: {name}={value} is {seen} inside the job's sandbox: a tool that writes there fails or falls back "
            f"to an empty folder. The operator shares host caches with GPUDECK_CACHES (NAME=/path[:rw]) and a job "
            f"names them in `caches`; this server shares: {offered}"
        )
    return notes


def sandboxed(
    ctx: WorkerContext,
    how: Launch,
    job_dir: Path,
    readable: list[Path],
    lifeline: int,
    writable: tuple[Path, ...] | list[Path] = (),
    status_fd: int | None = None,
    warm_go: tuple[int, Path] | None = None,
) -> Launch:
    """`how` run in a sandbox of its own (jobs.run.sandbox) where this worker makes one; else as it is. `lifeline`:
    the read end of a pipe whose write end the work-horse holds (the job is stopped when it closes); `status_fd`:
    bubblewrap's exit status goes there too (sandbox.wrap)."""
    if not sandbox.active(ctx.settings.sandbox):
        return how
    s = ctx.settings
    readable = [*readable, *(path for _, path in s.envs)]
    user = sandbox.job_user(s.job_user)
    for path in (job_dir, *writable):  # (what the job may write is its user's)
        sandbox.hand_over(path, user)
    options = tempfile.TemporaryFile()  # noqa: SIM115 (its descriptor outlives this call: the runner closes it)
    env_file = tempfile.TemporaryFile()  # noqa: SIM115 (the job's environment, for the shim: the same)
    pipes = how.env.get("CUDA_MPS_PIPE_DIRECTORY")  # (its GPU's MPS daemon: the sandbox's /tmp is its own)
    caches = [c for c in s.caches if (how.injected or {}).get(c.name) == str(c.path)]  # (those it named: command())
    readable = [*readable, *(c.path for c in caches if not c.writable)]
    argv, args = sandbox.wrap(
        how.argv,
        cwd=how.cwd,
        job_dir=job_dir,
        home=s.home,
        redis_url=s.redis_url,
        readable=readable,
        writable=writable,
        shared=([Path(pipes)] if pipes else []) + [c.path for c in caches if c.writable],
        hidden=[mps.out_of_sight(s)],  # (every GPU's daemon but its own's pipes; a CPU job's: all of them)
        lifeline=lifeline,
        env_fd=env_file.fileno(),
        options_fd=options.fileno(),
        user=user,
        status_fd=status_fd,
        warm_go=warm_go,
    )
    options.write(b"".join(a.encode() + b"\0" for a in args))
    options.seek(0)
    env_file.write(sandbox.env_blob(how.env))
    env_file.seek(0)
    outside = {k: v for k, v in os.environ.items() if k in sandbox.BWRAP_ENV}
    files = (options, env_file, lifeline)
    return Launch(argv, how.cwd, outside, how.injected, how.source, sandboxed=True, files=files)


def spawn(how: Launch, max_memory: int | None, fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """Start what `how` runs: its output one pipe, its own process group (a stop signals the whole tree), a
    sandbox's options and lifeline (and `fds`) passed, the memory cap and the parent-death signal set."""
    return subprocess.Popen(
        how.argv,
        cwd=how.cwd,
        env=how.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        pass_fds=how.fds() + fds,
        start_new_session=True,
        preexec_fn=preexec(max_memory, how.sandboxed),
    )


def may_run_unsandboxed(ctx: WorkerContext, owner: str | None) -> None:
    """Refused: a named user's command where no sandbox can be made, unless the operator trusts them (the API
    refuses such a job at submission; this is the worker's own check, for workers on other hosts)."""
    why = sandbox.command_refusal(ctx.settings.sandbox, ctx.settings.command_jobs_trusted)
    if owner is not None and why is not None:
        raise Refused(UNSANDBOXED.format(why=why))


def source_copy(ctx: WorkerContext, spec: Kept, job_dir: Path) -> Path:
    """`$JOB_DIR/src`: this job's own writable copy of its source snapshot (kept for a later attempt)."""
    src = job_dir / "src"
    if jobfiles.clear_unless_folder(src):  # (a link or a file in its place: removed, never followed)
        return src
    if not spec.source:
        src.mkdir(exist_ok=True)  # another task of the job on this host may make it at the same moment
        return src
    sha = sourcetree.parse_ref(spec.source) or ""
    stored = sources.local_path(ctx.settings, sha)
    if not stored.is_dir():
        raise Refused(
            f"source {spec.source} is not under {ctx.settings.sources_dir} on worker {ctx.name} "
            "(workers on other hosts need the API's GPUDECK_HOME on shared storage)"
        )
    tmp = job_dir / f".src-{os.getpid()}"
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


UNFINISHED = ("_temp",)
"""What a resumed job's copy leaves out of a checkpoints folder: saves cut short (`ckpt-300_temp…`)."""


def take_checkpoints(settings: Settings, job_dir: Path, resumes: int | None, own: int | None = None) -> str | None:
    """A model job resumes from the last complete checkpoint: its own earlier attempt's (in its job dir, else, on a
    host without it, in the artifact store: `own`, the job's id on an attempt after the first), else the job it
    retries (`resumes`: linked, or copied across filesystems, from that job's dir, else fetched from the store)
    into this job's checkpoints/, which the trainer resumes from. The log line that says so, or None."""
    mine = "checkpoints"  # (every file of either job dir reached through no link: jobs.jobfiles)
    jobfiles.clear_unless_folder(job_dir / mine)  # (a link or a file an earlier attempt left there: removed)
    if jobfiles.is_file(job_dir, f"{mine}/checkpoint"):
        return None  # an earlier attempt of this job saved its own
    store = objectstore.Store.of(settings.artifacts)
    try:
        if store is not None and own:
            got = _fetched(store, own, job_dir)
            if got:
                return f"gpudeck: resuming from {got}, which an earlier attempt left in the artifact store ({store})"
        if not resumes:
            return None
        theirs = settings.job_dir(int(resumes))
        if jobfiles.is_file(theirs, f"{mine}/checkpoint"):  # linked where it can be: the trainer only replaces files
            jobfiles.copy_tree(theirs, mine, job_dir, mine, link=True, leave=UNFINISHED)
            return f"gpudeck: resuming from the last checkpoint of job {resumes}"
        got = _fetched(store, int(resumes), job_dir) if store is not None else None
        if got:
            return f"gpudeck: resuming from the last checkpoint of job {resumes} ({got}, from the artifact store)"
    except objectstore.StoreError as exc:
        return f"gpudeck: the artifact store could not be read ({exc}); training from the start"
    return f"gpudeck: job {resumes} left no checkpoint here; training from the start"


def _fetched(store: objectstore.Store, job_id: int, job_dir: Path) -> str | None:
    """Job `job_id`'s newest checkpoint from the store into `job_dir`'s checkpoints/: fetched into a folder of the
    service's beside the job dirs, then copied in through no link; nothing half fetched is resumed from."""
    job_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{job_dir.name}.fetch-", dir=job_dir.parent))
    try:
        got = objectstore.fetch_checkpoints(store, job_id, staging)
        if got:
            jobfiles.copy_tree(staging, "", job_dir, "checkpoints", link=True)
        return got
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def newest_checkpoint(job_dir: Path) -> int | None:
    """The step of the newest complete checkpoint in a job dir (what a zoo job resumes from), or None."""
    try:
        text = jobfiles.read_text(job_dir, "checkpoints/checkpoint", 1 << 20)
    except OSError:
        return None
    found = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.M)
    return int(found.group(1)) if found else None


def shipped_event_files(src: Path) -> set[str]:
    """Event files that came with the source: not this job's curves."""
    return {f"src/{n}" for n in sourcetree.files(src) if EVENT_FILE_MARK in n}


def write_new(path: Path, text: str) -> None:
    """Write `path` anew through a file of its own, renamed over it: in a job dir, which the job's user owns,
    no link an earlier attempt left there is followed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "w") as f:
        f.write(text)
    os.replace(tmp, path)


class LogFile:
    """An attempt's log.txt. A full disk stops neither the job nor its log in Redis: a write that finds no space
    is dropped (noted once, in `full`), and a job that then fails ends as disk_full."""

    def __init__(self, path: Path):
        if path.is_symlink():  # (the job's user owns its dir: what an earlier attempt left is never followed)
            path.unlink()
        self.file = os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644), "ab", 0)
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


def preexec(max_memory: int | None, sandboxed: bool = False):
    """What runs in the child before it execs: SIGTERM when the work-horse dies (so no trainer outlives it: it
    checkpoints and exits), and the memory cap. `sandboxed`: bubblewrap ignores SIGTERM (the job, which gets its
    default back, is the one to act on a stop; bubblewrap then hands on its exit status)."""

    def run() -> None:
        pdeathsig()
        if sandboxed:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if max_memory:
            import resource

            resource.setrlimit(resource.RLIMIT_DATA, (max_memory, max_memory))

    return run


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


class Descriptors:
    """The file descriptors an attempt opens, each closed once: by the code that is done with it (`close`), by
    whoever it is handed to (`release`), else when the attempt leaves the `with`."""

    def __init__(self) -> None:
        self.open: set[int] = set()

    def pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self.open |= {r, w}
        return r, w

    def close(self, fd: int) -> None:
        if fd in self.open:
            self.open.discard(fd)
            os.close(fd)

    def release(self, fd: int) -> int:
        self.open.discard(fd)
        return fd

    def reader(self, fd: int) -> IO[bytes]:
        """The read end `fd` as a file, which closes it (no longer ours to close)."""
        return os.fdopen(self.release(fd), "rb")

    def started(self, how: Launch, *theirs: int, lifeline: int) -> None:
        """What `how` runs has started: our copies of what it was handed (`theirs`) close, and its sandbox's files
        (its options); the lifeline's read end is the sandbox's alone now (without a sandbox nobody reads it)."""
        for fd in theirs:
            self.close(fd)
        how.close_files()
        if how.sandboxed:
            self.release(lifeline)
        else:
            self.close(lifeline)

    def __enter__(self) -> Descriptors:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in sorted(self.open):
            self.close(fd)


def job_dir_made(job_dir: Path, spec: Kept, data_dir: Path | None) -> LogFile:
    """The attempt's job dir with its spec.json (a zoo job's as its trainer reads it; a command's as shown, its
    variables by name only: every user may read a job dir's files) and its log file (OSError: the disk is full)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    written = trainer_spec(spec, data_dir) if not spec.runs_code else shown(spec.raw, names_only=True)
    write_new(job_dir / "spec.json", json.dumps(written, indent=2) + "\n")
    return LogFile(job_dir / "log.txt")


def exit_status(returncode: int, sandboxed: bool) -> int:
    """The attempt's exit status as Popen says it, -N for signal N: a sandbox (bubblewrap, the shim) says 128 + N."""
    return 128 - returncode if sandboxed and 128 < returncode <= 128 + 64 else returncode


def trainer_spec(spec: Kept, data_dir: Path | None) -> dict[str, Any]:
    """The spec a trainer reads (its job dir's spec.json): an uploaded dataset's folder on this host filled in."""
    if spec.command is not None or spec.dataset is None or parse_dataset(spec.dataset).kind != "stored":
        return spec.raw
    return dict(spec.raw, dataset_path=str(data_dir))
