"""GPUDECK_MPS=on without a GPU: what a worker refuses and what a job is told (tests/e2e/test_gpu_share.py runs the
daemons, a FAKE nvidia-cuda-mps-control, with `gpudeck up`)."""

from dataclasses import replace

import pytest

from jobs import mps
from jobs.errors import ConfigError
from tests.support.policy import DEFAULTS


def test_a_worker_refuses_to_start_without_its_gpus_daemon_and_says_how_to_start_one(tmp_path):
    s = replace(DEFAULTS, home=tmp_path, mps=True)
    with pytest.raises(ConfigError) as refused:
        mps.check_worker(s, ["0"])
    assert "GPU 0 has no MPS control daemon" in str(refused.value) and "nvidia-cuda-mps-control -d" in str(
        refused.value
    )
    mps.check_worker(replace(s, mps=False), ["0"])  # (off: nothing to check)
    mps.check_worker(s, ["0", "1"])  # (a worker of several GPUs: its jobs run without MPS)
    mps.pipe_dir(s, "0").mkdir(parents=True)
    (mps.pipe_dir(s, "0") / "control").touch()
    mps.check_worker(s, ["0"])


def test_what_a_job_is_told(tmp_path):
    s = replace(DEFAULTS, home=tmp_path, mps=True, jobs_per_gpu=4)
    pipes = str(tmp_path / "mps" / "0" / "pipe")
    assert mps.job_env(s, ["0"], None, None) == {"CUDA_MPS_PIPE_DIRECTORY": pipes}
    assert mps.job_env(s, ["0"], 40 << 30, 0.5023) == {
        "CUDA_MPS_PIPE_DIRECTORY": pipes,
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40960M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "51",  # its part of the memory, over an even split (25)
    }
    assert mps.job_env(s, ["0", "1"], None, None) == {}
    assert mps.job_env(replace(s, mps=False), ["0"], 10 << 30, 0.12) == {}
