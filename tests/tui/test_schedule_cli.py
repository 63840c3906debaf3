"""Issue 69 #3: the README's "Schedules" commands, run as written against a real API process (whose Timetable
fires schedules even with no worker: their jobs wait in line); then a schedule that fires every second, made with
the CLI, makes a job that says which schedule and firing made it, and skips the next firings while it waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests

from tests.support.live import start_api, until
from tests.support.readme import run_block

pytestmark = pytest.mark.slow  # (a real API process: make test runs it, make check does not)


def test_the_readme_makes_a_schedule_and_a_schedule_fires(spawn, child_env, tmp_path):
    url = start_api(spawn, child_env)
    env = {**child_env, "GPUDECK_API": url, "PATH": f"{os.path.dirname(sys.executable)}:{child_env['PATH']}"}
    _, made, listed, paused, resumed, shown, gone = run_block("schedules", int(url.rsplit(":", 1)[1]), tmp_path, env)
    assert made.startswith("schedule nightly: a job at each firing of '0 2 * * *' (Europe/Berlin); next firing 20")
    head, row = listed.splitlines()[:2]
    assert head.split()[:4] == ["NAME", "CRON", "TZ", "NEXT"] and row.split()[0] == "nightly"
    assert "Europe/Berlin" in row and "skip" in row
    assert paused.strip() == "schedule nightly: paused"
    assert resumed.startswith("schedule nightly: next firing ") and resumed.strip().endswith(":00:00.000Z")
    assert "overlap skip, catch-up none" in shown and "fired 0 times" in shown
    assert gone.strip() == "schedule nightly deleted"
    assert requests.get(f"{url}/api/v1/schedules/nightly", timeout=10).status_code == 404

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["gpudeck", *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False
        )

    bad = cli("schedule", "create", "x", "--cron", "61 * * * *", "--", "nightly.json")
    assert bad.returncode == 2 and "cron" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    # every second; its job asks for 2 GPUs on a box with no worker: it waits, and the next firings skip
    (tmp_path / "smoke.json").write_text(json.dumps({"model": "lenet", "dataset": "synthetic", "gpus": 2}))
    assert cli("schedule", "create", "smoke", "--cron", "* * * * * *", "--", "smoke.json").returncode == 0

    def firings() -> list[dict]:
        return json.loads(cli("schedule", "show", "smoke", "--json").stdout)["firings"]

    until(lambda: len(firings()) >= 2, 30)
    first, second = firings()[:2]
    job = requests.get(f"{url}/api/v1/jobs/{first['made']['id']}", timeout=10).json()
    assert job["schedule"] == {"name": "smoke", "firing": first["firing"]} and "schedule:smoke" in job["spec"]["tags"]
    assert second["made"] is None and second["why"].startswith(f"skipped: job {job['id']} it made last")
    listed = cli("ls", "--tag", "schedule:smoke")
    assert listed.returncode == 0 and [r.split()[0] for r in listed.stdout.splitlines()[1:]] == [str(job["id"])]
    assert cli("schedule", "rm", "smoke").returncode == 0


def test_the_tuis_schedules_screen_lists_pauses_and_deletes(spawn, child_env):
    """`o` opens the schedules: a row each with its next firing, the last firings below; p pauses (and resumes)
    the one under the cursor, D deletes it after one confirmation, as the API then says."""
    import asyncio

    from textual.widgets import DataTable, Static

    from tests.support.pilot import on_screen, text_of
    from tests.support.pilot import until as until_shown
    from tui.app import GpudeckApp
    from tui.screens.dialogs import Confirm
    from tui.screens.schedules import SchedulesScreen

    url = start_api(spawn, child_env)
    job = {"model": "lenet", "dataset": "synthetic", "gpus": 2}
    for name, cron in (("hourly", "0 * * * *"), ("nightly", "0 2 * * *")):
        made = requests.post(f"{url}/api/v1/schedules", json={"name": name, "cron": cron, "job": job}, timeout=10)
        assert made.status_code == 201, made.text

    def api(name: str) -> requests.Response:
        return requests.get(f"{url}/api/v1/schedules/{name}", timeout=10)

    async def scenario() -> None:
        app = GpudeckApp(url)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("o")
            screen = await on_screen(pilot, app, SchedulesScreen)
            table = screen.query_one("#schedules", DataTable)
            await until_shown(pilot, lambda: table.row_count == 2)
            assert [str(table.get_cell(k, "name")) for k in ("hourly", "nightly")] == ["hourly", "nightly"]
            assert str(table.get_cell("nightly", "cron")) == "0 2 * * *"
            assert "it has not fired yet" in text_of(screen.query_one("#firings", Static))
            table.move_cursor(row=table.get_row_index("nightly"))
            await pilot.press("p")
            await until_shown(pilot, lambda: str(table.get_cell("nightly", "next")) == "paused", 10)
            assert api("nightly").json()["paused"] is True and api("hourly").json()["paused"] is False
            await pilot.press("p")
            await until_shown(pilot, lambda: str(table.get_cell("nightly", "next")) != "paused", 10)
            assert api("nightly").json()["paused"] is False
            await pilot.press("D")
            await on_screen(pilot, app, Confirm)
            await pilot.press("y")
            await until_shown(pilot, lambda: table.row_count == 1, 10)
            assert api("nightly").status_code == 404 and api("hourly").status_code == 200

    asyncio.run(scenario())
