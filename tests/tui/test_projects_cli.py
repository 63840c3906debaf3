"""Issue 69 #1: the README's "Projects" commands, run as written against a real API process and the server's
Redis: an admin makes a project and puts alice in it, and her job belongs to it (ls says alice/vision); a project
that does not exist, or one she is not in, is refused with what to do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.live import start_api
from tests.support.readme import run_block

pytestmark = pytest.mark.slow  # (a real API process: make test runs it, make check does not)


def test_the_readme_makes_a_project_and_a_job_belongs_to_it(spawn, child_env, tmp_path):
    url = start_api(spawn, child_env)
    env = {**child_env, "GPUDECK_API": url, "PATH": f"{os.path.dirname(sys.executable)}:{child_env['PATH']}"}
    _, made, added, listed, submitted, ls = run_block("projects", int(url.rsplit(":", 1)[1]), tmp_path, env)
    assert made.strip() == (
        "project vision: max gpus 4, max queued 200; gpudeck project add vision USER puts a named token in it"
    )
    assert added.strip() == "alice is in project vision (their default: vision)"
    assert listed.splitlines()[1].split() == ["vision", "4", "200", "-", "1", "alice"]
    job_id = submitted.split()[2]
    head, row = ls.splitlines()[:2]
    assert "OWNER" in head.split() and row.split()[0] == job_id and "alice/vision" in row.split()

    def alice(*args: str) -> subprocess.CompletedProcess:
        token = (tmp_path / "alice.token").read_text().strip()
        return subprocess.run(["gpudeck", *args], capture_output=True, text=True, timeout=60, check=False,
                              env={**env, "GPUDECK_TOKEN": token})  # fmt: skip

    missing = alice("submit", "--model", "lenet", "--dataset", "synthetic", "--project", "nlp")
    assert missing.returncode != 0 and "no project named 'nlp'" in missing.stderr, missing.stderr
    made_nlp = subprocess.run(["gpudeck", "project", "create", "nlp"], env=env, capture_output=True, text=True)
    assert made_nlp.returncode == 0, made_nlp.stderr
    refused = alice("submit", "--model", "lenet", "--dataset", "synthetic", "--project", "nlp")
    assert refused.returncode != 0 and "gpudeck project add nlp alice" in refused.stderr, refused.stderr
    assert "Traceback" not in missing.stderr + refused.stderr
