"""A project's own Python environment (issue 30 #1), with real workers and uv, and no network: tiny wheels built
by the test are the package index (UV_FIND_LINKS, UV_NO_INDEX). Built once per content in the job's sandbox and
reused; two jobs at once build it once; a build that fails ends the job `environment`; a job canceled mid-build
leaves nothing half-built; the least recently used environment goes when the cache is over its bound."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import requests

from tests.support.live import start_api, submit_job, until, wait_ended
from tests.support.readme import run_block
from tests.support.wheels import wheel

pytestmark = pytest.mark.slow


def sdist_slow(folder: Path) -> Path:
    """An sdist whose build runs for a minute (its setup.py sleeps): a build to cancel midway."""
    import io
    import tarfile

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "slowpkg-1.0.tar.gz"
    files = {
        "slowpkg-1.0/setup.py": "import os, pathlib, time\n"
        "pathlib.Path(os.environ['UV_CACHE_DIR']).parent.joinpath('slow-started').touch()\n"
        "time.sleep(60)\n"
        "from setuptools import setup\nsetup(name='slowpkg', version='1.0')\n",
        "slowpkg-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: slowpkg\nVersion: 1.0\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def log(api: str, job_id: int) -> str:
    return requests.get(f"{api}/api/v1/jobs/{job_id}/logs", timeout=10).text


def test_a_projects_environment_is_built_once_reused_and_bounded(tmp_path, spawn, child_env, gpu_env):
    wheels = Path("/var/tmp") / f"gpudeck-wheels-{tmp_path.name}"  # (outside /tmp: the sandbox has its own /tmp)
    wheel(wheels, "tinypkg", "1.0", "VALUE = 41\n")
    wheel(wheels, "otherpkg", "2.0", "VALUE = 'other'\n")
    sdist_slow(wheels)
    env = {
        **child_env,
        "GPUDECK_COMMAND_JOBS": "1",
        "GPUDECK_DATA_ROOTS": str(tmp_path),
        "UV_FIND_LINKS": str(wheels),
        "UV_NO_INDEX": "1",
        "UV_NO_BUILD_ISOLATION": "1",  # (an sdist builds with the setuptools the worker has: no index here)
        "GPUDECK_ENV_MAX_BYTES": "1",  # (every environment but the newest is over the bound)
    }
    api = start_api(spawn, env)
    for _ in range(2):
        spawn("worker", "--cpu", env=env)
    # A box with a GPU (a FAKE nvidia-smi): the README's block, which names no --gpus, runs there as written.
    spawn("worker", "--gpus", "0", env={**env, "PATH": gpu_env["PATH"]})
    home = Path(child_env["GPUDECK_HOME"])
    project = tmp_path / "project"
    project.mkdir()
    # numpy: the worker has it, and the index has not — it is met by the worker's own (not downloaded again)
    (project / "requirements.txt").write_text("tinypkg==1.0\nnumpy\n")
    (project / "train.py").write_text("import numpy, tinypkg\nprint('tinypkg says', tinypkg.VALUE + 1)\n")
    spec = {"command": "python train.py", "source": str(project), "gpus": 0}
    readme = tmp_path / "readme"
    readme.mkdir()
    (readme / "requirements.txt").write_text("tinypkg==1.0\n")
    (readme / "train.py").write_text("import tinypkg\nprint('trained with tinypkg', tinypkg.VALUE)\n")
    try:
        # The README's commands, as written, from a project folder with a requirements.txt (job 1), once the
        # GPU worker is live (a job that names no --gpus takes one where a worker has GPUs).
        workers = lambda: requests.get(f"{api}/api/v1/workers", timeout=10).json()["workers"]  # noqa: E731
        until(lambda: len(workers()) == 3, 60, "the three workers")
        cli_env = {**child_env, "GPUDECK_API": api, "PATH": f"{Path(sys.executable).parent}:{child_env['PATH']}"}
        ran, listed = run_block("pyenv", int(api.rsplit(":", 1)[1]), readme, cli_env)
        assert "[env] building environment (1 packages)" in ran and "trained with tinypkg 41" in ran, ran
        assert requests.get(f"{api}/api/v1/jobs/1", timeout=10).json()["spec"]["gpus"] == 1  # (the GPU worker's)
        assert listed.splitlines()[0].split() == ["ENV", "FROM", "PACKAGES", "SIZE", "LAST", "USED", "JOBS"], listed
        assert listed.splitlines()[1].split()[1:3] == ["requirements", "1"] and listed.rstrip().endswith(" 1"), listed

        # Two jobs at once, one environment: built by one of them, reused by the other.
        first, second = submit_job(api, spec), submit_job(api, spec)
        for job_id in (first, second):
            job = wait_ended(api, job_id)
            assert job["status"] == "succeeded", (job, log(api, job_id))
            assert "tinypkg says 42" in log(api, job_id)
        logs = [log(api, first), log(api, second)]
        assert sum("[env] building environment (2 packages)" in text for text in logs) == 1, logs
        assert sum("gpudeck: reusing environment" in text for text in logs) == 1, logs
        envs = requests.get(f"{api}/api/v1/envs", timeout=10).json()["envs"]
        envs = [e for e in envs if e["packages"] == 2]
        assert len(envs) == 1 and sorted(envs[0]["jobs"]) == sorted([first, second])
        built = Path(envs[0]["path"])
        assert built.parent == home / "envs" and not (built / "lib" / "python3.11" / "site-packages" / "numpy").exists()

        # A later job with the same file starts without building.
        third = submit_job(api, spec)
        assert wait_ended(api, third)["status"] == "succeeded"
        assert "gpudeck: reusing environment" in log(api, third) and "[env] building" not in log(api, third)

        # A requirement no index has: failed, reason environment, uv's own words in log_tail.
        (tmp_path / "broken").mkdir()
        (tmp_path / "broken" / "requirements.txt").write_text("nosuchpkg==9.9\n")
        broken = wait_ended(api, submit_job(api, {**spec, "source": str(tmp_path / "broken")}))
        assert (broken["status"], broken["reason"]) == ("failed", "environment"), broken
        assert any("nosuchpkg" in line for line in broken["log_tail"]), broken["log_tail"]
        assert "could not be built" in broken["message"]

        # Canceled while it builds: no half-built environment is ever used; the next job builds it anew.
        (tmp_path / "slow").mkdir()
        (tmp_path / "slow" / "requirements.txt").write_text("slowpkg==1.0\n")
        slow = submit_job(api, {**spec, "command": "true", "source": str(tmp_path / "slow")})
        until(
            lambda: (
                "building environment"
                in (requests.get(f"{api}/api/v1/jobs/{slow}", timeout=10).json()["message"] or "")
            ),
            60,
        )
        requests.post(f"{api}/api/v1/jobs/{slow}/cancel", timeout=10)
        assert wait_ended(api, slow)["status"] == "canceled"
        unready = [p for p in (home / "envs").iterdir() if p.is_dir() and not (p / ".gpudeck-ready").exists()]
        assert unready == [], unready

        # Another project's environment: the cache is over its bound, the least recently used one goes.
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "requirements.txt").write_text("otherpkg==2.0\n")
        (tmp_path / "other" / "train.py").write_text("import otherpkg\nprint(otherpkg.VALUE)\n")
        other = submit_job(api, {**spec, "source": str(tmp_path / "other")})
        assert wait_ended(api, other)["status"] == "succeeded", log(api, other)
        assert "least recently used environments" in log(api, other)
        envs = requests.get(f"{api}/api/v1/envs", timeout=10).json()["envs"]
        assert [e["jobs"] for e in envs] == [[other]] and not built.exists()
        assert json.loads((Path(envs[0]["path"]) / ".gpudeck-ready").read_text())["built_by"] == other
    finally:
        import shutil

        shutil.rmtree(wheels, ignore_errors=True)
