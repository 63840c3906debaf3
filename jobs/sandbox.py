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
password, which no job is given (jobs.launch.HIDDEN_ENV).

bubblewrap's own process ignores SIGTERM (so a stop reaches the job through its process group and the job's exit
status comes back through bubblewrap's); jobs.shim, the first process inside, gives the job SIGTERM's default
again, and stops it when the work-horse dies (its lifeline pipe closes), as a cancel would.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

from jobs.proc import python_module

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


def describe(mode: str, trusted: bool) -> str:
    """What `gpudeck up` and a worker say at start about how jobs are isolated."""
    why = missing(mode)
    if why is None:
        return "sandbox  bubblewrap: each job in its own PID and mount namespace, the service out of its sight"
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
    here = Path(__file__).resolve().parents[1]
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
    lifeline: int,
    env: dict[str, str],
    options_fd: int,
) -> tuple[list[str], list[str]]:
    """`argv` run by bubblewrap in a sandbox as the module's doc describes: `job_dir` (and `writable`) writable,
    `readable` (a dataset, a registered environment, a project's built one) read-only, `home` (GPUDECK_HOME) and
    the Redis socket's folder hidden; under jobs.shim, which stops the job when `lifeline` (an inherited pipe's
    read end) closes; with exactly `env`. Returns (the command line, bubblewrap's options): the options, `env`
    among them, are read from `options_fd` (`--args`), so no value shows in a process listing, and bubblewrap
    itself runs with the environment of BWRAP_ENV, not the job's (a job's LD_PRELOAD or LD_LIBRARY_PATH never
    reaches a process outside its sandbox)."""
    args = ["--unshare-pid", "--unshare-ipc"]
    args += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm"]
    for dev in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri")):
        args += ["--dev-bind", dev, dev]
    args += ["--tmpfs", "/tmp"]
    user_home = Path(os.path.expanduser("~"))
    if str(user_home) not in ("/", "") and user_home.is_dir():
        args += ["--tmpfs", str(user_home)]
    for path in runtime_paths():  # (again: the tmpfs above may have covered them)
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    for hidden in (home, _socket_dir(redis_url)):
        if hidden is not None and hidden.is_dir() and str(hidden) != "/" and not _under(hidden, home):
            args += ["--tmpfs", str(hidden)]
    for path in readable:
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    for path in writable:  # (an environment being built: the one folder under GPUDECK_HOME a build may write)
        args += ["--bind", str(path), str(path)]
    args += ["--bind", str(job_dir), str(job_dir), "--chdir", str(cwd), "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    command = [shutil.which("bwrap") or "bwrap", "--args", str(options_fd), "--"]
    return [*command, *python_module("jobs.shim", str(lifeline), "--"), *argv], args


BWRAP_ENV = ("PATH", "LANG", "LC_ALL")
"""The only variables bubblewrap itself runs with (the job's are set inside, by --setenv)."""
