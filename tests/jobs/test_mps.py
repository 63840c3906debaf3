"""GPUDECK_MPS=on without a GPU: what a worker refuses and what a job is told (tests/e2e/test_gpu_share.py runs the
daemons, a FAKE nvidia-cuda-mps-control, with `gpudeck up`)."""

import os
import shutil
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
    try:
        (mps.pipe_dir(s, "0") / "control").touch()
        mps.check_worker(s, ["0"])
    finally:
        shutil.rmtree(mps.root(s))  # (as root: under /run/gpudeck-mps)


def test_what_a_job_is_told(tmp_path):
    s = replace(DEFAULTS, home=tmp_path, mps=True, jobs_per_gpu=4)
    pipes = str(mps.pipe_dir(s, "0"))
    assert mps.job_env(s, ["0"], None, None) == {"CUDA_MPS_PIPE_DIRECTORY": pipes}
    assert mps.job_env(s, ["0"], 40 << 30, 0.5023) == {
        "CUDA_MPS_PIPE_DIRECTORY": pipes,
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40960M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "51",  # its part of the memory, over an even split (25)
    }
    assert mps.job_env(s, ["0", "1"], None, None) == {}
    assert mps.job_env(replace(s, mps=False), ["0"], 10 << 30, 0.12) == {}


def test_a_root_services_daemons_keep_their_pipes_where_the_jobs_user_can_reach_them(tmp_path):
    """As root (jobs run as GPUDECK_JOB_USER) the pipes and logs are under /run/gpudeck-mps, a folder per home: the
    daemon starts the MPS server as the jobs' user, which cannot pass a 0700 home (tests/e2e/test_gpu_share.py
    starts one and checks who owns them)."""
    s = replace(DEFAULTS, home=tmp_path / "a", mps=True)
    if os.geteuid() != 0:
        assert mps.pipe_dir(s, "0") == tmp_path / "a" / "mps" / "0" / "pipe"
        assert mps.out_of_sight(s) == tmp_path / "a" / "mps"
        return
    assert mps.pipe_dir(s, "0").parent.parent.parent == mps.RUN_ROOT == mps.out_of_sight(s)
    assert mps.pipe_dir(s, "0").parent.name == "0" and mps.pipe_dir(s, "0").name == "pipe"
    assert mps.root(s) != mps.root(replace(s, home=tmp_path / "b"))  # (two services on one box: two folders)
