"""Live processes in tests: gpudeck commands as children (stopped with everything below them), waiting for
them over HTTP, and the FAKE nvidia-smi that stands in for GPUs we do not have."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import requests

from jobs.redis_server import free_port
from models.states import ENDED


class Proc:
    """A child process of a test, stopped (and its group killed) at the end."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path):
        self.log = log
        self._out = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(argv, env=env, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self, timeout: float = 15.0, graceful: bool = True) -> int | None:
        """SIGTERM, then SIGKILL for it and everything below it (work-horses and trainers run in process
        groups of their own), so nothing of one test writes into the next test's Redis. Not `graceful`: SIGKILL
        at once (an API at a test's end: gunicorn's graceful stop takes half a second, and nothing is left to save
        but what Redis holds)."""
        family = descendants(self.proc.pid)
        if self.proc.poll() is None and not graceful:
            kill_tree(self.proc.pid)
            self.proc.wait()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                kill_tree(self.proc.pid)
                self.proc.wait()
        for pid in family | descendants(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._out.close()
        return self.proc.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_api(spawn, env: dict[str, str], port: int | None = None) -> str:
    """Start `gpudeck api` (on `port`, else a free one) with `env`; its base URL once /healthz answers. A free
    port can be taken between the look and the bind (by another test's API: its /healthz would answer for ours),
    so the URL is returned only once this process's gunicorn says it listens there; where it could not bind, it
    is started again on another free port."""
    for _ in range(3):
        chosen = port or free_port()
        proc = spawn("api", "--port", str(chosen), env=env)
        url = f"http://127.0.0.1:{chosen}"
        said = until(
            lambda: f"Listening at: {url} " in proc.output() or proc.proc.poll() is not None,  # noqa: B023
            60,
            f"the API listening at {url}",
        )
        if said and proc.proc.poll() is None:
            wait_http(f"{url}/healthz", proc)
            return url
        if port:
            break
    raise AssertionError(f"the API could not listen:\n{proc.output()[-3000:]}")


TINY = {"model": "lenet", "dataset": "synthetic:16x16x3", "params": {"steps": 3, "batch_size": 8}}
"""A job that trains in seconds."""


def submit_job(api: str, spec: dict) -> int:
    """POST /api/v1/jobs over HTTP; the new job's id (a 201 is required)."""
    resp = requests.post(f"{api}/api/v1/jobs", json=spec, timeout=10)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def wait_ended(api: str, job_id: int, timeout: int = 240) -> dict:
    """GET /api/v1/jobs/ID/wait until the job ends (or `timeout` s pass): the job as it is then."""
    return requests.get(f"{api}/api/v1/jobs/{job_id}/wait", params={"timeout": timeout}, timeout=timeout + 20).json()


def wait_succeeded(api: str, job_id: int) -> dict:
    """GET /api/v1/jobs/ID/wait until the job ends; it must have succeeded."""
    job = wait_ended(api, job_id)
    assert job["status"] == "succeeded", job
    return job


def wait_http(url: str, proc: Proc | None = None, timeout: float = 60.0) -> None:
    """Poll until `url` answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.proc.returncode}:\n{proc.output()[-3000:]}")
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout}s")


def until(check, timeout: float = 30.0, what: str = "condition", every: float = 0.1):
    """Call `check` until it returns something truthy, and return that; fail after `timeout` s naming `what`
    (a callable `what` is called for the message, e.g. to show the screen that lacked the words)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what() if callable(what) else what}: not met in {timeout}s")
        time.sleep(every)


def fake_nvidia_smi(bin_dir: Path, script_body: str) -> Path:
    """Put a FAKE nvidia-smi (we have no GPUs here) on a PATH dir: a shell script printing real-format output."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "nvidia-smi"
    path.write_text("#!/bin/sh\n# FAKE nvidia-smi for tests: prints what the real one prints.\n" + script_body)
    path.chmod(0o755)
    return path


def wait_job(client, job_id: int, until=lambda job: job["status"] in ENDED, timeout: float = 180.0):
    """Poll GET /api/v1/jobs/ID (Flask test client) as a user would; returns (job, statuses seen)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/api/v1/jobs/{job_id}").json
        if not seen or seen[-1] != job["status"]:
            seen.append(job["status"])
        if until(job):
            return job, seen
        time.sleep(0.1)  # (each look is a GET that costs the test process ~2 ms of CPU)
    raise AssertionError(f"job {job_id}: condition not met in {timeout}s; statuses seen {seen}")


def alive(pid: int) -> bool:
    """True while a process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cmdline(pid: int) -> bytes:
    """A process's command line (NUL-separated); empty when it is gone (or a zombie)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def parent(pid: int) -> int:
    """A process's parent pid; 0 when it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def environ(pid: int) -> dict[str, str]:
    """A process's environment; empty when it is gone or not ours to read."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def kill_tree(pid: int) -> None:
    """SIGKILL a process and everything below it. The tree is frozen first (SIGSTOP until a rescan finds
    nothing new), so a worker cannot fork a work-horse between the scan and the kill: such a horse runs in a
    process group of its own, would outlive its parent, and would write into the next test's Redis keys."""
    frozen: set[int] = set()
    while True:
        new = descendants(pid) - frozen
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        frozen |= new
    for p in [pid, *frozen]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children, work-horses, trainers in their own sessions)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


# Two H100s as the real tool prints them, with the trainers that run here listed on the GPU their job owns.
FAKE_SMI = r"""
case "$*" in
  *-L*) printf 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n' ;;
  *--query-gpu*) printf '0, GPU-aaaa, NVIDIA H100 80GB HBM3, 97, 1000, 81559, 55, 300.5, 700.00\n1, GPU-bbbb, NVIDIA H100 80GB HBM3, [N/A], 0, 81559, [N/A], [Not Supported], 700.00\n' ;;
  *--query-compute-apps*)
    # the trainers that really run here, as the real tool would list them on the GPU their job owns
    for pid in $(pgrep -f '^[^ ]*python[^ ]* (-P )?-m models.train'); do
      gpu=$(tr '\0' '\n' < /proc/$pid/environ | sed -n 's/^CUDA_VISIBLE_DEVICES=//p')
      if [ "$gpu" = 0 ]; then printf '%s, python3, 512, GPU-aaaa\n' "$pid"; fi
      if [ "$gpu" = 1 ]; then printf '%s, python3, 512, GPU-bbbb\n' "$pid"; fi
    done ;;
esac
exit 0  # as the real tool does after a successful query
"""


def fake_gpus(n: int) -> str:
    """The body of a FAKE nvidia-smi (none exist here): `n` idle H100s, no process on them."""
    listing = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:04d})\\n" for i in range(n))
    rows = "".join(f"{i}, GPU-{i:04d}, NVIDIA H100 80GB HBM3, 0, 0, 81559, 40, 70.0, 700.00\\n" for i in range(n))
    return (
        f"case \"$*\" in\n  *-L*) printf '{listing}' ;;\n  *pci.bus_id*) printf '{buses(n)}' ;;\n"
        f"  *driver_version*) printf '{DRIVER_LINE * n}' ;;\n"
        f"  *--query-gpu*) printf '{rows}' ;;\nesac\nexit 0\n"
    )


DRIVER_LINE = "550.54.15\\n"
"""What a FAKE nvidia-smi says of the driver, a line per GPU (`--query-gpu=driver_version`)."""


def buses(n: int) -> str:
    """The PCI addresses of `n` FAKE GPUs as `nvidia-smi --query-gpu=index,pci.bus_id` prints them: GPU i at bus
    0x10 + i (`0000:10:00` in the kernel's XID lines)."""
    return "".join(f"{i}, 00000000:{0x10 + i:02X}:00.0\\n" for i in range(n))


def fake_gpus_in_use(n: int) -> str:
    """The body of a FAKE nvidia-smi (none exist here): `n` H100s whose compute processes are the `sleep`
    processes that carry FAKE_GPU_MIB=N in their environment, each said to use N MiB of the GPU its
    CUDA_VISIBLE_DEVICES names; each GPU's memory.used is the sum of its processes'. A test's job says how much it
    "uses" by its env (`{"FAKE_GPU_MIB": "12288"}`) and `exec sleep`s."""
    listing = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:04d})\\n" for i in range(n))
    return f"""apps() {{
  for pid in $(pgrep -x sleep); do
    env=$(tr '\\0' '\\n' < /proc/$pid/environ 2>/dev/null) || continue
    mib=$(printf '%s\\n' "$env" | sed -n 's/^FAKE_GPU_MIB=//p')
    gpu=$(printf '%s\\n' "$env" | sed -n 's/^CUDA_VISIBLE_DEVICES=//p')
    [ -n "$mib" ] && [ -n "$gpu" ] && printf '%s, sleep, %s, GPU-%04d\\n' "$pid" "$mib" "$gpu"
  done
}}
case "$*" in
  *-L*) printf '{listing}' ;;
  *pci.bus_id*) printf '{buses(n)}' ;;
  *--query-gpu*)
    used=$(apps)
    i=0
    while [ $i -lt {n} ]; do
      mib=$(printf '%s\\n' "$used" | awk -F', ' -v u="GPU-$(printf %04d $i)" '$4 == u {{s += $3}} END {{print s + 0}}')
      printf '%s, GPU-%04d, NVIDIA H100 80GB HBM3, 0, %s, 81559, 40, 70.0, 700.00\\n' $i $i "$mib"
      i=$((i + 1))
    done ;;
  *--query-compute-apps*) apps ;;
esac
exit 0
"""


QUEUED = {"model": "lenet", "dataset": "synthetic:16x16x3", "params": {"steps": 3}}
"""Nothing runs it (no worker): its follows and waits stay open."""


def open_poll(port: int, path: str, source: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return sock


def status_of(sock: socket.socket) -> int:
    """The HTTP status a long poll answered with (a follow sends its headers at once; a 429 answers at once)."""
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(1024)
        assert chunk, f"closed after {head!r}"
        head += chunk
    return int(head.split()[1])


def on_a_terminal(
    argv: list[str], env: dict[str, str], limit_s: float = 120, on_output: Callable[[bytes], None] | None = None
) -> str:
    """What `argv` writes to a terminal (stdout and stderr both on a pseudo-terminal), until it exits;
    `on_output` is given all of it so far after each read (a test acts on what it sees)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out, deadline = b"", time.monotonic() + limit_s
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other side closed, it has exited
                break
            if not chunk:
                break
            out += chunk
            if on_output is not None:
                on_output(out)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    return out.decode(errors="replace")


def _a_terminals_child() -> None:
    """What a program started from a person's terminal has: the terminal as its controlling one, and SIGINT's default
    (a suite started in the background, as CI may start it, has SIGINT ignored, and children inherit that: Ctrl-C
    would do nothing)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Terminal:
    """A program on a pseudo-terminal of its own, driven as a person would: `expect` what it shows, `send` keys.
    Its output is read by a thread (so nothing it writes blocks on us)."""

    def __init__(self, argv: list[str], env: dict[str, str], rows: int = 30, cols: int = 120, cwd: Path | None = None):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(  # (its own session, the terminal its controlling one: Ctrl-C is SIGINT)
            argv,
            env=env,
            cwd=cwd,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=_a_terminals_child,
        )
        os.close(slave)
        self.out = b""
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every process on the terminal has closed it
                return
            if not chunk:
                return
            with self._lock:
                self.out += chunk

    @property
    def text(self) -> str:
        """What it showed, its terminal's control sequences (colours, bracketed paste, erasing) left out."""
        with self._lock:
            return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.out.decode(errors="replace"))

    def expect(self, pattern: str, timeout: float = 30.0, after: int = 0) -> re.Match[str]:
        """The first match of the regular expression `pattern` in what it showed (from character `after` on)."""
        return until(
            lambda: re.search(pattern, self.text[after:]),
            timeout,
            lambda: f"{pattern!r} on the terminal; it shows:\n{self.text[-3000:]}",
            every=0.02,
        )

    def send(self, keys: str) -> int:
        """Type `keys`; returns how much it had shown before (for `expect(..., after=)`)."""
        seen = len(self.text)
        os.write(self.master, keys.encode())
        return seen

    def wait(self, timeout: float = 30.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._reader.join(5)
        os.close(self.master)


@contextlib.contextmanager
def api_on(redis_url: str, home: Path) -> Iterator[str]:
    """An API process (`gpudeck api`, gunicorn) on a free port over `redis_url`, with none of this environment's
    GPUDECK_ settings: its URL once /healthz answers; stopped after (what the benchmarks of the TUI run against)."""
    from jobs.run.proc import python_module

    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDECK_")}
    env.update(REDIS_URL=redis_url, GPUDECK_HOME=str(home))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    api = subprocess.Popen(python_module("tui.cli", "api", "--port", str(port)), env=env, stdout=subprocess.DEVNULL)
    try:
        until(lambda: _answers(f"{url}/healthz"), 60, "the API")
        yield url
    finally:
        api.terminate()
        api.wait(15)


def _answers(url: str) -> bool:
    try:
        requests.get(url, timeout=1)
    except requests.RequestException:
        return False
    return True


def group_gone(pgid: int) -> bool:
    """Whether no process of the group is left (a warm process's bubblewrap, a worker's child, is reaped by its
    worker)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False
