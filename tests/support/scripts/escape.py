"""What an attacker's job tries (issue 23): read other processes' environments, find the service's processes,
its Redis (socket and TCP listeners), its home, other jobs' dirs, the service user's home, and write outside its
own job dir. It prints one JSON report line (`ESCAPE {...}`) and exits 0: the test reads what it reached."""

import json
import os
import socket
from pathlib import Path

report: dict = {}
secrets = (b"REDIS_URL=", b"GPUDECK_TOKENS=", b"gpd_")
report["environ_leaks"] = []
pids = [p for p in os.listdir("/proc") if p.isdigit()]
report["pids_seen"] = len(pids)
report["service_processes"] = []
for pid in pids:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        continue
    if any(s in env for s in secrets):
        report["environ_leaks"].append(pid)
    if any(w in cmd for w in (b"redis-server", b"gunicorn", b"api.serve", b"jobs.cli", b" up ")):
        report["service_processes"].append(cmd.decode(errors="replace")[:80])
report["own_env_secrets"] = sorted(k for k in os.environ if k in ("REDIS_URL", "GPUDECK_TOKENS", "GPUDECK_TOKEN"))

home = Path(os.environ["STACK_HOME"])  # the test tells where the service keeps everything; an attacker would guess
report["home_files"] = sorted(  # every file of the service's home it can see (its own job dir aside)
    str(Path(here) / n) for here, _, names in os.walk(home) for n in names if not here.startswith(os.environ["JOB_DIR"])
)
report["redis_socket_reached"] = False
for sock in (home / "redis" / "redis.sock", Path(os.environ["STACK_SOCKET"])):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(2)
        s.connect(str(sock))
        s.sendall(b"PING\r\n")
        report["redis_socket_reached"] = report["redis_socket_reached"] or s.recv(16).startswith(b"+PONG")
    except OSError:
        pass
# every TCP listener of this host: which speak Redis, and whose config file they read
report["redis_on_tcp"] = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = Path(table).read_text().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        local, state = row.split()[1], row.split()[3]
        if state != "0A":  # LISTEN
            continue
        port = int(local.rsplit(":", 1)[1], 16)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"INFO server\r\n")
                answer = s.recv(65536)
        except OSError:
            continue
        if b"redis_version" in answer:
            conf = [line for line in answer.split(b"\r\n") if line.startswith(b"config_file:")]
            report["redis_on_tcp"].append((port, conf[0].decode().split(":", 1)[1] if conf else ""))
report["other_job_read"] = None
try:
    report["other_job_read"] = (home / "jobs" / os.environ["OTHER_JOB"] / "secret.txt").read_text()
except OSError as exc:
    report["other_job_error"] = type(exc).__name__
report["user_home_listing"] = sorted(os.listdir(os.path.expanduser("~")))
report["wrote"] = []
for target in (home / "pwned", Path("/etc/pwned"), Path(os.environ["PROJECT"]) / "pwned", Path("/tmp/pwned")):
    try:
        target.write_text("x")
        report["wrote"].append(str(target))
    except OSError:
        pass
(Path(os.environ["JOB_DIR"]) / "mine.txt").write_text("the job's own dir is writable")
print("ESCAPE " + json.dumps(report), flush=True)

import privilege  # noqa: E402, F401 (issue 37: what it tries with the powers it may have; its own report line)
