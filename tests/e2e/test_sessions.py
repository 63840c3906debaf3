"""Interactive sessions for real: an API and a worker on one FAKE GPU (its utilization read from a file the test
writes), `gpudeck session` and `gpudeck session attach` on pseudo-terminals of their own, typed into as a person
would; a notebook with Jupyter Server from the worker's environment (the test extra) and one from an environment
without it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from textual.widgets import DataTable, Static

from jobs.run.proc import python_module
from tests.support.live import Terminal, fake_nvidia_smi, start_api, submit_job, until, wait_ended
from tests.support.pilot import on_screen, text_of
from tests.support.pilot import until as until_shown
from tests.support.readme import walkthrough_commands
from tui.app import GpudeckApp
from tui.screens.dialogs import TensorBoardDialog
from tui.screens.gpus import GpusScreen
from tui.screens.job import JobScreen

pytestmark = pytest.mark.slow

ONE_GPU = r"""
case "$*" in
  *-L*) printf 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n' ;;
  *--query-gpu*) printf '0, GPU-aaaa, NVIDIA H100 80GB HBM3, %s, 1000, 81559, 55, 300.5, 700.00\n' "$(cat UTIL)" ;;
esac
exit 0
"""
"""A FAKE nvidia-smi (we have no GPU): one H100 whose utilization is what the file UTIL says."""


@pytest.fixture
def box(spawn, child_env, tmp_path):
    """(API URL, the environment of a CLI on it, the utilization file) of a stack with one worker on GPU 0."""
    util = tmp_path / "util"
    util.write_text("0")
    fake_nvidia_smi(tmp_path / "bin", ONE_GPU.replace("UTIL", str(util)))
    bare = tmp_path / "bare"  # an environment without Jupyter
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=60)
    env = {
        **child_env,
        "PATH": f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:{child_env['PATH']}",
        "GPUDECK_COMMAND_JOBS": "1",
        "GPUDECK_SESSION_IDLE_MIN": "1s",
        "GPUDECK_ENVS": f"bare={bare}",
        "GPUDECK_ADVERTISE_HOST": "gpu-box-7",  # (the name users' ssh reaches the worker's host by)
    }
    url = start_api(spawn, env)
    spawn("worker", "--gpus", "0", env=env)
    until(lambda: requests.get(f"{url}/api/v1/workers", timeout=5).json()["workers"], 60, "a live worker")
    return url, {**env, "GPUDECK_API": url, "TERM": "xterm"}, util


def job(url: str, job_id: int) -> dict:
    return requests.get(f"{url}/api/v1/jobs/{job_id}", timeout=10).json()


def utilization(url: str) -> object:
    hosts = requests.get(f"{url}/api/v1/gpus", timeout=10).json()["hosts"]
    return hosts[0]["gpus"][0]["utilization"] if hosts else None


def run_cell(base: str, token: str, code: str, wait: bool = True) -> str:
    """Start a kernel through Jupyter's REST API and run `code` in it over the kernel's websocket, as a notebook
    client does; what it printed (`wait`), or nothing once the cell is sent (the socket closed: nobody connected)."""
    import uuid

    import websocket

    auth = {"Authorization": f"token {token}"}
    kernel = requests.post(f"{base}/api/kernels", json={"name": "python3"}, headers=auth, timeout=60)
    assert kernel.status_code == 201, kernel.text
    ws = websocket.create_connection(
        f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel.json()['id']}/channels?token={token}", timeout=60
    )
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex, "msg_type": "execute_request",
              "version": "5.3", "date": ""}  # fmt: skip
    content = {"code": code, "silent": False, "store_history": False, "user_expressions": {}, "allow_stdin": False}
    ws.send(json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}))
    out = ""
    try:
        while wait:
            reply = json.loads(ws.recv())
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if reply["msg_type"] == "stream":
                out += reply["content"]["text"]
            if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
                return out
        until(lambda: kernel_busy(base, auth), 30, "the cell running")
        return out
    finally:
        ws.close()


def kernel_busy(base: str, auth: dict[str, str]) -> bool:
    kernels = requests.get(f"{base}/api/kernels", headers=auth, timeout=10).json()
    return any(k.get("execution_state") == "busy" for k in kernels)


def marked(mark: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", mark], capture_output=True, text=True).stdout.split()


def test_a_shell_session_waits_its_turn_runs_on_its_gpu_and_leaves_nothing_behind(box, tmp_path):
    url, env, _ = box
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("import os\nprint('trained on GPU', os.environ['CUDA_VISIBLE_DEVICES'])\n")
    ahead = submit_job(url, {"command": "sleep 600", "gpus": 1, "name": "ahead"})  # until the test cancels it
    until(lambda: job(url, ahead)["status"] == "running", 60, "the job ahead running")
    impatient = Terminal(python_module("tui.cli", "session"), env)
    try:  # Ctrl-C while it waits cancels it
        gone = int(impatient.expect(r"session (\d+) queued").group(1))
        impatient.send("\x03")
        try:
            code = impatient.wait(90)  # (a bound, not a speed: the CLI and the API may be slow under load)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"gpudeck session did not end on Ctrl-C; it shows:\n{impatient.text[-3000:]}"
            ) from None
        assert code == 130, impatient.text[-3000:]
        impatient.expect(rf"canceled session {gone} \(it had not started\)")
        assert (job(url, gone)["status"], job(url, gone)["reason"]) == ("canceled", "canceled")
    finally:
        impatient.close()
    (command,) = walkthrough_commands("session")  # the README's, as written
    term = Terminal(["bash", "-c", command], env, cwd=project)
    try:
        waiting = term.expect(r"session (\d+) queued: #1 in line")
        sid = int(waiting.group(1))
        time.sleep(1)  # (still in line while the GPU is taken)
        assert job(url, sid)["status"] == "queued"
        requests.post(f"{url}/api/v1/jobs/{ahead}/cancel", timeout=10).raise_for_status()
        term.expect(rf"attached to session {sid}", timeout=60)
        before = job(url, ahead)
        assert before["status"] == "canceled"  # it started once the GPU was free, not before
        assert _ts(job(url, sid)["started_at"]) >= _ts(before["ended_at"])
        *typed, leave = walkthrough_commands("session-shell")  # what the README types in it
        seen = {
            "echo $CUDA_VISIBLE_DEVICES $GPUDECK_JOB_ID": rf"[\r\n]0 {sid}\r",
            "python train.py": r"trained on GPU 0",
        }
        assert set(typed) == set(seen), typed
        for line in typed:
            at = term.send(line + "\r")
            term.expect(seen[line], after=at)
        at = term.send('echo "in=$PWD"\r')
        term.expect(rf"in=\S+/jobs/{sid}/src", after=at)
        # what a hostile user tries from the shell (issue 37): no capability, no unmounting, no remounting
        at = term.send(
            "echo caps=$(grep CapEff /proc/self/status | cut -f2) uid=$(id -u); umount -l /tmp 2>/dev/null;"
            " echo umount=$?; mount -o remount,rw / 2>/dev/null; echo remount=$?\r"
        )
        term.expect(r"caps=0000000000000000 uid=[1-9]\d*\s+umount=[1-9]\d*\s+remount=[1-9]", after=at)
        term.send("sleep 4242.5 &\r")  # something left running when its shell exits
        until(lambda: marked("sleep 4242.5"), 10, "the background sleep running")
        view = job(url, sid)
        assert view["status"] == "running" and view["kind"] == "session" and view["gpu_ids"] == ["0"]
        assert view["attach"]["command"] == f"gpudeck session attach {sid}"
        held = requests.get(f"{url}/api/v1/gpus", timeout=10).json()["hosts"][0]["gpus"][0]["held_by"]
        assert held == {"job_id": sid, "owner": None, "kind": "session", "gpu_memory": None, "part": 1.0}
        asyncio.run(_tui_shows_the_session(url, sid))
        at = term.send(leave + "\r")
        assert term.wait(30) == 0
        term.expect(rf"session {sid} succeeded: the session ended: its shell exited", after=at)
    finally:
        term.close()
    until(lambda: not marked("sleep 4242.5"), 10, "the background sleep gone with its session")
    ended = job(url, sid)
    nxt = submit_job(url, {"command": "true", "gpus": 1})
    done = wait_ended(url, nxt, timeout=60)
    assert done["status"] == "succeeded"
    gap = _ts(done["started_at"]) - _ts(ended["ended_at"])
    assert gap < 10, f"the GPU went to the next job {gap:.1f}s after the session ended"


async def _tui_shows_the_session(url: str, sid: int) -> None:
    """The TUI: the jobs table's row, the job screen's way in, the GPUs screen's holder."""
    app = GpudeckApp(url)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.screen.query_one("#jobs", DataTable)
        await until_shown(pilot, lambda: str(sid) in table.rows)
        assert "shell session" in str(table.get_row(str(sid)))
        app.push_screen(JobScreen(sid))
        screen = await on_screen(pilot, app, JobScreen)
        summary = screen.query_one("#job-summary", Static)
        await until_shown(pilot, lambda: f"gpudeck session attach {sid}" in text_of(summary), 20)
        assert "a shell session" in text_of(summary)
        await pilot.press("escape", "g")
        gpus = await on_screen(pilot, app, GpusScreen)
        await until_shown(pilot, lambda: f"session {sid}" in text_of(gpus.query_one("#gpus", Static)), 30)


async def _tui_opens_the_notebook(url: str, sid: int, view: dict) -> None:
    app = GpudeckApp(url)
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(JobScreen(sid))
        screen = await on_screen(pilot, app, JobScreen)
        summary = screen.query_one("#job-summary", Static)
        await until_shown(pilot, lambda: f"notebook {view['url']}" in text_of(summary), 20)
        await pilot.press("a")
        dialog = await on_screen(pilot, app, TensorBoardDialog)
        assert text_of(dialog.query_one("#tb-url", Static)) == view["url"]
        port = view["tunnel"].split()[3].split(":")[0]
        assert f"ssh -N -L {port}:127.0.0.1:{port}" in text_of(dialog.query_one("#tb-how", Static))


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_a_session_is_released_when_nobody_is_attached_and_its_gpu_is_idle_and_not_before(box):
    url, env, util = box
    idle = submit_job(url, {"kind": "session", "idle": "3s"})
    ended = wait_ended(url, idle, timeout=60)
    assert (ended["status"], ended["reason"]) == ("canceled", "idle")
    log = requests.get(f"{url}/api/v1/jobs/{idle}/logs", timeout=10).text
    assert "idle: released in" in log and f"session {idle} ends now (idle)" in log

    util.write_text("50")  # its GPU works: not idle, nobody attached or not
    until(lambda: utilization(url) == 50, 30, "the sampled utilization at 50%")
    busy = submit_job(url, {"kind": "session", "idle": "3s"})
    until(lambda: job(url, busy)["status"] == "running", 60, "the busy session running")
    time.sleep(7)  # (over two idle times and two looks at the GPU: what must not happen does not)
    assert job(url, busy)["status"] == "running"
    assert not job(url, busy).get("warning")  # (used: no "released unless…" on its record)
    util.write_text("0")
    assert wait_ended(url, busy, timeout=60)["reason"] == "idle"

    term = Terminal(python_module("tui.cli", "session", "--idle", "4s"), env)  # attached from its first moment
    try:
        watched = int(term.expect(r"attached to session (\d+)", timeout=60).group(1))
        elsewhere = {k: v for k, v in env.items() if k != "GPUDECK_ADVERTISE_HOST"}  # a CLI on another host, no tty
        told = subprocess.run(
            python_module("tui.cli", "session", "attach", str(watched)), env=elsewhere, capture_output=True, text=True
        )
        assert told.returncode == 0, told.stderr
        assert f"attach there: ssh -t gpu-box-7 gpudeck session attach {watched}" in told.stdout
        time.sleep(6)  # attached, typing nothing, past its idle time and a look at the GPU: not idle
        assert job(url, watched)["status"] == "running" and not job(url, watched).get("warning")
        at = term.send("\x1d")  # Ctrl-]: detach, the session goes on
        assert term.wait(30) == 0
        term.expect(rf"detached from session {watched}; it goes on", after=at)
    finally:
        term.close()
    assert wait_ended(url, watched, timeout=60)["reason"] == "idle"


def test_a_notebook_session_serves_jupyter_with_a_token_or_says_what_to_install(box):
    url, env, _ = box
    (command,) = walkthrough_commands("session-notebook")  # the README's, as written
    out = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    sid = int(out.stdout.split()[1].rstrip(":"))
    view = job(url, sid)
    page, token = view["url"].split("?token=")
    assert f"Jupyter at {view['url']}" in out.stdout and f"ssh -N -L {view['tunnel'].split()[3]}" in out.stdout
    status = page.split("/lab")[0].rstrip("/") + "/api/status"
    with_token = requests.get(status, headers={"Authorization": f"token {token}"}, timeout=5)  # (it answers already)
    assert with_token.status_code == 200 and "kernels" in with_token.json()
    assert requests.get(status, timeout=5).status_code == 403  # no token, no notebook
    base = status.removesuffix("/api/status")
    assert run_cell(base, token, "print(6 * 7)") == "42\n"  # a kernel, as a notebook client starts one
    # and the URL it prints opens a notebook in a browser: JupyterLab's page, not "A Jupyter Server is running"
    # (issue 67 #1)
    opened = requests.get(view["url"], timeout=30)
    assert opened.status_code == 200 and "<title>JupyterLab</title>" in opened.text, opened.text[:500]
    assert "/lab" in view["url"]
    asyncio.run(_tui_opens_the_notebook(url, sid, view))
    requests.post(f"{url}/api/v1/jobs/{sid}/cancel", timeout=10).raise_for_status()
    assert wait_ended(url, sid, timeout=60)["status"] == "canceled"

    bare = submit_job(url, {"kind": "session", "jupyter": True, "env_name": "bare"})
    refused = wait_ended(url, bare, timeout=60)
    assert (refused["status"], refused["reason"]) == ("failed", "bad_input")
    assert "has no Jupyter" in refused["message"] and "add jupyterlab and ipykernel" in refused["message"]

    # a short idle time (the URL is published all the same), and a busy kernel with nobody connected is use
    quick = submit_job(url, {"kind": "session", "jupyter": True, "idle": "10s", "gpus": 1})
    view = until(lambda: (v := job(url, quick)).get("url") and v, 60, "the notebook's URL")
    page, token = view["url"].split("?token=")
    base = page.split("/lab")[0].rstrip("/")
    run_cell(base, token, "import time; time.sleep(25); print('done')", wait=False)  # then nobody is connected
    started = time.monotonic()
    until(lambda: time.monotonic() - started > 18, 30, "past the idle time")
    assert job(url, quick)["status"] == "running"  # its kernel works: not released
    ended = wait_ended(url, quick, timeout=120)  # once the cell is done, idle: released
    assert (ended["status"], ended["reason"]) == ("canceled", "idle"), ended
