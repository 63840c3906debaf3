"""jobs.run.pump against a real Redis and a real process: the job's heartbeat goes on while the pump's loop is held
(a first read of event files, a loaded box), so a live work-horse never looks lost to the reaper."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from jobs.run import pump as pumping
from jobs.run.launch import LogFile
from jobs.store import JobStore


class HeldRun:
    """What pump() needs of an attempt; its first look for a stop holds the loop for `held_s`."""

    reports, quick, run_id = False, True, "test-run"  # (quick: it looks for a stop every 0.25 s)

    def __init__(self, redis, held_s: float):
        self.job_id = 7
        self.output = pumping.Output(JobStore(redis), self.job_id)
        self.writes = pumping.Writes(redis, self.job_id)
        self.held_s = held_s
        self.beats: list[float] = []
        self.looked = 0

    def beat(self) -> None:
        self.beats.append(time.monotonic())

    def measure(self) -> None: ...

    def stop_reason(self) -> str | None:
        self.looked += 1
        if self.looked == 1:
            time.sleep(self.held_s)
        return None

    def grace(self, reason: str | None) -> float:
        return 5.0

    def request_stop(self, reason: str) -> None: ...


def test_the_heartbeat_goes_on_while_the_loop_is_held_and_stops_with_the_pump(redis, tmp_path, monkeypatch):
    monkeypatch.setattr(pumping, "HEARTBEAT_EVERY_S", 0.2)
    run = HeldRun(redis, held_s=1.5)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('working', flush=True); time.sleep(2)"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    events_r, events_w = os.pipe()
    os.close(events_w)  # (no trainer events: a command's)
    events = os.fdopen(events_r, "rb")  # (the pump closes it)
    t0 = time.monotonic()
    with LogFile(tmp_path / "log.txt") as log_file:
        pumping.pump(run, proc, events, log_file, None)
    ended = time.monotonic()
    proc.wait()
    proc.stdout.close()  # type: ignore[union-attr]
    held = [b for b in run.beats if t0 + 0.6 <= b <= t0 + 1.6]  # (the loop is in its first stop look then)
    assert run.looked >= 2 and len(held) >= 3, (run.looked, [round(b - t0, 2) for b in run.beats])
    time.sleep(0.5)
    assert not [b for b in run.beats if b > ended]  # its beats end with the pump
    assert (tmp_path / "log.txt").read_text().strip() == "working"


def test_a_loop_stuck_past_its_limit_stops_the_heartbeat_and_says_where(redis, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(pumping, "HEARTBEAT_EVERY_S", 0.1)
    monkeypatch.setattr(pumping, "LOOP_STUCK_S", 1.0)  # (more than a round of the loop: 0.25 s select, 0.25 s more)
    run = HeldRun(redis, held_s=2.5)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"], stdout=subprocess.PIPE)
    events_r, events_w = os.pipe()
    os.close(events_w)
    t0 = time.monotonic()
    with LogFile(tmp_path / "log.txt") as log_file:
        pumping.pump(run, proc, os.fdopen(events_r, "rb"), log_file, None)
    proc.wait()
    proc.stdout.close()  # type: ignore[union-attr]
    late = [round(b - t0, 2) for b in run.beats if t0 + 1.6 <= b <= t0 + 2.6]  # (held from ~0.25 s to ~2.75 s)
    assert not late, late
    said = [r.getMessage() for r in caplog.records if "has not come round" in r.getMessage()]
    assert len(said) == 1 and "stop_reason" in said[0], said  # once, with the loop's stack
