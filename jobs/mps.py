"""NVIDIA MPS (GPUDECK_MPS=on): one MPS control daemon per GPU of a host, so the jobs sharing a GPU run their
kernels side by side instead of time-sliced, each held to its part.

- `gpudeck up` starts `nvidia-cuda-mps-control -d` for each GPU it serves (CUDA_VISIBLE_DEVICES that GPU, its pipe
  and log directories under `root`: `$GPUDECK_HOME/mps/<gpu>/`, or as root `/run/gpudeck-mps/<home>/<gpu>/`) before
  its workers, and stops each (`quit`) when it stops.
  A worker started by hand with GPUDECK_MPS=on refuses to start without its GPU's daemon.
- A job of one GPU gets CUDA_MPS_PIPE_DIRECTORY (its GPU's daemon; the directory is bound into its sandbox, whose
  /tmp, where MPS keeps its pipes by default, is its own); a share also gets CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (its
  `gpu_memory`) and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (its part of the GPU's compute: the larger of its part of the
  memory and an even split over GPUDECK_JOBS_PER_GPU). A job of several GPUs runs without MPS (a process talks to
  one daemon).
- Every job runs as the one job user (GPUDECK_JOB_USER), so one MPS server serves all of a GPU's clients (MPS
  serves one user's clients at a time).
- What a job may do to them (issue 62 #6): a GPU's pipe folder is root's and sticky (1777: the MPS server, as the
  jobs' user, makes its pipes there; nobody renames or removes another's, the daemon's control pipe above all); a
  job's sandbox hides every daemon's folder but its own GPU's pipes, and a CPU job's or a job of several GPUs all of
  them. `gpudeck up` watches each daemon (`alive`: its control pipe there and its process running) and starts a
  gone one again; at its start it quits a daemon a killed `up` left and clears its pipes (`start`)."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shutil
import signal
import subprocess
from pathlib import Path

from jobs.errors import ConfigError
from jobs.run import sandbox
from jobs.settings import Settings
from models import protocol

CONTROL = "nvidia-cuda-mps-control"
RUN_ROOT = Path("/run/gpudeck-mps")
"""Where a root service's daemons keep their pipes and logs (a folder per GPUDECK_HOME under it)."""


def root(settings: Settings) -> Path:
    """The folder of this home's daemons: `$GPUDECK_HOME/mps`, or, where this process is root (its jobs run as
    GPUDECK_JOB_USER), RUN_ROOT/<the home's digest>: a daemon starts each user's MPS server as that user, which must
    reach its pipes and its log ("a location that's accessible to the given $UID", NVIDIA's MPS guide), and a home
    is often 0700 (on an H200, servers for `nobody` started under one exited at once and every client failed with
    CUDA error 805). A job's sandbox hides the folder but for its own GPU's pipes (jobs.run.launch)."""
    if os.geteuid() != 0:
        return settings.home / "mps"
    return RUN_ROOT / hashlib.sha256(str(settings.home).encode()).hexdigest()[:16]


def out_of_sight(settings: Settings) -> Path:
    """What a job's sandbox hides of the daemons (it sees its own GPU's pipes): all of RUN_ROOT for a root service
    (another home's daemons too), else the home's folder (hidden with the home anyway)."""
    return RUN_ROOT if root(settings).parent == RUN_ROOT else root(settings)


def folder(settings: Settings, gpu: str) -> Path:
    return root(settings) / gpu


def pipe_dir(settings: Settings, gpu: str) -> Path:
    """Where GPU `gpu`'s daemon keeps its pipes (CUDA_MPS_PIPE_DIRECTORY, for the daemon and its clients)."""
    return folder(settings, gpu) / "pipe"


def _env(settings: Settings, gpu: str) -> dict[str, str]:
    return {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": gpu,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir(settings, gpu)),
        "CUDA_MPS_LOG_DIRECTORY": str(folder(settings, gpu) / "log"),
    }


def running(settings: Settings, gpu: str) -> bool:
    """Whether GPU `gpu`'s daemon is up (its control pipe is there)."""
    return (pipe_dir(settings, gpu) / "control").exists()


def daemon_pids(settings: Settings, gpu: str) -> list[int]:
    """The processes of GPU `gpu`'s control daemon: CONTROL by name, with this GPU's pipe folder in its
    environment (a daemon of another home or GPU is not this one's)."""
    want = f"CUDA_MPS_PIPE_DIRECTORY={pipe_dir(settings, gpu)}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read(4096).split(b"\0")[:2]
            if not any(os.path.basename(a) == CONTROL.encode() for a in argv):
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def alive(settings: Settings, gpu: str) -> bool:
    """Whether GPU `gpu`'s daemon serves: its control pipe is there and its process runs."""
    return running(settings, gpu) and bool(daemon_pids(settings, gpu))


def _clear_stale(settings: Settings, gpu: str) -> None:
    """Before a start: quit a daemon of this GPU that a killed `gpudeck up` left running (its jobs are gone with
    that `up`), then remove what its pipe folder still holds (a stale control pipe: `mkfifo … File exists`)."""
    pids = daemon_pids(settings, gpu)
    if pids and running(settings, gpu) and shutil.which(CONTROL) is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                [CONTROL], input="quit\n", env=_env(settings, gpu), capture_output=True, text=True, timeout=10
            )
    for pid in daemon_pids(settings, gpu):  # (one that did not quit)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    pipes = pipe_dir(settings, gpu)
    if pipes.is_dir() and not pipes.is_symlink():
        for entry in pipes.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def start(settings: Settings, gpu: str) -> None:
    """Start GPU `gpu`'s control daemon (it daemonizes itself); ConfigError when MPS cannot be had here."""
    if shutil.which(CONTROL) is None:
        raise ConfigError(
            f"GPUDECK_MPS=on, but {CONTROL} is not on PATH: install the NVIDIA driver's MPS tools, or set "
            "GPUDECK_MPS=off"
        )
    user = sandbox.job_user(settings.job_user)  # (whose MPS servers the daemon starts: the jobs' user)
    top, here = root(settings), folder(settings, gpu)
    here.mkdir(parents=True, exist_ok=True)
    for made in (top.parent, top, here) if top.parent == RUN_ROOT else (top, here):  # (passable by that user)
        made.chmod(0o755)
    _clear_stale(settings, gpu)
    for sub in ("pipe", "log"):
        (here / sub).mkdir(exist_ok=True)
    (here / "log").chmod(0o755)
    sandbox.hand_over(here / "log", user)  # (the MPS server, as the jobs' user, logs there; no job sees it)
    os.lchown(here / "pipe", os.geteuid(), os.getegid())  # (the service's, sticky: nobody moves another's pipe)
    (here / "pipe").chmod(0o1777 if user is not None else 0o755)
    done = subprocess.run([CONTROL, "-d"], env=_env(settings, gpu), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise ConfigError(f"{CONTROL} -d for GPU {gpu} failed ({done.returncode}): {done.stderr.strip()[:500]}")


def stop(settings: Settings, gpu: str) -> None:
    """Ask GPU `gpu`'s daemon to quit (its clients' work ends with their jobs); a root service's folder under
    RUN_ROOT goes with it (what is under the home stays, its logs among it)."""
    if shutil.which(CONTROL) is not None and running(settings, gpu):
        subprocess.run([CONTROL], input="quit\n", env=_env(settings, gpu), capture_output=True, text=True, timeout=30)
    top = root(settings)
    if top.parent == RUN_ROOT:
        shutil.rmtree(folder(settings, gpu), ignore_errors=True)
        with contextlib.suppress(OSError):
            top.rmdir()  # (once its last GPU's is gone)


def check_worker(settings: Settings, gpus: list[str]) -> None:
    """A worker of one GPU with GPUDECK_MPS=on needs that GPU's daemon."""
    if settings.mps and len(gpus) == 1 and not running(settings, gpus[0]):
        raise ConfigError(
            f"GPUDECK_MPS=on, but GPU {gpus[0]} has no MPS control daemon ({pipe_dir(settings, gpus[0])} has no "
            f"control pipe): `gpudeck up` starts one per GPU; by hand, CUDA_VISIBLE_DEVICES={gpus[0]} "
            f"CUDA_MPS_PIPE_DIRECTORY={pipe_dir(settings, gpus[0])} {CONTROL} -d"
        )


def attempt_env(settings: Settings, gpus: list[str], gpu_memory: int | None, fraction: float | None) -> dict[str, str]:
    """What a job on `gpus` is told of MPS and, for a share of a GPU (`gpu_memory`), of its cap and the frameworks'
    knobs (models.protocol.share_env)."""
    return {**job_env(settings, gpus, gpu_memory, fraction), **protocol.share_env(gpu_memory, fraction)}


def job_env(settings: Settings, gpus: list[str], gpu_memory: int | None, fraction: float | None) -> dict[str, str]:
    """What a job on `gpus` is told of MPS ({} without it, or for a job of several GPUs)."""
    if not settings.mps or len(gpus) != 1:
        return {}
    out = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir(settings, gpus[0]))}
    if gpu_memory:
        out["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={int(gpu_memory) >> 20}M"
        part = max(fraction or 0.0, 1 / settings.jobs_per_gpu)
        out["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(min(100, math.ceil(100 * part)))
    return out
