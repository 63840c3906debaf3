"""Host caches in the sandbox (issue 43 #3), for real: `gpudeck up` with GPUDECK_CACHES sharing one folder writable
and one read-only; a command job that names both writes to the first, reads the second and cannot write to it,
and its log says, at its start, which host paths its `env` names that its sandbox shows read-only or hides."""

import sys

import pytest
import requests

from tests.support.live import until
from tests.support.stack import Up

pytestmark = pytest.mark.slow

SCRIPT = """
import os, pathlib
pathlib.Path(os.environ["KERAS_HOME"], "datasets.txt").write_text("written by the job")
print("read:", pathlib.Path(os.environ["HF_HOME"], "model.txt").read_text())
try:
    pathlib.Path(os.environ["HF_HOME"], "x").write_text("no")
except OSError as exc:
    print("hf is read-only:", exc.strerror)
"""


def test_a_job_writes_a_shared_cache_reads_a_read_only_one_and_is_told_of_host_paths_it_cannot_use(tmp_path, child_env):
    keras, hf = tmp_path / "keras", tmp_path / "hf"
    keras.mkdir()
    keras.chmod(0o777)  # (the operator makes a writable cache the job user's to write)
    hf.mkdir()
    (hf / "model.txt").write_text("weights")
    env = {
        **child_env,
        "GPUDECK_COMMAND_JOBS": "1",
        "GPUDECK_CACHES": f"KERAS_HOME={keras}:rw;HF_HOME={hf}",
    }
    up = Up(tmp_path / "home", env, tmp_path / "up.log")
    try:
        unknown = requests.post(f"{up.url}/api/v1/jobs", json={"command": "true", "caches": ["TORCH"]}, timeout=30)
        assert unknown.status_code == 404
        assert unknown.json()["details"]["fields"] == {
            "caches": "unknown cache 'TORCH'; shared (GPUDECK_CACHES): KERAS_HOME, HF_HOME"
        }
        body = {
            "command": [sys.executable, "-c", SCRIPT],
            "caches": ["KERAS_HOME", "HF_HOME"],
            "env": {"TORCH_HOME": "/usr/share", "XDG_CACHE_HOME": str(tmp_path)},
        }
        job_id = requests.post(f"{up.url}/api/v1/jobs", json=body, timeout=30).json()["id"]
        job = until(lambda: (j := requests.get(f"{up.url}/api/v1/jobs/{job_id}", timeout=10).json())["status"]
                    in ("succeeded", "failed") and j, 90, "the job")  # fmt: skip
        log = requests.get(f"{up.url}/api/v1/jobs/{job_id}/logs", timeout=10).text
        assert job["status"] == "succeeded", log
        assert (keras / "datasets.txt").read_text() == "written by the job"
        assert "read: weights" in log and "hf is read-only: Read-only file system" in log
        assert not (hf / "x").exists()
        assert "gpudeck: TORCH_HOME=/usr/share is read-only inside the job's sandbox" in log
        assert f"gpudeck: XDG_CACHE_HOME={tmp_path} is hidden (an empty folder, or missing) inside" in log
        assert "this server shares: KERAS_HOME (rw), HF_HOME" in log
        assert job["environment"]["KERAS_HOME"] == str(keras) and job["environment"]["HF_HOME"] == str(hf)
    finally:
        up.kill()
