"""NVIDIA MPS (GPUDECK_MPS=on): one MPS control daemon per GPU of a host, so the jobs sharing a GPU run their
kernels side by side instead of time-sliced, each held to its part.

- `gpudeck up` starts `nvidia-cuda-mps-control -d` for each GPU it serves (CUDA_VISIBLE_DEVICES that GPU, its pipe
  and log directories under `$GPUDECK_HOME/mps/<gpu>/`) before its workers, and stops each (`quit`) when it stops.
  A worker started by hand with GPUDECK_MPS=on refuses to start without its GPU's daemon.
- A job of one GPU gets CUDA_MPS_PIPE_DIRECTORY (its GPU's daemon; the directory is bound into its sandbox, whose
  /tmp, where MPS keeps its pipes by default, is its own); a share also gets CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (its
  `gpu_memory`) and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (its part of the GPU's compute: the larger of its part of the
  memory and an even split over GPUDECK_JOBS_PER_GPU). A job of several GPUs runs without MPS (a process talks to
  one daemon).
- Every job runs as the one job user (GPUDECK_JOB_USER), so one MPS server serves all of a GPU's clients (MPS
  serves one user's clients at a time)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path

from jobs.errors import ConfigError
from jobs.settings import Settings
from models import protocol

CONTROL = "nvidia-cuda-mps-control"


def folder(settings: Settings, gpu: str) -> Path:
    return settings.home / "mps" / gpu


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


def start(settings: Settings, gpu: str) -> None:
    """Start GPU `gpu`'s control daemon (it daemonizes itself); ConfigError when MPS cannot be had here."""
    if shutil.which(CONTROL) is None:
        raise ConfigError(
            f"GPUDECK_MPS=on, but {CONTROL} is not on PATH: install the NVIDIA driver's MPS tools, or set "
            "GPUDECK_MPS=off"
        )
    for sub in ("pipe", "log"):
        (folder(settings, gpu) / sub).mkdir(parents=True, exist_ok=True)
        (folder(settings, gpu) / sub).chmod(0o755)
    done = subprocess.run([CONTROL, "-d"], env=_env(settings, gpu), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise ConfigError(f"{CONTROL} -d for GPU {gpu} failed ({done.returncode}): {done.stderr.strip()[:500]}")


def stop(settings: Settings, gpu: str) -> None:
    """Ask GPU `gpu`'s daemon to quit (its clients' work ends with their jobs)."""
    if shutil.which(CONTROL) is None or not running(settings, gpu):
        return
    subprocess.run([CONTROL], input="quit\n", env=_env(settings, gpu), capture_output=True, text=True, timeout=30)


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
