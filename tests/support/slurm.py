"""A real one-node Slurm cluster for tests (Debian's slurm-wlm with munge, as root): a `slurm.conf` and `gres.conf`
for this host with FAKE GPUs (GRES counted over placeholder files: no device exists), partitions `low` (default,
preemptible) and `high` (PreemptMode=REQUEUE), and munged, slurmctld and slurmd started in a temporary folder and
stopped after. Where Slurm cannot be had (not root, no apt, no package), `unavailable()` says why and the tests
skip saying so; `make test-slurm` (and CI) install it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs.redis_server import free_port
from jobs.run.proc import kill_marked

DAEMONS = ("slurmctld", "slurmd", "munged")
PACKAGES = ("slurm-wlm", "munge")


def unavailable() -> str | None:
    """None where Slurm runs here (installed now if it can be), else why not."""
    if all(shutil.which(t) for t in ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scontrol", "scancel")):
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "Slurm is not installed and cannot be here (it needs root and apt-get: apt-get install slurm-wlm munge)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", *PACKAGES]
    if subprocess.run(install, env=env, capture_output=True, timeout=600).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return f"Slurm could not be installed: {done.stderr.strip()[-300:]}"
    return None


@dataclass
class Cluster:
    """A running one-node cluster: its folder, its node's name, how many fake GPUs it counts, and the environment
    Slurm's commands need (SLURM_CONF)."""

    folder: Path
    node: str
    gpus: int

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        return {**(base if base is not None else os.environ), "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm command against this cluster (sinfo, squeue, scontrol …)."""
        return subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=30, check=check)

    def logs(self) -> str:
        """The daemons' last lines (what a failed test's report shows)."""
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.folder / "log" / name
            if path.exists():
                out.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-30:]))
        return "\n".join(out)

    def stop(self) -> None:
        """Cancel every job, stop the daemons (SIGKILL after 10 s), and kill what outlived them: job steps
        (slurmstepd) and their processes, found by this cluster's SLURM_CONF in their environment."""
        self.run("scancel", f"--user={os.getuid()}", check=False)
        deadline = time.monotonic() + 15
        while self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = []
        for name in DAEMONS:
            try:
                pids.append(int((self.folder / f"{name}.pid").read_text().strip()))
            except (OSError, ValueError):
                continue
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        kill_marked("SLURM_CONF", str(self.conf))  # (strays: its steps and what they ran name its slurm.conf)


def _running(pid: int) -> bool:
    """Whether `pid` is alive (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def start(folder: Path, gpus: int = 4) -> Cluster:
    """Start munged, slurmctld and slurmd for a one-node cluster in `folder` (RuntimeError with their logs when the
    node does not come up in 30 s)."""
    for sub in ("state", "spool", "log", "munge", "dev"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(folder / "munge", 0o700)
    node = socket.gethostname().split(".")[0]
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = folder / "munge" / "munge.socket.2"
    subprocess.run(
        ["munged", "--force", f"--key-file={key}", f"--socket={sock}", f"--pid-file={folder / 'munged.pid'}",
         f"--log-file={folder / 'log' / 'munged.log'}", f"--seed-file={folder / 'munge' / 'seed'}"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    for i in range(gpus):
        (folder / "dev" / f"nvidia{i}").touch()  # placeholders: Slurm counts GPUs by file
    cpus = os.cpu_count() or 1
    mem = max(1024, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 - 1024)
    (folder / "slurm.conf").write_text(
        f"""ClusterName=gpudeck-test
SlurmctldHost={node}
AuthType=auth/munge
AuthInfo=socket={sock},cred_expire=10
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={folder / "state"}
SlurmdSpoolDir={folder / "spool"}
SlurmctldPidFile={folder / "slurmctld.pid"}
SlurmdPidFile={folder / "slurmd.pid"}
SlurmctldLogFile={folder / "log" / "slurmctld.log"}
SlurmdLogFile={folder / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
MinJobAge=600
KillWait=10
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
NodeName={node} CPUs={cpus} RealMemory={mem} Gres=gpu:{gpus} State=UNKNOWN
PartitionName=low Nodes={node} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE OverSubscribe=NO
PartitionName=high Nodes={node} Default=NO MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
"""
    )
    last = gpus - 1
    (folder / "gres.conf").write_text(f"NodeName={node} Name=gpu File={folder / 'dev'}/nvidia[0-{last}]\n")
    cluster = Cluster(folder, node, gpus)
    env = cluster.env()
    for daemon in ("slurmctld", "slurmd"):
        argv = [daemon, "-f", str(cluster.conf)] + (["-i"] if daemon == "slurmctld" else [])
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = cluster.run("sinfo", "-h", "-o", "%T", check=False).stdout
        if "idle" in state or "mixed" in state:
            return cluster
        time.sleep(0.5)
    cluster.stop()
    raise RuntimeError(f"slurm did not come up in 30 s:\n{cluster.logs()}")


def cluster_fixture(gpus: int):
    """A module's `cluster` fixture: one cluster of `gpus` FAKE GPUs for the module's tests, stopped after them;
    the tests skip, saying why, where Slurm cannot be had."""

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory: pytest.TempPathFactory):
        why = unavailable()
        if why:
            pytest.skip(why)
        running = start(tmp_path_factory.mktemp("slurm"), gpus=gpus)
        yield running
        running.stop()

    return cluster
