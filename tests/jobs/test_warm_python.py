"""Warm interpreters (issue 65 #2): a worker that ran a Python command job keeps that environment's Python ready in a
sandbox, with what the last job imported already imported; the next `python script.py` / `python -m module` job
starts in it and sees exactly what a cold run sees (argv, cwd, environment, paths, exit status, traceback, signals,
its sandbox's first process without a privilege). One interpreter, one job; what it cannot run starts cold and the
log says why. A real worker, real bubblewrap, the service's Python as the environment."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path

import pytest

from jobs.run import warm
from tests.support.live import alive, group_gone, until, wait_job

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("warm")]

SCRIPTS = Path(__file__).parents[1] / "support" / "scripts"
VOLATILE = {"GPUDECK_RUN_ID", "MASTER_PORT"}
"""What differs between any two runs of a job, warm or not (the run's own mark, a free port)."""


def interpreters(home: Path) -> dict[int, str]:
    """This test's worker's warm interpreters (jobs/run/warmpy.py run by a Python, not its shim) and their imports."""
    found = {}
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            if entry.isdigit() and argv[1:2] == [warm.WARMPY_FILE.encode()]:
                if Path(f"/proc/{entry}/cwd").resolve().is_relative_to(home / "warm"):
                    found[int(entry)] = Path(f"/proc/{entry}/maps").read_text()
        except OSError:
            continue
    return found


def exit_of(job: dict) -> int | str:
    """How the job's process ended, as its record says: 0, the status it exited with, or the signal's name."""
    if job["status"] == "succeeded":
        return 0
    said = json.dumps(job)
    found = re.search(r"exited with status (\d+)", said) or re.search(r"(SIG[A-Z]+)", said)
    assert found, job
    return int(found[1]) if found[1].isdigit() else found[1]


def differ(a: dict, b: dict) -> dict:
    """Where two probes differ (their environments variable by variable)."""
    out = {k: (a.get(k), b.get(k)) for k in {*a, *b} if k != "env" and a.get(k) != b.get(k)}
    env_a, env_b = a.get("env", {}), b.get("env", {})
    out.update({f"${k}": (env_a.get(k), env_b.get(k)) for k in {*env_a, *env_b} if env_a.get(k) != env_b.get(k)})
    return out


def probe(client, job_id: int, job_dir: Path) -> tuple[dict, list[str]]:
    """What the probe printed (its job's own id and dir made neutral) and the rest of its log but gpudeck's lines."""
    lines = client.get(f"/api/v1/jobs/{job_id}/logs").text.splitlines()
    said = next(line for line in lines if line.startswith("probe "))
    seen = json.loads(said[len("probe ") :].replace(str(job_dir), "JOB_DIR"))
    ids = ("GPUDECK_JOB_ID", "BUILD_ID")
    seen["env"] = {k: "ID" if k in ids and v == str(job_id) else v for k, v in seen["env"].items() if k not in VOLATILE}
    rest = [line.replace(str(job_dir), "JOB_DIR") for line in lines if line != said and not line.startswith("gpudeck:")]
    return seen, rest


def test_a_python_job_starts_in_a_warm_interpreter_and_sees_what_a_cold_run_sees(
    command_client, spawn, child_env, settings, tmp_path, redis
):
    client = command_client
    source = tmp_path / "roots" / "probe"
    source.mkdir()
    shutil.copy(SCRIPTS / "probe.py", source)
    spawn("worker", "--cpu", env={**child_env, "GPUDECK_WARM": "on"})
    until(lambda: client.get("/api/v1/workers").json["workers"], 30, "the worker")

    def ran(command: str, status: str = "failed", **more) -> tuple[dict, dict, list[str]]:
        job_id = client.post("/api/v1/jobs", json={"command": command, "source": str(source), **more}).json["id"]
        job, _ = wait_job(client, job_id, timeout=60)
        assert job["status"] == status, (job, client.get(f"/api/v1/jobs/{job_id}/logs").text[-3000:])
        return (job, *probe(client, job_id, settings.job_dir(job_id)))

    def ready() -> int:
        (pid,) = until(lambda: interpreters(settings.home), 60, "a warm interpreter").keys()
        return pid

    # The first Python job starts cold (nothing is warm yet); then its environment's interpreter waits, warm, with
    # what the job named imported ahead (numpy, from the environment).
    job, cold, rest = ran("python probe.py 3", warm_imports=["numpy"])
    assert job["warm_start"] is False and exit_of(job) == 3 and rest == ["atexit ran"], (job, rest)
    pid = ready()
    until(lambda: "numpy" in interpreters(settings.home).get(pid, ""), 60, "numpy imported ahead")
    kept = until(lambda: client.get("/api/v1/workers").json["workers"][0]["warm"], 30, "the warm process reported")
    assert kept["kind"] == "interpreter" and kept["rss_bytes"] > 20 << 20, kept  # (what it costs is said)
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    assert int(status["CapEff"], 16) == 0 and (status["Uid"].split()[0] != "0" or os.geteuid() != 0)

    # The same job again starts in it, and nothing it can see differs from the cold run.
    job, hot, rest = ran("python probe.py 3")
    assert job["warm_start"] is True and exit_of(job) == 3 and rest == ["atexit ran"], (job, rest)
    assert hot == cold, differ(hot, cold)
    assert hot["argv"] == ["probe.py", "3"] and hot["cwd"] == "JOB_DIR/src" == hot["path0"] and hot["main"]
    assert hot["env"]["CUDA_VISIBLE_DEVICES"] == "" and hot["env"]["GPUDECK_JOB_ID"] == "ID"
    assert hot["first"]["caps"] == ["0000000000000000"] * 3  # its sandbox's first process: no privilege left
    assert hot["other_jobs"] == [True]  # (no other job's dir in sight)
    assert not alive(pid)  # one job, then it exited
    log = client.get(f"/api/v1/jobs/{job['id']}/logs").text
    assert "gpudeck: warm start (a Python ready" in log and "1 module imported ahead: numpy)" in log

    # The next one imports what the last warm job imported (the job named nothing; the probe imports numpy).
    until(lambda: any("numpy" in maps for maps in interpreters(settings.home).values()), 60, "numpy imported ahead")

    # A module, an uncaught exception, an interrupt: as Python itself runs them (`exec python …` starts cold).
    for args, status, code in (
        ("-m probe 0", "succeeded", 0),
        ("probe.py raise", "failed", 1),
        ("probe.py interrupt", "failed", "SIGINT"),
    ):
        ready()
        job, hot, hot_rest = ran(f"python {args}", status)
        assert job["warm_start"] is True and exit_of(job) == code, job
        job, cold, cold_rest = ran(f"exec python {args}", status)
        assert job["warm_start"] is False and exit_of(job) == code, job
        assert (hot, hot_rest) == (cold, cold_rest), (differ(hot, cold), hot_rest, cold_rest)
        if "raise" in args:
            assert cold_rest[0] == "Traceback (most recent call last):" and cold_rest[-2:] == [
                "ValueError: as asked",
                "atexit ran",
            ]

    # A warm job is stopped as a cold one: SIGTERM to its process group (bubblewrap's, its worker's child).
    ready()
    job_id = client.post("/api/v1/jobs", json={"command": "python probe.py wait", "source": str(source)}).json["id"]
    wait_job(client, job_id, lambda j: "probe " in client.get(f"/api/v1/jobs/{job_id}/logs").text)
    assert client.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
    job, _ = wait_job(client, job_id, timeout=60)
    assert job["status"] == "canceled" and job["warm_start"] is True, job
    until(lambda: group_gone(int(redis.hget(f"gpudeck:job:{job_id}", "pid"))), 10, "its process group gone")

    # A warm interpreter killed while it waits loses no job: the next one starts cold.
    pid = ready()
    os.kill(pid, signal.SIGKILL)
    until(lambda: pid not in interpreters(settings.home), 10, "the warm interpreter gone")
    job, _, _ = ran("python probe.py 0", "succeeded")
    assert job["status"] == "succeeded"

    # What a warm interpreter cannot run starts cold, and its log says why.
    ready()
    job, cold, _ = ran("python probe.py 0", "succeeded", env={"PYTHONHASHSEED": "7"})
    log = client.get(f"/api/v1/jobs/{job['id']}/logs").text
    assert job["warm_start"] is False
    assert "gpudeck: cold start: the warm interpreter here cannot run it (the warm interpreter was made for jobs" in log

    # The next one is made with its variables (a library imported ahead reads them, and Python as it starts: the
    # same string hash as a cold run's), for this owner's jobs with the very same ones.
    ready()
    job, hot, _ = ran("python probe.py 0", "succeeded", env={"PYTHONHASHSEED": "7"})
    assert job["warm_start"] is True and hot == cold, differ(hot, cold)
    assert hot["env"]["PYTHONHASHSEED"] == "7" and hot["hash"] == cold["hash"]
