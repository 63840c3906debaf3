"""Several users on a live stack over real HTTP: the README's section run as written (tokens made with the CLI on
the server, a refusal, owners, the audit, a revoke), and GPU quotas with two workers pinned to two FAKE GPUs (a
fake nvidia-smi on PATH; none exist here): a user's second job waits while another user's job behind it runs,
and starts when the first ends."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from urllib.parse import urlparse

import pytest
import requests

from tests.support.live import FAKE_SMI, fake_nvidia_smi, start_api
from tests.support.readme import run_block

pytestmark = pytest.mark.slow

HOLD = {
    "command": [sys.executable, "-c", "import time\nwhile True: time.sleep(0.2)"],
    "gpus": 1,
}
"""A job that holds its GPU until it is canceled (no TensorFlow to import)."""


def test_the_readme_section_as_written(spawn, child_env, tmp_path):
    url = start_api(spawn, child_env)
    env = {**child_env, "GPUDECK_API": url, "PATH": f"{os.path.dirname(sys.executable)}:{child_env['PATH']}"}
    (tmp_path / "readme").mkdir()
    out = run_block("walkthrough-users", urlparse(url).port, tmp_path / "readme", env)
    listed, me, submitted = out[3], out[4], out[5]
    refused, bobs_list, mine, canceled, audit, revoked, after = out[6:]
    made = [(tmp_path / "readme" / f"{name}.token").read_text() for name in ("root", "alice", "bob")]
    assert all(m.strip().startswith("gpd_") and len(m.strip()) > 40 for m in made)  # the token alone on stdout
    assert [line.split()[:4] for line in listed.splitlines()[1:]] == [
        ["alice", "user", "1", "yes"],
        ["bob", "user", "-", "no"],
        ["root", "admin", "-", "yes"],
    ]
    assert "gpd_" not in listed and me.strip() == "alice, user; at most 1 GPU at once"
    assert submitted.strip() == "submitted job 1 (queued)"
    body = json.loads(refused)
    assert body["error"] == "forbidden" and body["details"]["rule"] == "owner_or_admin"
    assert "job 1 belongs to alice" in body["message"]
    assert bobs_list.splitlines()[0].split()[:3] == ["ID", "STATUS", "OWNER"]  # a user reads everybody's
    assert bobs_list.splitlines()[1].split()[:3] == ["1", "queued", "alice"]
    assert mine.splitlines()[1].split()[:3] == ["1", "queued", "alice"]
    assert "canceled" in canceled  # an admin may cancel anybody's job
    rows = [line.split() for line in audit.splitlines()[1:]]
    assert [r[2] for r in rows[:4]] == ["root", "bob", "alice", "server:" + rows[3][2].split(":", 1)[1]]
    assert [r[-2:] for r in rows[:3]] == [
        ["POST", "/api/v1/jobs/1/cancel"],
        ["POST", "/api/v1/jobs/1/cancel"],
        ["POST", "/api/v1/jobs"],
    ]
    assert [r[4] for r in rows[:3]] == ["200", "403", "201"]
    assert revoked.startswith("revoked bob") and after.strip() == "401"


def wait_for(what, check, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return found


def test_a_users_gpu_quota_holds_their_second_job_not_the_next_users(spawn, child_env, tmp_path, redis):
    from jobs import tokens

    alice = {"Authorization": f"Bearer {tokens.create(redis, 'alice', max_gpus=1)}"}
    bob = {"Authorization": f"Bearer {tokens.create(redis, 'bob')}"}
    fake_nvidia_smi(tmp_path / "bin", FAKE_SMI)
    env = {**child_env, "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}"}
    url = start_api(spawn, env)
    spawn("worker", "--gpus", "0", env=env)
    spawn("worker", "--gpus", "1", env=env)
    wait_for(
        "two workers",
        lambda: len(requests.get(f"{url}/api/v1/workers", headers=bob, timeout=10).json()["workers"]) == 2,
    )

    def job(i: int) -> dict:
        return requests.get(f"{url}/api/v1/jobs/{i}", headers=bob, timeout=10).json()

    def post(who: dict) -> int:
        resp = requests.post(f"{url}/api/v1/jobs", json=HOLD, headers=who, timeout=10)
        assert resp.status_code == 201, resp.text
        return resp.json()["id"]

    a1 = post(alice)
    wait_for("alice's first runs", lambda: job(a1)["status"] == "running")
    a2, b1 = post(alice), post(bob)  # alice's second is first in line, bob's behind it
    wait_for("bob's job runs", lambda: job(b1)["status"] == "running")
    held = wait_for("alice's second waits", lambda: (j := job(a2))["message"] and j)
    assert held["status"] == "queued" and held["message"] == "waiting: alice holds 1 of 1 GPU"
    gpus = requests.get(f"{url}/api/v1/gpus", headers=bob, timeout=10).json()["hosts"][0]["gpus"]
    assert sorted((g["held_by"]["owner"], g["held_by"]["job_id"]) for g in gpus) == [("alice", a1), ("bob", b1)]
    asyncio.run(_tui_shows_who_holds_what_and_cancels_hers(url, alice["Authorization"][7:], a1, a2, b1))
    assert job(b1)["status"] == "running"  # bob's: refused
    wait_for("alice's first ends", lambda: job(a1)["status"] == "canceled")
    started = wait_for("alice's second starts", lambda: (j := job(a2))["status"] == "running" and j, timeout=60)
    assert started["message"] is None and started["gpu_ids"] == job(a1)["gpu_ids"]  # on the GPU her first freed
    for i, who in ((a2, alice), (b1, bob)):
        requests.post(f"{url}/api/v1/jobs/{i}/cancel", headers=who, timeout=10)
    for i in (a2, b1):
        wait_for(f"job {i} ends", lambda i=i: job(i)["status"] == "canceled")


async def _tui_shows_who_holds_what_and_cancels_hers(url: str, token: str, a1: int, a2: int, b1: int) -> None:
    """The TUI of alice: the jobs table's OWNER column and the job that waits for her quota, the GPUs screen's
    HELD BY column; she selects her running job and bob's and cancels both: bob's is refused before the question
    (issue 67 #7), hers goes, and the job waiting for her quota is still queued meanwhile (the placers look every
    second)."""
    from textual.widgets import DataTable, Static

    from tests.support.pilot import on_screen, text_of, until
    from tui.app import GpudeckApp
    from tui.screens.dialogs import Confirm
    from tui.screens.gpus import GpusScreen
    from tui.screens.jobs import JobsScreen

    app = GpudeckApp(url, token=token)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one("#jobs", DataTable)
        await until(pilot, lambda: str(a2) in table.rows and "owner" in table.columns)
        assert [str(table.get_cell(str(i), "owner")) for i in (a1, a2, b1)] == ["alice", "alice", "bob"]
        assert str(table.get_cell(str(a2), "progress")) == "quota"
        await pilot.press("g")
        screen = await on_screen(pilot, app, GpusScreen)
        gpus = screen.query_one("#gpus", Static)
        await until(pilot, lambda: f"job {b1} · bob" in text_of(gpus))
        assert f"job {a1} · alice" in text_of(gpus) and "HELD BY" in text_of(gpus)
        await pilot.press("escape")
        jobs = await on_screen(pilot, app, JobsScreen)
        mine = {"Authorization": f"Bearer {token}"}
        assert requests.get(f"{url}/api/v1/jobs/{a2}", headers=mine, timeout=10).json()["status"] == "queued"
        jobs.selected = {a1, b1}
        await pilot.press("c")
        await on_screen(pilot, app, Confirm)
        await pilot.press("y")
        said = lambda: "\n".join(str(n.message) for n in app._notifications)  # noqa: E731
        refused = f"job {b1}: bob's, not yours to cancel"
        await until(pilot, lambda: f"canceling job {a1}" in said() and refused in said())
        assert jobs.selected == {b1}  # what was refused stays selected
