"""Several jobs on one GPU for real: `gpudeck up` with GPUDECK_JOBS_PER_GPU=4 on two FAKE GPUs (a fake nvidia-smi
on PATH that reports each job's `sleep` as using the FAKE_GPU_MIB its environment says: we have no GPU), real
workers and jobs. The README's block packs four 10G shares on GPU 0 beside a whole-GPU job on GPU 1; then the
watchdog stops a share that uses more than it asked for and spares the one beside it. (What a zoo trainer tells
TensorFlow of its share: tests/models/test_gpu_cap.py; it reaches the trainer as GPUDECK_GPU_MEMORY, as it reaches a
command, which the README's block prints.) MIG instances and MPS daemons with `gpudeck up` too."""

import os
import pwd
import shutil
import signal
import subprocess
import sys

import pytest
import requests

from jobs import mps
from jobs.settings import Settings
from models.states import ENDED
from tests.support.live import alive, fake_gpus_in_use, fake_nvidia_smi, until
from tests.support.readme import run_block
from tests.support.stack import Up

pytestmark = pytest.mark.slow

G = 1 << 30


def test_four_shares_pack_one_gpu_and_the_watchdog_stops_only_the_overuser(tmp_path, child_env):
    fake_nvidia_smi(tmp_path / "bin", fake_gpus_in_use(2))
    env = {
        **child_env,
        "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}",
        "GPUDECK_COMMAND_JOBS": "1",
        "GPUDECK_JOBS_PER_GPU": "4",
        "GPUDECK_GPU_MEMORY_GRACE": "3s",
    }
    up = Up(tmp_path / "home", env, tmp_path / "up.log")
    api = requests.Session()

    def get(path: str):
        return api.get(up.url + path, timeout=30).json()

    def job(job_id: int) -> dict:
        return get(f"/api/v1/jobs/{job_id}")

    try:
        until(lambda: len(get("/api/v1/workers")["workers"]) == 8, 90, "four workers per GPU")
        until(lambda: get("/api/v1/gpus")["hosts"], 30, "a GPU sample")  # (what shares are packed by)
        client_env = {**env, "GPUDECK_API": up.url, "PATH": f"{os.path.dirname(sys.executable)}:{env['PATH']}"}
        # (the cancel at its end runs later: the block is run up to its listing first)
        ran = run_block("walkthrough-gpu-share", up.port, tmp_path, client_env, stop_before="gpudeck cancel")
        shares, whole = [1, 2, 3, 4], 5
        for i in (*shares, whole):
            until(lambda i=i: job(i)["status"] == "running", 60, f"job {i} running")
        assert [job(i)["gpu_ids"] for i in shares] == [["0"]] * 4
        assert len({job(i)["worker"] for i in shares}) == 4 and job(whole)["gpu_ids"] == ["1"]
        listing = ran[2]
        assert listing.count("10G of GPU 0") == 4 and "GPU 1" in listing, listing
        log = until(lambda: "bytes of GPU" in (t := api.get(f"{up.url}/api/v1/jobs/1/logs").text) and t, 30, "log")
        assert f"{10 * G} bytes of GPU 0" in log
        gpus = {g["index"]: g for h in get("/api/v1/gpus")["hosts"] for g in h["gpus"]}
        assert sorted((h["job_id"], h["gpu_memory"]) for h in gpus[0]["holders"]) == [(i, 10 * G) for i in shares]
        assert [(h["job_id"], h["gpu_memory"]) for h in gpus[1]["holders"]] == [(whole, None)]
        run_block("walkthrough-gpu-share", up.port, tmp_path, client_env, start_at="gpudeck cancel")
        for i in (*shares, whole):
            until(lambda i=i: job(i)["status"] == "canceled", 60, f"job {i} canceled")

        # one share uses 12 GiB of its 10, the one beside it 4: the first is stopped, the second goes on
        def sleeper(mib: int) -> dict:
            return {"command": "exec sleep 300", "gpu_memory": "10G", "env": {"FAKE_GPU_MIB": str(mib)}}

        over = api.post(f"{up.url}/api/v1/jobs", json=sleeper(12 * 1024), timeout=30).json()["id"]
        fine = api.post(f"{up.url}/api/v1/jobs", json=sleeper(4 * 1024), timeout=30).json()["id"]
        ended = until(lambda: (j := job(over))["status"] == "failed" and j, 60, "the overuser stopped")
        assert ended["reason"] == "gpu_memory_exceeded"
        assert ended["message"].startswith("it used 12G of GPU 0 (its peak) for "), ended["message"]
        assert "more than its gpu_memory of 10G" in ended["message"]
        assert job(fine)["status"] == "running" and job(fine)["gpu_ids"] == ["0"]
        api.post(f"{up.url}/api/v1/jobs/{fine}/cancel", timeout=30)
    finally:
        up.kill()


def test_a_default_up_grows_a_gpus_job_slots_for_the_shares_that_fit_it(tmp_path, child_env):
    """Job slots follow demand (issue 64): a default `gpudeck up` (no GPUDECK_JOBS_PER_GPU) starts one worker a GPU
    on two FAKE GPUs of 80G; three 10G shares all run at once, the third on a worker `up` started for it, which
    then serves like the others."""
    fake_nvidia_smi(tmp_path / "bin", fake_gpus_in_use(2))
    env = {**child_env, "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}", "GPUDECK_COMMAND_JOBS": "1"}
    up = Up(tmp_path / "home", env, tmp_path / "up.log")
    api = requests.Session()

    def get(path: str):
        return api.get(up.url + path, timeout=30).json()

    try:
        until(lambda: len(get("/api/v1/workers")["workers"]) == 2, 90, "a worker a GPU")
        until(lambda: get("/api/v1/gpus")["hosts"], 30, "a GPU sample")
        body = {"command": "exec sleep 300", "gpu_memory": "10G", "env": {"FAKE_GPU_MIB": "2048"}}
        shares = [api.post(f"{up.url}/api/v1/jobs", json=body, timeout=30).json()["id"] for _ in range(3)]
        for i in shares:
            until(lambda i=i: get(f"/api/v1/jobs/{i}")["status"] == "running", 90, f"share {i} running")
        workers = get("/api/v1/workers")["workers"]
        assert len(workers) == 3
        assert len({get(f"/api/v1/jobs/{i}")["worker"] for i in shares}) == 3
        assert "a share that fits GPU" in up.log.read_text()  # (what `up` says it started, and why)
        for i in shares:
            api.post(f"{up.url}/api/v1/jobs/{i}/cancel", timeout=30)
        for i in shares:
            until(lambda i=i: get(f"/api/v1/jobs/{i}")["status"] == "canceled", 60, f"share {i} canceled")
    finally:
        up.kill()


MIG_L = (
    "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-e91edf3b-b297-37c1-a2a7-7601c98e4fcd)\\n"
    "  MIG 3g.20gb     Device  0: (UUID: MIG-4c8ba8e8-bcb1-5b3a-b6d3-8f1bb7b8d3ad)\\n"
    "  MIG 3g.20gb     Device  1: (UUID: MIG-9f1bb7b8-0000-5b3a-b6d3-4c8ba8e8d3ad)\\n"
)


def test_gpudeck_up_serves_each_mig_instance_and_pins_a_job_by_its_uuid(tmp_path, child_env):
    fake_nvidia_smi(tmp_path / "bin", f"case \"$*\" in\n  *-L*) printf '{MIG_L}' ;;\nesac\nexit 0\n")
    env = {**child_env, "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}", "GPUDECK_COMMAND_JOBS": "1"}
    up = Up(tmp_path / "home", env, tmp_path / "up.log")
    try:

        def listed() -> list:
            return requests.get(f"{up.url}/api/v1/workers", timeout=10).json()["workers"]

        until(lambda: len(listed()) == 2, 60, "a worker per MIG instance")
        workers = listed()
        migs = sorted(g for w in workers for g in w["gpus"])
        assert migs == ["MIG-4c8ba8e8-bcb1-5b3a-b6d3-8f1bb7b8d3ad", "MIG-9f1bb7b8-0000-5b3a-b6d3-4c8ba8e8d3ad"]
        body = {"command": "echo pinned to $CUDA_VISIBLE_DEVICES", "gpus": 1}
        job_id = requests.post(f"{up.url}/api/v1/jobs", json=body, timeout=30).json()["id"]
        job = until(lambda: (j := requests.get(f"{up.url}/api/v1/jobs/{job_id}", timeout=10).json())["status"]
                    == "succeeded" and j, 60, "the job")  # fmt: skip
        assert job["gpu_ids"][0] in migs
        assert f"pinned to {job['gpu_ids'][0]}" in requests.get(f"{up.url}/api/v1/jobs/{job_id}/logs", timeout=10).text
    finally:
        up.kill()


def fake_mps_control(bin_dir, record) -> None:
    """A FAKE nvidia-cuda-mps-control (no GPU, no driver here): `-d` makes the control pipe a real daemon makes in
    CUDA_MPS_PIPE_DIRECTORY (a named pipe), records what it was started with, and leaves a daemon of its own
    session (as the real one daemonizes) that reads commands from that pipe and records them; `quit` ends it and
    removes the pipe. Without `-d` it sends its input line down the pipe, as the real one does."""
    path = bin_dir / "nvidia-cuda-mps-control"
    path.write_text(
        "#!/bin/sh\n# FAKE nvidia-cuda-mps-control for tests\n"
        'dir="${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}"\n'
        'if [ "$1" = --serve ]; then\n'
        "  while :; do\n"
        '    read command < "$dir/control" || exit 0\n'
        f'    echo "$command gpu=$CUDA_VISIBLE_DEVICES" >> {record}\n'
        '    if [ "$command" = quit ]; then rm -f "$dir/control"; exit 0; fi\n'
        "  done\n"
        "fi\n"
        'if [ "$1" = -d ]; then\n'
        '  mkfifo "$dir/control" || exit 1\n'
        f'  echo "started gpu=$CUDA_VISIBLE_DEVICES pipes=$dir logs=$CUDA_MPS_LOG_DIRECTORY" >> {record}\n'
        '  setsid "$0" --serve </dev/null >/dev/null 2>&1 &\n'
        "  exit 0\n"
        "fi\n"
        "read command\n"
        'echo "$command" > "$dir/control"\n'
    )
    path.chmod(0o755)


def test_mps_a_daemon_per_gpu_and_a_share_is_its_client_inside_its_sandbox(tmp_path, child_env, monkeypatch):
    fake_nvidia_smi(tmp_path / "bin", fake_gpus_in_use(1))
    record = tmp_path / "mps.log"
    fake_mps_control(tmp_path / "bin", record)
    home = tmp_path / "home"
    env = {
        **child_env,
        "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}",
        "GPUDECK_COMMAND_JOBS": "1",
        "GPUDECK_JOBS_PER_GPU": "2",
        "GPUDECK_MPS": "on",
    }
    up = Up(home, env, tmp_path / "up.log", args=("--cpu-workers", "1"))  # (a CPU job too: it sees no daemon)
    settings = Settings.from_env({"GPUDECK_HOME": str(home)})
    decoy = mps.RUN_ROOT / f"decoy-{tmp_path.name}"
    try:
        pipes = mps.pipe_dir(settings, "0")
        assert record.read_text() == f"started gpu=0 pipes={pipes} logs={pipes.parent / 'log'}\n"
        if os.geteuid() == 0:  # (the daemon starts the MPS server as the jobs' user: it logs and makes pipes there)
            nobody = pwd.getpwnam("nobody").pw_uid
            assert pipes.parent.parent.parent == mps.RUN_ROOT, pipes
            assert (pipes.parent / "log").stat().st_uid == nobody
            # the pipes' folder is the service's and sticky: no job moves or replaces the daemon's pipe (#6)
            assert pipes.stat().st_uid == 0 and pipes.stat().st_mode & 0o7777 == 0o1777
            assert all(p.stat().st_mode & 0o005 == 0o005 for p in (pipes.parent, pipes.parent.parent, mps.RUN_ROOT))
            (decoy / "0").mkdir(parents=True)  # (another service's daemons on this box: out of the job's sight)
        until(lambda: len(requests.get(f"{up.url}/api/v1/workers", timeout=10).json()["workers"]) == 3, 60, "workers")
        until(lambda: requests.get(f"{up.url}/api/v1/gpus", timeout=10).json()["hosts"], 30, "a GPU sample")
        look = (
            'echo "pipes=$CUDA_MPS_PIPE_DIRECTORY limit=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT '
            'threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"; test -p "$CUDA_MPS_PIPE_DIRECTORY/control" && echo seen; '
            f'echo "beside: $(ls -A {mps.out_of_sight(settings)} | tr "\\n" " ")"'
        )
        job_id = requests.post(f"{up.url}/api/v1/jobs", json={"command": look, "gpu_memory": "10G"}, timeout=30)
        job_id = job_id.json()["id"]
        until(lambda: requests.get(f"{up.url}/api/v1/jobs/{job_id}", timeout=10).json()["status"] == "succeeded", 60)
        log = requests.get(f"{up.url}/api/v1/jobs/{job_id}/logs", timeout=10).text
        assert f"pipes={pipes} limit=0=10240M threads=50" in log  # (an even split over 2 slots beats 10G's 13 %)
        assert "seen" in log  # the daemon's pipe, inside the job's sandbox (whose /tmp is its own)
        # and nothing else of the daemons' folders: no other GPU's daemon (nor another service's) to talk to
        assert f"beside: {mps.root(settings).name if os.geteuid() == 0 else '0'} \n" in log, log
        # a hostile share cannot take its GPU's daemon away from the others; a CPU job sees no daemon at all
        attack = (
            'mv "$CUDA_MPS_PIPE_DIRECTORY/control" "$CUDA_MPS_PIPE_DIRECTORY/gone" && echo moved; '
            'rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"; test -p "$CUDA_MPS_PIPE_DIRECTORY/control" && echo still; '
            f'echo "cpu sees: $(ls -A {mps.out_of_sight(settings)} 2>/dev/null | tr "\\n" " ")"'
        )
        for spec in ({"command": attack, "gpu_memory": "10G"}, {"command": attack, "gpus": 0}):
            job_id = requests.post(f"{up.url}/api/v1/jobs", json=spec, timeout=30).json()["id"]
            until(lambda i=job_id: requests.get(f"{up.url}/api/v1/jobs/{i}", timeout=10).json()["status"] in ENDED, 60)
            said = requests.get(f"{up.url}/api/v1/jobs/{job_id}/logs", timeout=10).text
            assert "moved" not in said and mps.alive(settings, "0"), said
            if spec.get("gpus") == 0:
                assert "cpu sees: \n" in said, said
            elif os.geteuid() == 0:
                assert "still" in said, said
        # a daemon that dies is started again; and after `kill -9` of up, the next up quits the one left (#6)
        for pid in mps.daemon_pids(settings, "0"):
            os.kill(pid, signal.SIGKILL)
        (pipes / "control").unlink()
        until(lambda: record.read_text().count("started gpu=0") >= 2 and mps.alive(settings, "0"), 30, "a restart")
        up.stop()  # (as Ctrl-C stops it)
        assert record.read_text().splitlines()[-1] == "quit gpu=0"  # the daemon stopped with the stack
        assert not pipes.exists() or pipes.is_relative_to(home)  # (a root service's folder under /run with it)
        # what a `kill -9` of up leaves: its daemon, running, its pipe in place; the next up's start quits it and
        # starts its own (it failed: `mkfifo … File exists`, the API never came back)
        monkeypatch.setenv("PATH", env["PATH"])  # (the FAKE daemon's)
        pipes.mkdir(parents=True, exist_ok=True)
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env=mps._env(settings, "0"), check=True, timeout=30)
        # (its FAKE daemon serves from a background process: under load not yet the instant `-d` returns)
        until(lambda: mps.daemon_pids(settings, "0") and mps.alive(settings, "0"), 15, "the daemon a kill -9 left")
        left, started = mps.daemon_pids(settings, "0"), record.read_text().count("started gpu=0")
        assert left and mps.alive(settings, "0")
        mps.start(settings, "0")  # (what the next `up` does first for its GPU)
        # (quit, or killed where it did not read its `quit` within the wait: on one loaded core it may not have)
        assert record.read_text().count("started gpu=0") == started + 1
        # (the FAKE daemon serves from a process it starts in the background, and a SIGKILL takes a moment to land:
        # under load, neither is so the instant start returns)
        until(lambda: mps.alive(settings, "0") and not any(alive(pid) for pid in left), 15, "old quit, new up")
        mps.stop(settings, "0")
        until(lambda: not mps.daemon_pids(settings, "0"), 10, "the daemon quit")
    finally:
        up.kill()
        shutil.rmtree(decoy, ignore_errors=True)
