"""jobs.run.proc.output_of, how the GPU sampler runs nvidia-smi and dmesg: its round must end in bounded time
whatever the tool leaves behind (a child holding its output, a hang)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from jobs.run import proc
from jobs.run.proc import output_of


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_child_left_holding_the_output_does_not_hold_the_caller(tmp_path):
    pid_file = tmp_path / "child"
    t0 = time.monotonic()
    out = output_of(["sh", "-c", f"echo 'GPU 0'; sleep 30 & echo $! > {pid_file}; exit 0"], timeout=10)
    assert out == "GPU 0\n" and time.monotonic() - t0 < 5  # (subprocess.run waits for the sleep's 30 s here)
    os.kill(int(pid_file.read_text()), 9)


def test_a_hang_is_cut_at_the_timeout_with_everything_it_started(tmp_path):
    pid_file = tmp_path / "child"
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        output_of(["sh", "-c", f"sleep 30 & echo $! > {pid_file}; sleep 30"], timeout=0.5)
    assert time.monotonic() - t0 < 5
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)  # its whole process group went


def test_a_failure_and_a_missing_tool_raise_as_subprocess_run_does():
    with pytest.raises(subprocess.CalledProcessError):
        output_of(["sh", "-c", "echo partial; exit 3"], timeout=10)
    with pytest.raises(OSError):
        output_of(["/nonexistent/nvidia-smi"], timeout=10)


FORKING = """
import os, signal, sys, threading, time
from jobs.run import proc
from jobs.run.proc import output_of

calls, done = 0, threading.Event()


def sampler():  # (the sampler's thread: a tool run after another)
    global calls
    for _ in range(300):
        output_of(["true"], timeout=10)
        calls += 1
    done.set()


horses = []
try:
    threading.Thread(target=sampler, daemon=True).start()
    while not done.is_set() and len(horses) < 300:
        with proc.SPAWNING:  # (as jobs.worker forks a work-horse)
            pid = os.fork()
            if pid == 0:  # a work-horse busy with a long job: it holds what it inherited until it exits
                time.sleep(60)
                os._exit(0)
        horses.append(pid)
    # every horse is still alive: the sampler's calls could only end if none of its pipes went to a horse
    if not done.wait(30):
        sys.exit(f"the sampler's thread is stuck after {calls} calls of 300 ({len(horses)} forks)")
finally:
    for pid in horses:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
"""


def test_a_work_horse_forked_meanwhile_does_not_hold_the_callers_round():
    """The worker forks work-horses (fork without exec: they keep a copy of every descriptor for their whole job)
    while its GPU sampler's thread runs nvidia-smi and dmesg. A fork between the Popen's exec-error pipe and the
    exec kept that pipe open in the work-horse, and the sampler's round waited for the job's end. (In a Python of
    its own, as small as a worker: 300 forks of a test process that has imported what other tests import cost
    30 CPU-s.)"""
    ran = subprocess.run([sys.executable, "-c", FORKING], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]


def test_a_work_horse_forked_under_the_lock_can_run_tools_itself():
    with proc.SPAWNING:  # (as jobs.worker forks a work-horse: the fork never comes back to this block in the child)
        pid = os.fork()
        if pid == 0:
            try:
                os._exit(0 if output_of(["echo", "ok"], timeout=5) == "ok\n" else 1)
            finally:
                os._exit(2)
    deadline = time.monotonic() + 30
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert done == (pid, 0)  # (it hung on its copy of the held lock)
