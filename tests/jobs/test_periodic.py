"""jobs.periodic: a helper thread whose round never comes back is said in the log, with where it is stuck (the
GPU sampler's samples would otherwise just expire, and nothing would say why)."""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
import threading
import time

from jobs.periodic import FORK_GUARD, Periodic, Watch


class Blocking(Periodic):
    what, every_s, stuck_s = "blocking helper", 0.05, 60.0

    def __init__(self, redis_url: str):
        super().__init__(redis_url, "blocking")
        self.release = threading.Event()
        self.rounds = 0

    def round(self) -> None:
        self.rounds += 1
        if self.rounds == 2:
            self.release.wait(30)  # (a tool that never answers)


def test_a_stuck_round_is_said_once_with_its_stack_and_a_round_that_comes_back_is_not(redis_url, redis, caplog):
    helper = Blocking(redis_url)
    watch = Watch(redis_url, [helper])
    caplog.set_level(logging.WARNING, logger="jobs.periodic")
    helper.start()
    try:
        deadline = time.monotonic() + 10
        while helper.rounds < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        watch.once()
        assert not caplog.records  # (stuck for less than its stuck_s yet)
        helper.stuck_s = 0.0  # (as if its 60 s had passed)
        watch.once()
        watch.once()
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1, said
        assert "blocking helper: a round has not come back" in said[0] and "self.release.wait(30)" in said[0]
    finally:
        helper.release.set()
        helper.stopped.set()
        helper.join(5)
    caplog.clear()
    watch.once()
    assert not caplog.records and helper.round_since is None


class Importing(Periodic):
    """A helper whose round imports a module that takes a while (as the searcher's first round imports Optuna)."""

    what, every_s, forks_wait = "importing helper", 60.0, True

    def __init__(self, redis_url: str, module: str):
        super().__init__(redis_url, "importing")
        self.module = module

    def round(self) -> None:
        importlib.import_module(self.module)


def test_a_fork_waits_for_a_helpers_import_so_the_child_never_inherits_its_module_lock(redis_url, redis, tmp_path):
    started = tmp_path / "started"
    (tmp_path / "slow_module_for_fork_test.py").write_text(
        f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(1.0)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        helper = Importing(redis_url, "slow_module_for_fork_test")
        threading.Thread(target=helper.once, daemon=True).start()
        deadline = time.monotonic() + 10
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert started.exists()  # the helper is inside the import now
        with FORK_GUARD:  # (as the worker forks a work-horse)
            pid = os.fork()
            if pid == 0:  # the work-horse: its own import of that module
                importlib.import_module("slow_module_for_fork_test")
                os._exit(0)
        deadline = time.monotonic() + 15
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if done[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        assert done[0] == pid and done[1] == 0  # (without the guard it hangs on the module's lock for good)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("slow_module_for_fork_test", None)


HANGS = """
import sys, threading, time
from jobs.periodic import Beating, say_where_if_stuck

def waits_on_a_lock_nobody_lets_go(lock):
    lock.acquire()  # (as a work-horse on a lock a thread of its worker held when it forked)

say_where_if_stuck(0.5)
lock = threading.Lock()
lock.acquire()
if sys.argv[1] == "beats":
    with Beating(lambda: None, 0.1):
        time.sleep(1.5)
else:
    threading.Thread(target=waits_on_a_lock_nobody_lets_go, args=(lock,), daemon=True).start()
    time.sleep(1.5)
"""


def test_a_work_horse_that_hangs_before_its_attempt_beats_says_where_in_the_worker_log():
    """jobs.worker arms say_where_if_stuck in each work-horse of a job: one that has not begun to beat after
    STARTING_S (a hang seen once: the reaper called the job lost, its worker waited on it, the log said nothing)
    prints every thread's stack to its stderr, the worker's log; one whose attempt beats prints nothing."""
    hung = subprocess.run([sys.executable, "-c", HANGS, "hangs"], capture_output=True, text=True, timeout=60)
    assert "Timeout (0:00:00.5" in hung.stderr, hung.stderr
    assert "line 6 in waits_on_a_lock_nobody_lets_go" in hung.stderr, hung.stderr
    beating = subprocess.run([sys.executable, "-c", HANGS, "beats"], capture_output=True, text=True, timeout=60)
    assert beating.returncode == 0 and beating.stderr == "", beating.stderr
