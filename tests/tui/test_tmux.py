"""Smoke test: `gpudeck tui` in a real pseudo-terminal under tmux (80x24, no mouse), driven by keys."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import pytest
import requests

from jobs.run.proc import python_module
from tests.support.live import start_api, until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30).stdout


def screen_text(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def wait_for(session: str, words: str, timeout: float = 60.0) -> str:
    return until(
        lambda: words in (text := screen_text(session)) and text,
        timeout,
        lambda: f"{words!r} on screen:\n{screen_text(session)}",
    )


def test_tui_in_tmux_at_80x24(spawn, child_env, tmp_path):
    env = {**child_env, "GPUDECK_COMMAND_JOBS": "1"}
    url = start_api(spawn, env)
    spawn("worker", "--cpu", env=env)
    port = int(url.rsplit(":", 1)[1])
    job = requests.post(
        f"{url}/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic", "name": "smoke", "gpus": 2}, timeout=10
    ).json()
    session = f"gpudeck-smoke-{port}"
    env_line = " ".join(f"{k}='{v}'" for k, v in {"GPUDECK_API": url, "TERM": "xterm-256color"}.items())
    # Textual draws on stderr, so nothing is redirected; `; sleep` keeps a crash's traceback on the pane.
    command = f"env {env_line} {' '.join(python_module('tui.cli', 'tui'))}; echo EXITED $?; sleep 30"
    tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", command)
    try:
        text = wait_for(session, "smoke")
        assert "STATUS" in text and "queued" in text and str(job["id"]) in text
        assert "Quit" in text  # the footer of keys
        tmux("send-keys", "-t", session, "Enter")
        text = wait_for(session, "lenet on synthetic")  # the job screen, once its first answer is in
        assert f"job {job['id']}" in text and "queued" in text
        tmux("send-keys", "-t", session, "c")
        wait_for(session, "Cancel job")
        tmux("send-keys", "-t", session, "y")
        deadline = time.monotonic() + 30
        while requests.get(f"{url}/api/v1/jobs/{job['id']}", timeout=10).json()["status"] != "canceled":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        tmux("send-keys", "-t", session, "Escape")
        wait_for(session, "STATUS")  # back on the jobs screen (a lone ESC needs a moment to read as one)
        text = wait_for(session, "STATUS")
        for key in ("Open", "Select", "Filter", "Cancel", "New", "Quit"):  # the footer's keys fit 80 columns
            assert key in text, text
        tmux("send-keys", "-t", session, "?")
        wait_for(session, "Keys: jobs")  # gpudeck's keys for the jobs screen
        tmux("send-keys", "-t", session, "q")  # closes the keys
        wait_for(session, "STATUS")
        time.sleep(0.5)
        tmux("send-keys", "-t", session, "q")  # quits
        text = wait_for(session, "EXITED", 15)
        assert "EXITED 0" in text and "Traceback" not in text
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)

    # `gpudeck tui JOB` on a running job: its log follows on the real terminal; f stops following, G follows again.
    ticker = {"command": [sys.executable, "-c", TICKER], "gpus": 0, "name": "ticker"}
    running = requests.post(f"{url}/api/v1/jobs", json=ticker, timeout=10).json()["id"]
    command = f"env {env_line} {' '.join(python_module('tui.cli', 'tui', str(running)))}; echo EXITED $?; sleep 30"
    tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", command)
    try:
        wait_for(session, "running")
        first = until(lambda: last_tick(screen_text(session)), 60, "a tick line on screen")
        moved = until(lambda: (n := last_tick(screen_text(session))) and n >= first + 10 and n, 30, "the log following")
        newest = log_ticks(url, running)
        assert newest - moved <= 40, (moved, newest)  # the view's bottom is the log's end (a 1 s poll; a loaded box)
        tmux("send-keys", "-t", session, "f")  # follow off: the view stays where it is
        wait_for(session, "follow off")
        held = until(lambda: stable_tick(session), 10, "the view holding still")
        until(lambda: log_ticks(url, running) >= held + 6, 30, "the log growing")
        assert last_tick(screen_text(session)) == held
        tmux("send-keys", "-t", session, "G")  # the end, following again
        until(lambda: last_tick(screen_text(session)) >= held + 6, 30, "the view at the end again")
        assert "follow on" in screen_text(session)
    finally:
        requests.post(f"{url}/api/v1/jobs/{running}/cancel", timeout=10)
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


TICKER = "import time\nfor i in range(1, 100000):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.25)"
"""A job that prints a numbered line four times a second until it is canceled."""


def last_tick(text: str) -> int | None:
    """The number of the lowest `tick N` line on the screen."""
    ticks = re.findall(r"^tick (\d+)\s*$", text, re.M)
    return int(ticks[-1]) if ticks else None


def stable_tick(session: str) -> int | None:
    """The lowest tick on screen when two looks half a second apart agree (a scroll already asked for has
    landed), else None."""
    before = last_tick(screen_text(session))
    time.sleep(0.5)
    return before if before is not None and last_tick(screen_text(session)) == before else None


def log_ticks(url: str, job_id: int) -> int:
    """The number of the job's newest log line, from the API."""
    return last_tick(requests.get(f"{url}/api/v1/jobs/{job_id}/logs", timeout=10).text) or 0
