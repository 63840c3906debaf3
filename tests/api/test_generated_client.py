"""A Python client generated from the served OpenAPI document by openapi-python-client (issue 24 #7): every
operation is a function named by its operationId in a module per tag, a job spec is typed field by field (a
model job and a command job), a job is submitted, waited for and read through the typed models against a real
API and worker, and a wrong field type is caught on the client side: by the type checker, before a request."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.support.live import start_api
from tests.support.readme import run_block

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent

USE = """
import sys

from gpudeck_client import Client
from gpudeck_client.api.jobs import get_job_metrics, submit_job, wait_job
from gpudeck_client.api.sweeps import submit_sweep
from gpudeck_client.models import CommandJobSpec, Job, JobStatus, Metrics, SearchSweepInput, Sweep

api = Client(base_url=sys.argv[1], raise_on_unexpected_status=True)
spec = CommandJobSpec(
    command=[sys.executable, "-c", "import json, os\\n"
             "with open(os.path.join(os.environ['JOB_DIR'], 'metrics.jsonl'), 'a') as f:\\n"
             "    f.writelines(json.dumps({'step': s, 'loss': 1 / s}) + '\\\\n' for s in (1, 2, 3))"],
    gpus=0,
    total_steps=3,
    name="typed",
    tags=["generated"],
)
job = submit_job.sync(client=api, body=spec)
assert isinstance(job, Job), job
done: Job = job
while done.status in (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING):
    answer = wait_job.sync(job.id, client=api, timeout=10)
    assert isinstance(answer, Job), answer
    done = answer
metrics = get_job_metrics.sync(job.id, client=api)
assert isinstance(metrics, Metrics), metrics
losses: list[float] = [p.loss for p in metrics.train if isinstance(p.loss, float)]
search = SearchSweepInput.from_dict(
    {"search": "random", "base": {"command": "true", "gpus": 0}, "space": {"env.WIDTH": {"choice": [8, 16, "x"]}},
     "metric": "loss", "max_trials": 1}
)
sweep = submit_sweep.sync(client=api, body=search)
assert isinstance(sweep, Sweep), sweep
print(done.id, done.status.value, done.name, ",".join(done.spec.tags), losses, sweep.id)
"""

WRONG = """
from gpudeck_client.models import ModelJobSpec, ModelJobSpecModel

spec = ModelJobSpec(model=ModelJobSpecModel.LENET, dataset="synthetic", gpus="two")
"""


def test_a_generated_client_submits_waits_and_reads_a_job_through_typed_models(tmp_path, spawn, child_env):
    env = {**child_env, "GPUDECK_COMMAND_JOBS": "1"}
    api = start_api(spawn, env)
    spawn("worker", "--cpu", env=env)
    env = {**child_env, "PATH": f"{BIN}:{child_env['PATH']}"}  # (the generator formats its output with ruff)
    said: list[str] = []
    made = run_block("generated-client", int(api.rsplit(":", 1)[1]), tmp_path, env, said)[0]
    for text in (made, said[0]):  # (the generator drops what it cannot type with a warning, on either stream)
        assert "Warning" not in text and "WARNING" not in text and "Error" not in text, text
    package = tmp_path / "gpudeck_client"
    # One module per tag, one function per operation named by its operationId.
    assert {p.name for p in (package / "api").iterdir() if p.is_dir()} >= {"jobs", "sweeps", "data", "service"}
    assert (package / "api" / "jobs" / "get_job_metrics.py").exists()
    # Both kinds of spec, every field typed.
    model_spec = (package / "models" / "model_job_spec.py").read_text()
    command_spec = (package / "models" / "command_job_spec.py").read_text()
    for field in ("model: ModelJobSpecModel", "dataset: str", "params: ModelJobSpecParams", "gpus: int"):
        assert field in model_spec, field
    for field in ("command: ", "source: ", "env: ", "total_steps: int", "gpus: int"):
        assert field in command_spec, field
    assert not re.search(r"^    command:", model_spec, re.M) and not re.search(r"^    model:", command_spec, re.M)

    (tmp_path / "use.py").write_text(USE)
    (tmp_path / "wrong.py").write_text(WRONG)
    env = {**child_env, "PYTHONPATH": str(tmp_path)}
    ran = subprocess.run(
        [sys.executable, "use.py", api], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    job_id, status, name, tags, losses, sweep_id = ran.stdout.rsplit(" ", 1)[0].split(" ", 4) + [ran.stdout.split()[-1]]
    assert (status, name, tags, losses.strip()) == ("succeeded", "typed", "generated", "[1.0, 0.5, 0.3333333333333333]")
    assert requests.get(f"{api}/api/v1/sweeps/{sweep_id}", timeout=10).json()["search"] == "random"  # (a search too)
    assert requests.get(f"{api}/api/v1/jobs/{job_id}", timeout=10).json()["status"] == "succeeded"

    # The type checker passes the right use and names the wrong field type before anything is sent.
    mypy = [sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports", "--follow-imports=silent"]
    checked = subprocess.run(
        mypy + ["use.py", "wrong.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]  # (one run: both files)
    wrong_type = 'wrong.py:4: error: Argument "gpus" to "ModelJobSpec" has incompatible type "str"'
    assert len(errors) == 1 and errors[0].startswith(wrong_type), checked.stdout
    # A value outside an enum is refused by the generated model itself.
    refused = subprocess.run(
        [sys.executable, "-c", "from gpudeck_client.models import ModelJobSpecModel; ModelJobSpecModel('resnet9000')"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1 and "ValueError" in refused.stderr, refused.stderr
