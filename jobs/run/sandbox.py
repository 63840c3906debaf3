"""Each attempt's process in a sandbox of its own (bubblewrap, Debian's `bubblewrap` package), so that a job —
a user's command above all — cannot see or reach the service:

- a PID namespace with its own /proc: no other process (the work-horse, the worker, Redis, the API, other jobs)
  is visible, so no environment but its own can be read; when the job's main process ends, the namespace's init
  ends and with it every process the job started, however it forked or whatever it dropped from its environment;
- a mount namespace: the whole system read-only, as it is for every user; GPUDECK_HOME (the Redis socket and
  its files, the token store, the sources, other jobs' dirs) and the Redis socket's folder hidden under empty
  tmpfs; the service user's home hidden too (its keys and credentials), an empty writable one instead; a
  private /tmp; the job's own dir read-write and its dataset read-only; the Python environments it runs with
  read-only; the GPUs' device nodes (/dev/nvidia*, /dev/dri) bound in, so CUDA works as outside.

The network is shared (the tasks of a multi-worker job talk to each other, scripts download): `gpudeck up`'s
Redis listens on a unix socket only, which the sandbox hides; a Redis on TCP (several hosts) must require a
password, which no job is given (jobs.run.launch.HIDDEN_ENV).

No privilege: where the worker runs as root, the job runs as GPUDECK_JOB_USER (`nobody` unless the operator names
a dedicated user): bubblewrap keeps only CAP_SETUID, CAP_SETGID and CAP_SETPCAP for jobs.run.shim, which drops every
capability (the bounding set too), every group, and becomes that user before anything of the job runs; the job's
dir (and an environment being built) is handed to that user first. Where the worker is not root, the job runs as
the worker's user in a user namespace with no capability. Either way `umount` and `mount` fail (no capability),
files of the service and of root (/etc/shadow, a 0600 file, a root-only socket) are out of reach by their
permissions, and nothing can gain a privilege back (no_new_privs: setuid binaries and file capabilities do not
apply). The job already runs in a session of its own, with no controlling terminal (the work-horse starts
bubblewrap with setsid), which is what bubblewrap's --new-session would give. Not --die-with-parent: it would
SIGKILL the job the moment its work-horse dies, where the shim's lifeline gives it SIGTERM first (a trainer saves
a checkpoint, and the retried job resumes from it), then SIGKILL after the grace: the job never outlives its
work-horse by more than that.

bubblewrap's own process ignores SIGTERM (so a stop reaches the job through its process group and the job's exit
status comes back through bubblewrap's); jobs.run.shim, the first process inside, gives the job SIGTERM's default
again, and stops it when the work-horse dies (its lifeline pipe closes), as a cancel would.
"""

from __future__ import annotations

import functools
import glob
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

from jobs.errors import ConfigError
from jobs.run.proc import SHIM_FILE

MODES = ("auto", "bwrap", "off")
"""GPUDECK_SANDBOX: auto (bubblewrap where it works), bwrap (required: a worker without it does not start), off."""

INSTALL_HINT = "install bubblewrap (apt-get install bubblewrap) where the workers run"


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why no sandbox can be made on this host, or None when bubblewrap works here (tried once per process)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bubblewrap is not installed: {INSTALL_HINT}"
    try:
        out = subprocess.run(
            [bwrap, "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not run here: {exc}"
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["no message"])[-1]
        return f"bubblewrap cannot make namespaces here ({why}): run the workers as root or allow user namespaces"
    return None


def missing(mode: str) -> str | None:
    """Why jobs run without a sandbox here under GPUDECK_SANDBOX=`mode`, or None when they run in one."""
    return "GPUDECK_SANDBOX=off" if mode == "off" else unavailable()


def active(mode: str) -> bool:
    """Whether jobs run sandboxed under GPUDECK_SANDBOX=`mode` on this host."""
    return missing(mode) is None


def command_refusal(mode: str, trusted: bool) -> str | None:
    """Why a named user's command may not run here (no sandbox, and the operator does not accept the risk with
    GPUDECK_COMMAND_JOBS=trusted), or None when it may. The one rule the API (at submission) and each worker (for
    workers on other hosts) apply."""
    why = missing(mode)
    return None if trusted else why


DEFAULT_JOB_USER = "nobody"
"""GPUDECK_JOB_USER's default: the user a job runs as where the worker is root."""


def job_user(name: str | None) -> tuple[int, int] | None:
    """The (uid, gid) a job runs as: GPUDECK_JOB_USER (a name, a uid or uid:gid) where this process is root, None
    where it is not (the job runs as this process's user, in a user namespace with no capability). ConfigError
    for an unknown user or root itself."""
    if os.geteuid() != 0:
        return None
    raw = (name or DEFAULT_JOB_USER).strip()
    uid_s, _, gid_s = raw.partition(":")
    try:
        entry = pwd.getpwuid(int(uid_s)) if uid_s.isdigit() else pwd.getpwnam(uid_s)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        if not uid_s.isdigit():
            raise ConfigError(f"GPUDECK_JOB_USER: no user {uid_s!r} on this host (useradd --system {uid_s})") from None
        uid, gid = int(uid_s), int(uid_s)
    if gid_s:
        if not gid_s.isdigit():
            raise ConfigError(f"GPUDECK_JOB_USER: the group must be a number (uid:gid), got {raw!r}")
        gid = int(gid_s)
    if uid == 0 or gid == 0:
        raise ConfigError(f"GPUDECK_JOB_USER must be an unprivileged user, not root ({raw!r})")
    return uid, gid


def hand_over(path: Path, user: tuple[int, int] | None) -> None:
    """Give `path` and everything in it to the job's user (links themselves, never what they point at), so the job
    may write there; nothing to do where jobs run as this process's own user."""
    if user is None or not path.exists():
        return
    uid, gid = user
    os.lchown(path, uid, gid)
    for here, dirs, names in os.walk(path):
        for n in dirs + names:
            p = os.path.join(here, n)
            st = os.lstat(p)
            if (st.st_uid, st.st_gid) != user:
                os.lchown(p, uid, gid)


def take_back(path: Path) -> None:
    """Give `path` and everything in it back to this process's user (an environment once built: no job may change
    it afterwards, and what the service writes there never goes through a link a job left)."""
    hand_over(path, (os.geteuid(), os.getegid()))


def describe(mode: str, trusted: bool, user: str | None = None) -> str:
    """What `gpudeck up` and a worker say at start about how jobs are isolated (and as whom they run)."""
    why = missing(mode)
    if why is None:
        try:
            ids = job_user(user)
        except ConfigError as exc:
            return f"sandbox  bubblewrap, but {exc}"
        who = (
            f"as uid {ids[0]} gid {ids[1]} (GPUDECK_JOB_USER), no capability"
            if ids is not None
            else f"as uid {os.geteuid()} in a user namespace, no capability"
        )
        return "sandbox  bubblewrap: each job in its own PID and mount namespace, the service out of its sight, " + who
    who = (
        "named users run commands anyway (GPUDECK_COMMAND_JOBS=trusted): a user who may run commands can act as the "
        "service"
        if trusted
        else "named users may not run commands (GPUDECK_COMMAND_JOBS=trusted accepts that risk)"
    )
    return f"sandbox  NONE ({why}); jobs run as the service itself; {who}"


def runtime_paths() -> list[Path]:
    """What the job's programs need to read: this Python (the worker's environment and the one it was made from)
    and the folder gpudeck's own packages are imported from (an editable install, a checkout)."""
    here = Path(__file__).resolve().parents[2]  # (jobs/run/sandbox.py: the folder that holds jobs/ and models/)
    assert (here / "models").is_dir() and (here / "jobs").is_dir(), here
    return [Path(sys.prefix), Path(sys.base_prefix), here]


def _socket_dir(redis_url: str | None) -> Path | None:
    parsed = urlparse(redis_url or "")
    if parsed.scheme == "unix" and parsed.path:
        return Path(parsed.path).parent
    return None


def _under(path: Path, parent: Path) -> bool:
    """Whether `path` lies strictly inside `parent` (hidden with it already)."""
    return path != parent and path.is_relative_to(parent)


def wrap(
    argv: list[str],
    *,
    cwd: Path,
    job_dir: Path,
    home: Path,
    redis_url: str | None = None,
    readable: list[Path] | tuple[Path, ...] = (),
    writable: list[Path] | tuple[Path, ...] = (),
    shared: list[Path] | tuple[Path, ...] = (),
    hidden: list[Path] | tuple[Path, ...] = (),
    lifeline: int,
    env_fd: int,
    options_fd: int,
    user: tuple[int, int] | None = None,
    status_fd: int | None = None,
    warm_go: tuple[int, Path] | None = None,
) -> tuple[list[str], list[str]]:
    """`argv` run by bubblewrap in a sandbox as the module's doc describes: `job_dir` (and `writable`, and `shared`:
    folders several jobs talk through, left their owner's) writable,
    `readable` (a dataset, a registered environment, a project's built one) read-only, `home` (GPUDECK_HOME), the
    Redis socket's folder and `hidden` (the folder of every GPU's MPS daemon, whose own `shared` pipes it sees)
    hidden; under jobs.run.shim, which stops the job when `lifeline` (an inherited pipe's
    read end) closes. Returns (the command line, bubblewrap's options), the options read from `options_fd`
    (`--args`). The job's environment is not among them: the shim (`python -I -S`, SHIM_ENV alone) reads it from
    `env_fd` (env_blob) and hands it to the job only after it dropped every privilege, so a job's PYTHONPATH,
    LD_PRELOAD or PYTHONHOME never reaches a process that still holds one (issue 62 #1), nor bubblewrap, which
    runs with BWRAP_ENV alone; no value shows in a process listing. `user`: the job's (uid, gid) where this
    process is root (job_user): the shim becomes that user, with no capability; None: a user namespace with no
    capability. `status_fd`:
    where bubblewrap writes its child's pid and, at the end, its exit code (`--json-status-fd`: a warm trainer's
    work-horse is not its parent and cannot wait for it). `warm_go`: (the descriptor a warm interpreter's job line
    comes on, its folder): the shim keeps CAP_SYS_ADMIN until then, to mount the folder at the job dir's own path
    (jobs.run.shim._warm); the interpreter never holds it."""
    args = ["--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL"]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    if user is not None:  # (what the shim needs to become the job's user; it drops these too)
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    else:
        args += ["--unshare-user"]
    if warm_go is not None:
        args += ["--cap-add", "CAP_SYS_ADMIN"]
    args += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm"]
    for dev in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri")):
        args += ["--dev-bind", dev, dev]
    covers: list[Path] = []

    def cover(path: Path, perms: str = "0755") -> None:
        covers.append(path)
        args.extend(["--perms", perms, "--tmpfs", str(path)])

    def bind(option: str, path: Path) -> None:
        """Bind `path` in place; the folders it needs inside a cover made as the host shows them to anyone
        (0755: bubblewrap would make them 0700, root's, where the job's user could not pass)."""
        for c in covers:
            if _under(path, c):
                for parent in reversed(path.relative_to(c).parents[:-1]):
                    args.extend(["--perms", "0755", "--dir", str(c / parent)])
        args.extend([option, str(path), str(path)])

    cover(Path("/tmp"), "1777")
    user_home = Path(os.path.expanduser("~"))
    if str(user_home) not in ("/", "") and user_home.is_dir():
        cover(user_home, "1777")  # (the job's HOME: empty, writable by it)
    for path in runtime_paths():  # (again: the tmpfs above may have covered them)
        if path.exists():
            bind("--ro-bind", path)
    for gone in (home, _socket_dir(redis_url), *hidden):
        if gone is not None and gone.is_dir() and str(gone) != "/" and not _under(gone, home):
            cover(gone)
    for path in readable:
        if path.exists():
            bind("--ro-bind", path)
    for path in writable:  # (an environment being built: the one folder under GPUDECK_HOME a build may write)
        bind("--bind", path)
    for path in shared:  # (a GPU's MPS pipes: the daemon's, which every job of that GPU talks to)
        if path.is_dir():
            bind("--bind", path)
    bind("--bind", job_dir)
    args += ["--chdir", str(cwd), "--clearenv"]
    for name, value in SHIM_ENV.items():
        args += ["--setenv", name, value]
    command = [shutil.which("bwrap") or "bwrap", "--args", str(options_fd), "--"]
    who = f"{user[0]}:{user[1]}" if user is not None else "-"
    warm = ["--warm", str(warm_go[0]), str(warm_go[1])] if warm_go is not None else []
    shim = [sys.executable, "-I", "-S", SHIM_FILE, str(lifeline), who, str(env_fd), *warm, "--"]
    return [*command, *shim, *argv], args


def env_blob(env: dict[str, str]) -> bytes:
    """A job's environment as the shim reads it from its descriptor: `NAME=VALUE` entries, each ended by a NUL."""
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items() if "=" not in k and "\0" not in k + v)


BWRAP_ENV = ("PATH", "LANG", "LC_ALL")
"""The only variables bubblewrap itself runs with (the job's go to the shim through a descriptor)."""
SHIM_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
"""The whole environment of the sandbox's first process (the shim), fixed: nothing of the job's."""
