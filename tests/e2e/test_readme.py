"""The README's curl walkthrough, run as written (on a free port) against a live `gpudeck up`."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.stack import Up

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def walkthrough_commands() -> list[str]:
    text = README.read_text()
    block = re.search(r"<!-- walkthrough:.*?-->\s*```sh\n(.*?)```\s*<!-- /walkthrough -->", text, re.S)
    assert block, "README.md lost its walkthrough block"
    return [c.strip() for c in block.group(1).replace("\\\n", " ").splitlines() if c.strip()]


def test_readme_has_the_two_commands_first():
    text = README.read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    assert first_block.splitlines()[0].startswith("make up") and first_block.splitlines()[1].startswith("make test")


def test_the_curl_walkthrough_works_as_written(tmp_path, child_env):
    stack = Up(tmp_path / "home", child_env, tmp_path / "up.log")
    try:
        outputs = []
        for command in walkthrough_commands():
            command = command.replace("localhost:8686", f"localhost:{stack.port}")
            run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=180)
            assert run.returncode == 0, (command, run.stderr)
            outputs.append(run.stdout)
        submitted, waited, logs, metrics, listing = outputs
        assert json.loads(submitted)["id"] == 1 and json.loads(submitted)["status"] == "queued"
        job = json.loads(waited)
        assert job["status"] == "succeeded", (job, stack.output()[-3000:])
        assert job["result"]["steps"] == 20 and job["progress"]["step"] == 20
        assert "train step 20" in logs
        assert len(json.loads(metrics)["train"]) == 20  # steps=20 logs every step by default
        assert [j["id"] for j in json.loads(listing)["jobs"]] == [1]
    finally:
        stack.kill()
