"""Time to a prompt (issue 27's figure): from `gpudeck session` typed on a terminal, with an idle worker, to the
session's shell prompt on that terminal; with no source, and with a project whose environment (a requirements.txt
of 5 local wheels) was built by an earlier session (a cache hit); against the same terminal driver starting
`bash -i` here (the baseline: what a prompt costs without gpudeck). Target: ≤ 2 s with the cached environment.

    make bench PYTEST_ARGS="-k sessions"
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import requests

from jobs.run.proc import python_module
from tests.support.live import Terminal, fake_nvidia_smi, start_api, until
from tests.support.wheels import wheel

ROUNDS = 8
ONE_GPU = r"""
case "$*" in
  *-L*) printf 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n' ;;
  *--query-gpu*) printf '0, GPU-aaaa, NVIDIA H100 80GB HBM3, 0, 1000, 81559, 55, 300.5, 700.00\n' ;;
esac
exit 0
"""
PROMPT = r"(?s)attached to session \d+.*[#$] "


def to_prompt(argv: list[str], env: dict[str, str], cwd: Path, prompt: str = PROMPT) -> float:
    """Seconds from starting `argv` on a terminal to its prompt; then `exit`."""
    t0 = time.monotonic()
    term = Terminal(argv, env, cwd=cwd)
    try:
        term.expect(prompt, timeout=120)
        took = time.monotonic() - t0
        term.send("exit\r")
        term.wait(60)
    finally:
        term.close()
    return took


def test_time_to_a_prompt(tmp_path, spawn, child_env):
    wheels = Path("/var/tmp") / f"gpudeck-bench-wheels-{tmp_path.name}"
    names = [f"sessionpkg{i}" for i in range(5)]
    for name in names:
        wheel(wheels, name, "1.0")
    project = tmp_path / "project"
    project.mkdir()
    (project / "requirements.txt").write_text("".join(f"{n}==1.0\n" for n in names))
    (project / "train.py").write_text("print('hello')\n")
    fake_nvidia_smi(tmp_path / "bin", ONE_GPU)
    env = {
        **child_env,
        "PATH": f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:{child_env['PATH']}",
        "GPUDECK_COMMAND_JOBS": "1",
        "UV_FIND_LINKS": str(wheels),
        "UV_NO_INDEX": "1",
    }
    url = start_api(spawn, env)
    spawn("worker", "--gpus", "0", env=env)
    until(lambda: requests.get(f"{url}/api/v1/workers", timeout=5).json()["workers"], 60, "a live worker")
    env = {**env, "GPUDECK_API": url, "TERM": "xterm"}
    session = python_module("tui.cli", "session", "--gpus", "1")
    built = to_prompt([*session, "--source", "."], env, project)  # builds the environment
    rows: dict[str, list[float]] = {"bash -i here": [], "session": [], "session, cached env": []}
    for _ in range(ROUNDS):  # interleaved, so that the machine's noise falls on each alike
        rows["bash -i here"].append(to_prompt(["bash", "-i"], env, project, prompt=r"[#$] "))
        rows["session"].append(to_prompt(session, env, project))
        rows["session, cached env"].append(to_prompt([*session, "--source", "."], env, project))
        until(
            lambda: (
                not [
                    j
                    for j in requests.get(f"{url}/api/v1/jobs", timeout=5).json()["jobs"]
                    if j["status"] in ("queued", "starting", "running")
                ]
            ),
            30,
            "the worker idle again",
        )
    base = statistics.median(rows["bash -i here"])
    print(f"\nfirst session, building its environment: {built:.2f} s")
    for name, times in rows.items():
        med = statistics.median(times)
        print(f"{name:22} median {med:.2f} s  max {max(times):.2f} s  ({med / base:.1f}x bash -i here)")
    assert statistics.median(rows["session, cached env"]) <= 2.0
