"""`python -I -S .../jobs/run/shim.py FD USER ENV_FD -- ARGV…`: the first process of a job inside its sandbox
(jobs.run.sandbox).

It starts with a fixed environment (jobs.run.sandbox.SHIM_ENV), in isolated mode without `site` (no module search
path, `.pth` file, variable or folder of the job's: it is run by its file and imports only the standard library), and
reads the job's environment from ENV_FD (`NAME=VALUE` entries ended by NULs), which it closes: the job's PYTHONPATH,
LD_PRELOAD, PYTHONHOME… reach the job's own processes only, started after the drop below (issue 62 #1).

USER is `UID:GID` where the worker runs as root: the shim first becomes that user for good — every capability
dropped from the bounding set (bubblewrap left it CAP_SETPCAP for that), no supplementary group, real, effective
and saved ids all the job's, the inheritable and ambient sets emptied — and refuses to start the job (exit 126)
unless /proc says it has no capability left. `-`: it already runs as an unprivileged user (a user namespace).

bubblewrap ignores SIGTERM (so that it outlives a stop and hands on the job's exit status), and that disposition
would be inherited; the shim gives the job SIGTERM's default back, starts it in the same process group (a stop
is a SIGTERM to that group, from the work-horse), and waits for it. FD is the read end of the work-horse's
lifeline: when the work-horse dies (killed, crashed), the pipe reads end-of-file and the shim asks the job to
stop as a cancel does — SIGTERM, so a trainer checkpoints, then SIGKILL after GRACE_ENV seconds — so a job never
outlives the work-horse that answers for it. It exits with the job's status (a signal's death as 128 + N, which
bubblewrap passes on as it is).

It imports nothing but the standard library: it runs before anything of the job.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time

GRACE_ENV = "GPUDECK_STOP_GRACE"
"""Seconds the job has after SIGTERM (models.protocol's name for the trainer's own grace)."""


PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAP_VERSION_3 = 0x20080522
LAST_CAP = 63


def become(user: str) -> str | None:
    """Become `user` (`UID:GID`, or `-`: stay) with no capability in any set; why not, or None when done."""
    libc = ctypes.CDLL(None, use_errno=True)
    if user == "-":  # (a user namespace: what it holds there, as a warm sandbox's CAP_SYS_ADMIN, is dropped)
        header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
        libc.capset(header, (ctypes.c_uint32 * 6)())
    else:
        uid, gid = (int(x) for x in user.split(":"))
        for cap in range(LAST_CAP + 1):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # (EINVAL past the kernel's last capability: nothing to drop)
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        except OSError as exc:
            return f"cannot become uid {uid} gid {gid}: {exc}"
        header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
        libc.capset(header, (ctypes.c_uint32 * 6)())  # (the inheritable set, which setresuid leaves)
        if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
            return f"still uid {os.getresuid()} gid {os.getresgid()} groups {os.getgroups()}"
    status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    held = {k: v.strip() for k, v in status.items() if k.startswith("Cap") and int(v, 16)}
    if user != "-" and held:  # (in a user namespace the bounding set may stay full: it grants nothing there)
        return f"capabilities left: {held}"
    if int(status.get("CapEff", "0"), 16) or int(status.get("CapPrm", "0"), 16):
        return f"capabilities left: {held}"
    return None


def read_env(fd: int) -> dict[str, str]:
    """The job's environment from descriptor `fd` (closed here: the job does not inherit it)."""
    chunks = []
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 16):
            chunks.append(chunk)
    env = {}
    for entry in b"".join(chunks).split(b"\0"):
        name, sep, value = entry.decode("utf-8", "surrogateescape").partition("=")
        if sep and name:
            env[name] = value
    return env


def main(argv: list[str]) -> int:
    warm: list[str] = []
    if argv[3:4] == ["--warm"]:  # (FD USER ENV_FD --warm GO_FD FOLDER -- COMMAND…)
        warm, argv = argv[4:6], argv[:3] + argv[6:]
    try:
        fd, user, env_fd, sep, *command = argv
    except ValueError:
        sep, command = "", []
    if sep != "--" or not command or (warm and len(warm) != 2):
        print("usage: python -I -S shim.py FD USER ENV_FD [--warm GO_FD FOLDER] -- COMMAND…", file=sys.stderr)
        return 2
    env = read_env(int(env_fd))
    lifeline = int(fd)
    if warm:
        return _warm(int(warm[0]), warm[1], lifeline, user, env, command)
    why = become(user)
    if why is not None:
        print(f"gpudeck: the job was not started: its sandbox could not drop its privileges ({why})", file=sys.stderr)
        return 126
    try:
        job = subprocess.Popen(command, env=env, pass_fds=_inherited(lifeline), preexec_fn=_default_term)
    except OSError as exc:  # (not found, not executable: as a shell says it)
        print(f"gpudeck: {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return _wait(job, lifeline)


def _wait(job: subprocess.Popen[bytes], lifeline: int) -> int:
    """Wait for the job; stop it as a cancel would when the lifeline closes; its exit status."""
    os.set_blocking(lifeline, False)
    stopping_since: float | None = None
    grace = float(os.environ.get(GRACE_ENV) or 30) + 5
    watched = [lifeline, *_exit_of(job.pid)]  # (the job's end wakes the shim at once: its end is recorded sooner)
    while job.poll() is None:
        if stopping_since is None:
            ready, _, _ = select.select(watched, [], [], 0.5)
            if lifeline in ready and _closed(lifeline):  # the work-horse is gone: stop as a cancel would
                stopping_since = time.monotonic()
                _signal_group(signal.SIGTERM)
        elif time.monotonic() - stopping_since > grace:
            _signal_group(signal.SIGKILL)
            break
        else:
            time.sleep(0.2)
    code = job.wait()
    if stopping_since is not None:  # the work-horse, which ends what a job leaves, is gone: the shim does
        _end_the_rest()
    return 128 - code if code < 0 else code


MS_BIND = 4096
WARM_FD_ENV = "GPUDECK_WARM_FD"
"""Where the warm interpreter (jobs.run.warmpy) reads its job's line: the read end of the shim's own pipe."""


def _warm(go: int, folder: str, lifeline: int, user: str, env: dict[str, str], command: list[str]) -> int:
    """A warm interpreter's sandbox (jobs.run.warm): its first process keeps, until the job comes, the one privilege
    it needs then — to mount — while the interpreter runs as the job's user from its start. The job's line comes on
    `go` (from the work-horse, not the job); the shim mounts `folder` (the warm one, which the host renamed to the job
    dir) at the job dir's own path, drops every privilege (as `become`), and only then passes the line on. End of
    file on `go` or on the lifeline (the worker let it go) ends the interpreter with no job."""
    inner, line_w = os.pipe()
    env = {**env, WARM_FD_ENV: str(inner)}
    try:
        job = subprocess.Popen(command, env=env, pass_fds=(inner,), preexec_fn=lambda: _as_job(user))
    except OSError as exc:
        print(f"gpudeck: {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    os.close(inner)
    line = _job_line(go, lifeline, job.pid)
    os.close(go)
    if line is None:  # (no job: the interpreter reads end of file and exits)
        os.close(line_w)
        return _wait(job, lifeline)
    job_dir = json.loads(line)["job_dir"]
    why = _mount_job_dir(folder, job_dir) or become(user)
    if why is not None:
        print(f"gpudeck: the job was not started in its warm sandbox ({why})", file=sys.stderr)
        job.kill()
        job.wait()
        return 126
    os.write(line_w, line)
    os.close(line_w)
    return _wait(job, lifeline)


def _as_job(user: str) -> None:
    """In the warm interpreter's process, before it runs anything: the job's user, no privilege (else it exits)."""
    _default_term()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (as a cold job has it: RQ's work-horse ignores it, and starts it)
    why = become(user)
    if why is not None:
        os.write(2, f"gpudeck: the warm sandbox could not drop its privileges ({why})\n".encode())
        os._exit(126)


def _job_line(go: int, lifeline: int, pid: int) -> bytes | None:
    """The job's line from `go`; None at its end, the lifeline's, or the interpreter's."""
    raw = b""
    watched = [go, lifeline, *_exit_of(pid)]
    while not raw.endswith(b"\n"):
        ready, _, _ = select.select(watched, [], [], 0.5)
        if go in ready:
            chunk = os.read(go, 1 << 16)
            if not chunk:
                return None
            raw += chunk
        elif ready:  # (the lifeline closed, or the interpreter exited)
            return None
    return raw


def _mount_job_dir(folder: str, job_dir: str) -> str | None:
    """Bind `folder` at `job_dir` inside the sandbox (folders made in its own tmpfs); why not, or None."""
    if not os.path.isabs(job_dir) or os.path.normpath(job_dir) != job_dir:
        return f"not a job dir: {job_dir!r}"
    try:
        os.makedirs(job_dir, mode=0o755, exist_ok=True)
    except OSError as exc:
        return f"cannot make {job_dir}: {exc}"
    if os.path.realpath(job_dir) != job_dir:  # (nothing the interpreter made may redirect the mount)
        return f"{job_dir} is not a plain folder"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(folder.encode(), job_dir.encode(), None, MS_BIND, None) != 0:
        return f"cannot mount the job dir: {os.strerror(ctypes.get_errno())}"
    return None


def _exit_of(pid: int) -> list[int]:
    """A descriptor that becomes readable when process `pid` exits (a pidfd), or none where the kernel has no
    pidfd_open (Linux before 5.3): the shim then finds the job's end within its half-second poll."""
    try:
        return [os.pidfd_open(pid)]
    except (AttributeError, OSError):
        return []


def _end_the_rest(limit_s: float = 2.0) -> None:
    """SIGKILL every other process of the sandbox's PID namespace (what the job left outside its process group: a
    daemon that called setsid, a double fork), until none is left or `limit_s` passed. Only inside bubblewrap's
    namespace, whose PID 1 is bubblewrap's: outside it, this would be every process of the machine."""
    try:
        if b"bwrap" not in open("/proc/1/cmdline", "rb").read():
            return
    except OSError:
        return
    me = os.getpid()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def _inherited(lifeline: int) -> tuple[int, ...]:
    """The descriptors the job inherits as they were given to the shim (the trainer's events pipe), not the
    lifeline itself."""
    fds = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd != lifeline:
            try:
                os.fstat(fd)
                fds.append(fd)
            except OSError:
                pass
    return tuple(fds)


def _default_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _closed(fd: int) -> bool:
    try:
        return os.read(fd, 1) == b""
    except BlockingIOError:
        return False


def _signal_group(sig: int) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (the shim itself waits on)
    try:
        os.killpg(0, sig)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
