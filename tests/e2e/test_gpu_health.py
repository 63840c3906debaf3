"""A GPU that fails under a job, for real: `gpudeck up` on two FAKE GPUs (a fake nvidia-smi, and a FAKE `dmesg`
printing a file the test appends the kernel's XID line to: no GPU, no NVIDIA driver here), real workers and jobs;
the README's "When a GPU fails" block as written."""

import os
import socket
import sys

import pytest
import requests

from tests.support.live import fake_gpus, fake_nvidia_smi, until
from tests.support.readme import run_block
from tests.support.stack import Up

pytestmark = pytest.mark.slow


def test_a_hardware_xid_cordons_the_gpu_retries_its_job_and_an_admin_uncordons_it(tmp_path, child_env):
    bin_dir = tmp_path / "bin"
    fake_nvidia_smi(bin_dir, fake_gpus(2))  # (GPU 0 at PCI 0000:10:00)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("[    1.000000] Linux version 6.1.0\n")
    (bin_dir / "dmesg").write_text(f"#!/bin/sh\n# FAKE dmesg for tests\ncat {kmsg}\n")
    (bin_dir / "dmesg").chmod(0o755)
    env = {**child_env, "PATH": f"{bin_dir}:{child_env['PATH']}", "GPUDECK_COMMAND_JOBS": "1"}
    up = Up(tmp_path / "home", env, tmp_path / "up.log")

    def job(job_id: int) -> dict:
        return requests.get(f"{up.url}/api/v1/jobs/{job_id}", timeout=10).json()

    try:
        until(lambda: len(requests.get(f"{up.url}/api/v1/workers", timeout=10).json()["workers"]) == 2, 60)
        client_env = {**env, "GPUDECK_API": up.url, "PATH": f"{os.path.dirname(sys.executable)}:{env['PATH']}"}
        run_block("walkthrough-gpu-health", up.port, tmp_path, client_env, stop_before="gpudeck show")
        for i in (1, 2):
            until(lambda i=i: job(i)["status"] == "running", 60, f"job {i} running")
        assert job(1)["gpu_ids"] == ["0"] and job(2)["gpu_ids"] == ["1"]
        with kmsg.open("a") as f:
            f.write(
                "[ 5123.456789] NVRM: Xid (PCI:0000:10:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n"
            )
        back = until(  # (queued again, then a scheduling round says what it waits for)
            lambda: (j := job(1))["attempt"] == 2 and j["status"] == "queued" and "waiting" in j["message"] and j,
            60,
            "job 1 retried and waiting",
        )
        assert back["reason"] == "gpu_error"
        assert back["message"].startswith("waiting for 1 GPU on one host; 0 free on one host now; cordoned: Xid 79 at ")
        assert back["message"].endswith(" on GPU 0"), back["message"]
        shown, gpus, freed, cordoned_by_hand, listed, freed_1, _ = run_block(
            "walkthrough-gpu-health", up.port, tmp_path, client_env, start_at="gpudeck show"
        )
        assert "queued" in shown and "gpu_error" in shown, shown
        host = socket.gethostname()
        cordoned = {
            g["index"]: g["cordoned"]
            for h in requests.get(f"{up.url}/api/v1/gpus", timeout=10).json()["hosts"]
            for g in h["gpus"]
        }
        assert '"xid": 79' in gpus.replace('"xid":79', '"xid": 79') and cordoned[1] is None
        assert f"GPU 0 of {host}: back in service (cordoned: Xid 79)" in freed
        # an admin's cordon by hand: job 2 runs on there; `gpu ls` shows it, its holder and why
        assert f"GPU 1 of {host}: cordoned (by an admin: fan noise)" in cordoned_by_hand
        row = next(line for line in listed.splitlines() if line.split()[:2] == [host, "1"])
        assert "job 2" in row and "cordoned (by an admin: fan noise)" in row, listed
        assert listed.splitlines()[0].split() == ["HOST", "GPU", "NAME", "MEMORY", "UTIL", "HELD", "BY", "STATE"]
        assert f"GPU 1 of {host}: back in service (cordoned: by an admin: fan noise)" in freed_1
        until(lambda: job(2)["status"] == "canceled", 60, "job 2 canceled")
        assert job(2)["attempt"] == 1  # (it ran on undisturbed until the cancel)
        metrics = requests.get(f"{up.url}/metrics", timeout=10).text
        assert f'gpudeck_gpu_errors_total{{gpu="0",host="{host}",xid="79"}} 1.0' in metrics
    finally:
        up.kill()
