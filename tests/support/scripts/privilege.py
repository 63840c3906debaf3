"""What a hostile job tries with the powers it may have been left (issue 37): its capabilities, unmounting the
sandbox's covers (COVERS, colon-separated: the service's home, /tmp, the service user's home) and remounting `/`
read-write, reading /etc/shadow and a 0600 file of the service (SECRET_FILE), talking to a root-only unix socket
(ROOT_SOCKET), writing outside its dirs (WRITE_TARGETS, colon-separated), regaining root through a setuid binary.
And what it must still be able to do: write its job dir, /tmp and HOME. Prints one line, `PRIVILEGE {...}`."""

import ctypes
import json
import os
import socket
import subprocess
from pathlib import Path


def caps() -> dict:
    status = dict(line.split(":\t", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":\t" in line)
    return {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")}


def attempt(what) -> str | None:
    """None when `what()` succeeded, else why not."""
    try:
        what()
        return None
    except Exception as exc:  # noqa: BLE001 (any failure is the answer)
        return type(exc).__name__


def run(*argv: str) -> int:
    try:
        return subprocess.run(argv, capture_output=True, timeout=20).returncode
    except OSError:
        return 127


def connect(path: str) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    s.connect(path)
    s.sendall(b"hello\n")
    if not s.recv(16):
        raise ConnectionError("nothing answered")


def write(path: str) -> None:
    Path(path).write_text("pwned")


libc = ctypes.CDLL(None, use_errno=True)
report: dict = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(), **caps()}
covers = [c for c in os.environ.get("COVERS", "").split(":") if c]
report["umount_cli"] = {c: run("umount", "-l", c) for c in covers}
report["umount_syscall"] = {c: libc.umount2(c.encode(), 2) for c in covers}  # MNT_DETACH
report["remount_rw"] = run("mount", "-o", "remount,rw,bind", "/")
report["mount_tmpfs"] = run("mount", "-t", "tmpfs", "none", "/mnt")
report["home_after"] = sorted(os.listdir(covers[0]))[:20] if covers and os.path.isdir(covers[0]) else None
report["shadow"] = attempt(lambda: Path("/etc/shadow").read_bytes())
report["secret_file"] = attempt(lambda: Path(os.environ["SECRET_FILE"]).read_bytes())
report["root_socket"] = attempt(lambda: connect(os.environ["ROOT_SOCKET"]))
report["setuid_root"] = run("su", "-c", "true", "root")  # (no password is asked where it counts: rc says)
report["wrote_outside"] = [
    t for t in os.environ.get("WRITE_TARGETS", "").split(":") if t and attempt(lambda t=t: write(t)) is None
]
report["own"] = {
    "job_dir": attempt(lambda: write(os.path.join(os.environ["JOB_DIR"], "own.txt"))),
    "tmp": attempt(lambda: write("/tmp/own.txt")),
    "home": attempt(lambda: write(os.path.join(os.environ["HOME"], "mine.txt"))),
}
report["env"] = sorted(os.environ)
print("PRIVILEGE " + json.dumps(report), flush=True)
