"""Schemathesis against a live API (issue 17 #9): every check (schema-valid requests accepted, schema-violating ones
refused, answers conform to the document, authentication enforced, no 5xx) over the coverage, fuzzing and stateful
phases (the stateful phase follows the document's links from POST /jobs to the job's routes). 0 failures allowed.

Open (issue 17 #9 is not done): of 1,072 cases the run still finds 2 kinds of schema-valid requests that the
server refuses with 400 for what this schema does not say — a dataset NAME that was never uploaded (POST /jobs), and
sweep combinations that the grid makes invalid (a chief without workers, a dataset string of no known form). They
need a dataset syntax in the document and a 404 for a reference to a dataset that does not exist, or hooks.

    make bench PYTEST_ARGS="-k schemathesis"     # GPUDECK_ST_EXAMPLES (default 40 per operation)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.redis_server import free_port
from tests.support.live import wait_http

EXAMPLES = int(os.environ.get("GPUDECK_ST_EXAMPLES", "40"))


def test_schemathesis_finds_nothing(spawn, child_env, tmp_path):
    st = Path(sys.executable).parent / "st"
    if not st.exists() and not shutil.which("st"):
        pytest.skip("schemathesis is not installed (make bench installs it)")
    port = free_port()
    env = {**child_env, "GPUDECK_TOKENS": "bench-token", "GPUDECK_TENSORBOARD_MAX": "2"}
    api = spawn("api", "--port", str(port), env=env)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz", api)
    run = subprocess.run(
        [
            str(st),
            "--config-file",
            str(Path(__file__).with_name("schemathesis.toml")),
            "run",
            f"{url}/api/v1/openapi.json",
            "-H",
            "Authorization: Bearer bench-token",
            "--checks",
            "all",
            "--phases",
            "coverage,fuzzing,stateful",
            "--max-examples",
            str(EXAMPLES),
            "--exclude-path-regex",
            "/(wait|logs)$",
            "--workers",
            "2",
            "--seed",
            "1",
            "--request-timeout",
            "20",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1800,
    )
    out = run.stdout + run.stderr
    summary = out[out.find("SUMMARY") :] if "SUMMARY" in out else out[-3000:]
    print(summary)
    cases = re.search(r"(\d+) generated", out)
    print(f"test cases generated: {cases.group(1) if cases else '?'}")
    assert run.returncode == 0, out[-12000:]
