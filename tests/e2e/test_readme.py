"""The README's curl walkthrough, run as written (on a free port) against a live `gpudeck up`."""

import json
import re

import pytest

from tests.support.readme import README, run_block
from tests.support.stack import Up


def test_readme_has_the_two_commands_first():
    text = README.read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    assert first_block.splitlines()[0].startswith("make up") and first_block.splitlines()[1].startswith("make test")


@pytest.mark.slow
def test_the_curl_walkthrough_works_as_written(tmp_path, child_env):
    stack = Up(tmp_path / "home", child_env, tmp_path / "up.log")
    try:
        submitted, waited, logs, metrics, listing = run_block("walkthrough", stack.port, tmp_path)
        assert json.loads(submitted)["id"] == 1 and json.loads(submitted)["status"] in ("queued", "starting")
        job = json.loads(waited)
        assert job["status"] == "succeeded", (job, stack.output()[-3000:])
        assert job["result"]["steps"] == 20 and job["progress"]["step"] == 20
        assert "train step 20" in logs
        assert len(json.loads(metrics)["train"]) == 20  # steps=20 logs every step by default
        assert [j["id"] for j in json.loads(listing)["jobs"]] == [1]
    finally:
        stack.kill()


@pytest.mark.slow
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
