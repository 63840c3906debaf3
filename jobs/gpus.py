"""What `nvidia-smi` says about this host's GPUs."""
from __future__ import annotations

import logging
import re
import subprocess

log = logging.getLogger(__name__)

GPU_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]+)\))?$")


def list_gpus(timeout: float = 10.0) -> list[dict[str, str]]:
    """`nvidia-smi -L` as [{index, name, uuid}]; empty when there is no nvidia-smi or it fails."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=timeout, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("no GPUs: nvidia-smi -L did not answer (%s)", exc)
        return []
    gpus = []
    for line in out.splitlines():
        m = GPU_LINE.match(line.strip())
        if m:
            gpus.append({"index": m.group(1), "name": m.group(2), "uuid": m.group(3) or ""})
    return gpus
