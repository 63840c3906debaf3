"""Smoke test: `gpudeck tui` in a real pseudo-terminal under tmux (80x24, no mouse), driven by keys."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import requests

from jobs.proc import python_module
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
    url = start_api(spawn, child_env)
    port = int(url.rsplit(":", 1)[1])
    job = requests.post(
        f"{url}/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic", "name": "smoke", "gpus": 2}, timeout=10
    ).json()
    session = f"gpudeck-smoke-{port}"
    env = " ".join(f"{k}='{v}'" for k, v in {"GPUDECK_API": url, "TERM": "xterm-256color"}.items())
    # Textual draws on stderr, so nothing is redirected; `; sleep` keeps a crash's traceback on the pane.
    command = f"env {env} {' '.join(python_module('tui.cli', 'tui'))}; echo EXITED $?; sleep 30"
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
        for key in ("Open", "Select", "Filter", "Cancel", "New job", "Quit"):  # the footer's keys fit 80 columns
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
