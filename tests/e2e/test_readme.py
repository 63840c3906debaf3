"""The README's curl walkthrough, run as written (on a free port) against a live `gpudeck up`."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.stack import Up

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def walkthrough_commands(name: str = "walkthrough") -> list[str]:
    text = README.read_text()
    block = re.search(rf"<!-- {name}:.*?-->\s*```sh\n(.*?)```\s*<!-- /{name} -->", text, re.S)
    assert block, f"README.md lost its {name} block"
    return [c.strip() for c in block.group(1).replace("\\\n", " ").splitlines() if c.strip()]


def run_block(name: str, port: int, cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    """Run a README block's commands in order (bash, `localhost:8686` moved to `port`); their outputs."""
    outputs = []
    for command in walkthrough_commands(name):
        command = command.replace("localhost:8686", f"localhost:{port}")
        run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=240, cwd=cwd, env=env)
        assert run.returncode == 0, (command, run.stderr)
        outputs.append(run.stdout)
    return outputs


def test_readme_has_the_two_commands_first():
    text = README.read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    assert first_block.splitlines()[0].startswith("make up") and first_block.splitlines()[1].startswith("make test")


def test_the_curl_walkthrough_works_as_written(tmp_path, child_env):
    stack = Up(tmp_path / "home", child_env, tmp_path / "up.log")
    try:
        submitted, waited, logs, metrics, listing = run_block("walkthrough", stack.port, tmp_path)
        assert json.loads(submitted)["id"] == 1 and json.loads(submitted)["status"] == "queued"
        job = json.loads(waited)
        assert job["status"] == "succeeded", (job, stack.output()[-3000:])
        assert job["result"]["steps"] == 20 and job["progress"]["step"] == 20
        assert "train step 20" in logs
        assert len(json.loads(metrics)["train"]) == 20  # steps=20 logs every step by default
        assert [j["id"] for j in json.loads(listing)["jobs"]] == [1]
    finally:
        stack.kill()


def test_the_data_walkthrough_works_as_written(tmp_path, child_env):
    from tests.support import formats

    archive = formats.cifar_binary(tmp_path / "src", formats.images(64), formats.images(16, seed=1), tar=True)
    (tmp_path / "cifar-10-binary.tar.gz").write_bytes(archive.read_bytes())
    stack = Up(tmp_path / "home", child_env, tmp_path / "up.log")
    try:
        uploaded, listed, submitted, followed, board, prom = run_block("walkthrough-data", stack.port, tmp_path)
        assert json.loads(uploaded)["ref"] == "cifar10:1.0.0" and json.loads(uploaded)["format"] == "cifar10-binary"
        assert json.loads(listed)["datasets"][0]["latest"] == "1.0.0"
        assert json.loads(submitted)["spec"]["dataset"] == "cifar10:1.0.0"
        assert "dataset cifar10 (cifar-binary)" in followed and "result" in followed  # streamed to the end
        tb = json.loads(board)
        assert tb["url"] == f"http://127.0.0.1:{tb['port']}/" and tb["runs"] == ["1-resnet20"]
        assert 'gpudeck_jobs{status="succeeded"} 1.0' in prom
    finally:
        stack.kill()
