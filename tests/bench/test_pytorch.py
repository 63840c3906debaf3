"""A real two-task PyTorch run (issue 30 #2), as the README's PyTorch section writes it: `gpudeck run --workers 2
--env-name torch -- python train.py` on `gpudeck up` with two CPU workers, where `torch` is Debian's
python3-torch (`/usr/bin/python3`) registered with GPUDECK_ENVS. The script knows nothing of gpudeck: a plain
init_process_group("gloo") from the variables every task gets, DistributedDataParallel over a small model, an
all-reduce checked, its loss in metrics.jsonl. Too heavy for `make test` (which checks the variables and a
rendezvous at MASTER_ADDR:MASTER_PORT with a small script: tests/jobs/test_command_e2e.py).

    apt install python3-torch; make bench PYTEST_ARGS="-k pytorch"
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.support.readme import run_block
from tests.support.stack import Up

TORCH_PYTHON = "/usr/bin/python3"

TRAIN = """
import json, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
print(f"rank {rank} of {world}: all_reduce gives {total.item()}", flush=True)
assert total.item() == world * (world + 1) / 2
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 8)
y = x.sum(1, keepdim=True)
out = open(os.path.join(os.environ["JOB_DIR"], "metrics.jsonl"), "a") if rank == 0 else None
for step in range(1, 31):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x[rank::world]), y[rank::world])
    loss.backward()
    opt.step()
    if out:
        out.write(json.dumps({"step": step, "loss": loss.item()}) + "\\n")
        out.flush()
weights = model.module.weight.detach().clone()
gathered = [torch.zeros_like(weights) for _ in range(world)]
dist.all_gather(gathered, weights)
print(f"rank {rank}: weights equal on every rank: {all(torch.equal(g, weights) for g in gathered)}", flush=True)
dist.destroy_process_group()
"""


def test_pytorch_two_tasks_with_gloo(tmp_path, child_env):
    has_torch = subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True).returncode == 0
    if not has_torch:
        pytest.skip("Debian's python3-torch is not installed (apt install python3-torch)")
    venv = tmp_path / "venvs" / "torch"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(TORCH_PYTHON)
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    env = {**child_env, "GPUDECK_COMMAND_JOBS": "1", "GPUDECK_ENVS": f"torch={venv}"}
    stack = Up(tmp_path / "home", env, tmp_path / "up.log", args=("--cpu-workers", "2"))
    try:
        cli_env = {**env, "GPUDECK_API": stack.url, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}
        (ran,) = run_block("pytorch", stack.port, project, cli_env)
        job = requests.get(f"{stack.url}/api/v1/jobs/1", timeout=10).json()
        assert job["status"] == "succeeded", (job, ran)
        assert "[worker0] rank 0 of 2: all_reduce gives 3.0" in ran and "[worker1] rank 1 of 2" in ran, ran
        assert ran.count("weights equal on every rank: True") == 2, ran
        losses = [p["loss"] for p in requests.get(f"{stack.url}/api/v1/jobs/1/metrics", timeout=10).json()["train"]]
        assert len(losses) == 30 and losses[-1] < losses[0] / 10, losses
        print(f"\n{json.dumps({'first_loss': losses[0], 'last_loss': losses[-1], 'elapsed_s': job['elapsed_s']})}")
    finally:
        stack.stop()
