"""What gpudeck adds on a Slurm cluster (issue 45), on a real one-node Slurm (tests/support/slurm.py, four FAKE GPUs):

1. Submit → running and job end → record, p50/p95 over 50 short jobs through gpudeck (`gpudeck up --backend
   slurm`, the API, the agent's sbatch, the attempt in the allocation) against the same command through `sbatch`
   directly (running: when the command began; record: when gpudeck's record says it ended, against when `squeue`,
   polled every 50 ms, says Slurm's job ended). One job at a time, gpudeck's and Slurm's alternating, so both see
   the same machine.
2. The polling cost on slurmctld: RPCs per second from gpudeck at 500 pending jobs (`sdiag`, over 60 s).

`make bench PYTEST_ARGS="-k slurm"`; about 10 minutes."""

from __future__ import annotations

import os
import re
import shlex
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import requests

from tests.support import slurm
from tests.support.live import until
from tests.support.stack import Up

JOBS = 50
PENDING = 500

SCRIPT = (
    "import os, sys, time\n"
    "mark = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ['JOB_DIR'], 't')\n"
    "open(mark + '.start', 'w').write(repr(time.time()))\n"
    "time.sleep(0.5)\n"
    "open(mark + '.end', 'w').write(repr(time.time()))\n"
)
"""Half a second of work, its start and end times written beside it."""


cluster = slurm.cluster_fixture(gpus=4)


def stamp(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def read_time(path: Path, limit_s: float = 60) -> float:
    until(lambda: path.exists() and path.read_text(), limit_s, f"{path}")
    return float(path.read_text())


def through_gpudeck(up: Up) -> tuple[float, float]:
    t0 = time.time()
    made = requests.post(
        f"{up.url}/api/v1/jobs", json={"command": [sys.executable, "-c", SCRIPT], "gpus": 1}, timeout=30
    )
    job_id = made.json()["id"]
    done = requests.get(f"{up.url}/api/v1/jobs/{job_id}/wait", params={"timeout": 120}, timeout=140).json()
    assert done["status"] == "succeeded", done
    mark = up.home / "jobs" / str(job_id) / "t"
    return read_time(Path(f"{mark}.start")) - t0, stamp(done["ended_at"]) - read_time(Path(f"{mark}.end"))


def through_sbatch(cluster: slurm.Cluster, folder: Path, n: int) -> tuple[float, float]:
    mark = folder / f"direct-{n}"
    t0 = time.time()
    made = cluster.run("sbatch", "--parsable", "--gres=gpu:1", f"--output={folder}/direct-{n}.out", "--wrap",
                       f"{sys.executable} -c {shlex.quote(SCRIPT)} {mark}")  # fmt: skip
    slurm_id = made.stdout.strip().split(";")[0]
    while True:  # (Slurm's record of the end: when squeue says so)
        state = cluster.run("squeue", "-h", "--states=all", "-j", slurm_id, "-o", "%T", check=False).stdout.strip()
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            ended = time.time()
            break
        time.sleep(0.05)
    assert state == "COMPLETED", (state, (folder / f"direct-{n}.out").read_text())
    return read_time(Path(f"{mark}.start")) - t0, ended - read_time(Path(f"{mark}.end"))


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def sdiag_rpcs(cluster: slurm.Cluster) -> dict[str, int]:
    """sdiag's RPC counts by message type since its last reset."""
    out = cluster.run("sdiag").stdout
    part = out.split("Remote Procedure Call statistics by message type")[1].split(
        "Remote Procedure Call statistics by user"
    )[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", part, re.M)}


def test_what_gpudeck_adds_on_slurm(cluster, tmp_path):
    env = cluster.env({k: v for k, v in os.environ.items() if not k.startswith("GPUDECK_")})
    env.update(GPUDECK_SLURM_POLL="5s", GPUDECK_COMMAND_JOBS="1", PYTHONUNBUFFERED="1")
    up = Up(tmp_path / "home", env, tmp_path / "up.log", args=("--backend", "slurm"))
    try:
        ours: list[tuple[float, float]] = []
        direct: list[tuple[float, float]] = []
        for n in range(JOBS):
            ours.append(through_gpudeck(up))
            direct.append(through_sbatch(cluster, tmp_path, n))
        print(f"\n{JOBS} jobs each, one at a time, alternating (seconds):")
        print(f"{'':28}{'p50':>8}{'p95':>8}")
        for what, i in (("submit -> running", 0), ("end -> record", 1)):
            for name, runs in (("gpudeck", ours), ("sbatch", direct)):
                values = [r[i] for r in runs]
                print(f"{what + ' ' + name:28}{pct(values, 50):8.3f}{pct(values, 95):8.3f}")
            added = pct([r[i] for r in ours], 50) - pct([r[i] for r in direct], 50)
            print(f"{what + ' gpudeck adds (p50)':28}{added:8.3f}")

        out = f"--output={tmp_path}/blocker.out"
        blocker = cluster.run("sbatch", "--parsable", "--gres=gpu:4", out, "--wrap", "sleep 600").stdout.strip()
        for _ in range(PENDING):
            made = requests.post(f"{up.url}/api/v1/jobs", json={"command": "true", "gpus": 1}, timeout=30)
            assert made.status_code == 201, made.text
        until(
            lambda: len(cluster.run("squeue", "-h", "-t", "PENDING", "-o", "%i").stdout.split()) >= PENDING,
            600,
            "every job submitted to Slurm",
        )
        time.sleep(10)  # (the agent's last submissions settle)
        cluster.run("sdiag", "--reset")
        window = 60
        time.sleep(window)
        counts = sdiag_rpcs(cluster)
        total = sum(counts.values())
        print(f"\nslurmctld, {PENDING} gpudeck jobs pending, GPUDECK_SLURM_POLL=5s, over {window} s (sdiag):")
        for name, count in sorted(counts.items(), key=lambda kv: -kv[1]):
            print(f"  {name:32} {count:6d}  {count / window:6.2f}/s")
        print(f"  {'all':32} {total:6d}  {total / window:6.2f}/s")
        cluster.run("scancel", blocker)
        assert counts.get("REQUEST_JOB_INFO", 0) <= window / 5 + 2  # (one squeue a poll)
    finally:
        up.kill()
