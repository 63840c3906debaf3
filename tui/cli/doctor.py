"""`gpudeck doctor`: is this gpudeck ready to run jobs? One table of checks through the API, as a user reaches it
(the API, Redis and whether it keeps the queue across a restart, the disk, the workers and their sandboxes, the
GPUs their hosts report), then a short real training job on each GPU (or on a CPU worker where there is none),
pinned and timed. ✓ passed, ✗ failed (with what to do), – not applicable here (and why). Exit 0 only when no check
failed."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from models.common import EXIT_OK
from models.sourcetree import human
from tui.cli.base import client, connection_options, echo_json, json_option, print_table
from tui.client import ApiError, Client
from tui.widgets.fmt import cordon_cause

EXIT_UNHEALTHY = 1
MARK = {"ok": "✓", "fail": "✗", "skip": "–"}
TRIAL_STEPS = 20


@dataclass
class Check:
    name: str
    result: str  # ok, fail, skip
    detail: str
    fix: str | None = None


def _api(c: Client, url: str) -> tuple[list[Check], dict[str, Any] | None]:
    try:
        health = c.request("GET", "/healthz").json()
    except ApiError as exc:  # (a 503: Redis unreachable, the body says so)
        return [Check("api", "fail", f"{url} answered {exc.status}: {exc.message}")], None
    out = [Check("api", "ok", f"{url} answers ({health['status']})")]
    if health["redis"] == "ok":
        out.append(Check("redis", "ok", "reachable, takes writes"))
    else:
        fix = "free the disk Redis saves to (it refuses writes until then)"
        out.append(Check("redis", "fail", health["redis"], fix))
    saving = health.get("redis_saving", "unknown")
    if saving in ("appendonly", "snapshots"):
        out.append(Check("redis saving", "ok", f"keeps the queue across a restart ({saving})"))
    elif saving == "none":
        fix = "set `appendonly yes` in its redis.conf (gpudeck up's embedded Redis does), or `save 60 1`"
        out.append(Check("redis saving", "fail", "a restart of Redis loses every job", fix))
    else:
        out.append(Check("redis saving", "skip", "Redis does not say (CONFIG is off there)"))
    space = health.get("disk") or {}
    if space:
        text = f"{human(space['free_bytes'])} free of {human(space['total_bytes'])} under {space['path']}"
        if space["low"]:
            fix = "delete old jobs (gpudeck rm, GPUDECK_RETENTION) or lower GPUDECK_MIN_FREE"
            out.append(Check("disk", "fail", f"{text}: below {human(space['min_free_bytes'])}", fix))
        else:
            out.append(Check("disk", "ok", text))
    return out, health


def _workers(workers: list[dict[str, Any]]) -> list[Check]:
    alive = [w for w in workers if w["alive"]]
    lost = [w["name"] for w in workers if not w["alive"]]
    out = []
    if not alive:
        out.append(Check("workers", "fail", "none alive: no job can run", "start them: gpudeck up, or gpudeck worker"))
    else:
        hosts = sorted({w["host"] for w in alive})
        out.append(Check("workers", "ok", f"{len(alive)} alive on {', '.join(hosts)}"))
    if lost:
        fix = "see its host (its process died or the host is away); it is forgotten once it stops beating for good"
        out.append(Check("lost workers", "fail", ", ".join(lost), fix))
    bare = sorted({w["host"] for w in alive if w.get("sandboxed") is False})
    if bare:
        fix = "install bubblewrap (apt install bubblewrap) and restart the workers; README: What a job can reach"
        out.append(Check("sandbox", "fail", f"jobs run without a sandbox on {', '.join(bare)}", fix))
    elif alive and all(w.get("sandboxed") for w in alive):
        out.append(Check("sandbox", "ok", "every job in bubblewrap (its own PID and mount namespace, no capability)"))
    elif alive:
        out.append(Check("sandbox", "skip", "the workers do not say (started by an older gpudeck)"))
    kept = [w["warm"] for w in alive if w.get("warm")]
    if kept:  # (what warm starts cost: one process a GPU that ran a zoo or Python job lately, GPUDECK_WARM_MAX_AGE)
        held = human(sum(int(k["rss_bytes"]) for k in kept))
        kinds = sorted({k.get("kind") or "trainer" for k in kept})
        of = [f"{sum((k.get('kind') or 'trainer') == kind for k in kept)} {kind}s" for kind in kinds]
        said = f"{len(kept)} kept ready ({', '.join(of)}), {held} resident (GPUDECK_WARM=off: none)"
        out.append(Check("warm processes", "ok", said))
    return out


def _gpus(hosts: list[dict[str, Any]]) -> list[Check]:
    gpus = [(h["host"], g) for h in hosts for g in h.get("gpus") or []]
    if not gpus:
        return [Check("gpus", "skip", "no worker's host reports a GPU (no nvidia-smi there): CPU workers only")]
    listed = ", ".join(
        f"{host}:{g['index']} {g.get('name')} {human((g.get('memory_total_mib') or 0) * 2**20)}" for host, g in gpus
    )
    out = [Check("gpus", "ok", f"{len(gpus)}: {listed}")]
    cordoned = [(host, g) for host, g in gpus if g.get("cordoned")]
    if cordoned:
        said = ", ".join(f"{host}:{g['index']} ({cordon_cause(g['cordoned'])})" for host, g in cordoned)
        fix = "see the kernel log (dmesg) on that host; once the GPU is repaired: gpudeck gpu uncordon HOST:GPU"
        out.append(Check("cordoned gpus", "fail", f"out of service after a hardware error: {said}", fix))
    else:
        out.append(Check("cordoned gpus", "ok", "none: no GPU reported a hardware error"))
    return out


KINDS = (
    ("tensorflow", "zoo models", "pip install 'gpudeck[tensorflow]' (or 'gpudeck[tensorflow-gpu]') there"),
    ("uv", "project environments", "pip install 'gpudeck[envs]' there, or put uv on the workers' PATH"),
    ("jupyter", "notebook sessions", "pip install 'gpudeck[notebook]' there"),
)
"""What a worker's Python may lack (jobs.worker.kinds): the fact, the kind of job it runs, how to have it."""


def _kinds(name: str, h: dict[str, Any]) -> list[Check]:
    """Which kinds of job a host's workers run: commands and shell sessions always; the rest as installed (nothing
    where its workers do not say: an older gpudeck)."""
    if all(h.get(key) is None for key, _, _ in KINDS):
        return []
    known = [(what, fix) for key, what, fix in KINDS if h.get(key) is False]
    runs = ["commands", "shell sessions", *(what for key, what, _ in KINDS if h.get(key))]
    out = [Check(f"job kinds ({name})", "ok", "runs " + ", ".join(runs))]
    for what, fix in known:  # (not installed: a skip, not a failure; those jobs are refused or fail saying so)
        out.append(Check(f"{what} ({name})", "skip", "not installed for its workers", fix))
    return out


SERVICE_UNIT = Path("/etc/systemd/system/gpudeck.service")
"""Where `gpudeck service install` puts the unit (jobs.service.UNIT_DIR; the client imports nothing of the engine)."""


def _service() -> list[Check]:
    """Whether this host runs gpudeck as a systemd service (`gpudeck service install`)."""
    if not SERVICE_UNIT.exists():
        return [Check("service", "skip", "not installed as a systemd service here", "gpudeck service install")]
    if not Path("/run/systemd/system").is_dir() or shutil.which("systemctl") is None:
        return [Check("service", "skip", f"{SERVICE_UNIT} is there, but systemd does not run on this host")]
    state = subprocess.run(["systemctl", "is-active", "gpudeck.service"], capture_output=True, text=True, timeout=30)
    active = state.stdout.strip()
    if active == "active":
        return [Check("service", "ok", "gpudeck.service is active (journalctl -u gpudeck for its log)")]
    return [Check("service", "fail", f"gpudeck.service is {active or 'unknown'}", "systemctl status gpudeck")]


def _hosts(c: Client) -> list[Check]:
    """What each worker host says of itself (GET /api/v1/doctor, admins only): its NVIDIA driver, MPS, its clock."""
    try:
        doc = c.request("GET", "/api/v1/doctor").json()
    except ApiError as exc:
        if exc.status in (403, 404):  # (a user's token; an older API)
            return [Check("hosts", "skip", "what worker hosts say of themselves is for admins (GET /api/v1/doctor)")]
        raise
    out = []
    for h in doc["hosts"]:
        name = h["host"]
        if h.get("driver"):
            out.append(Check(f"driver ({name})", "ok", f"NVIDIA {h['driver']}"))
        elif h["gpus"]:
            fix = "install the NVIDIA driver (nvidia-smi must answer on the worker's host)"
            out.append(Check(f"driver ({name})", "fail", "nvidia-smi does not say the driver's version", fix))
        out += _kinds(name, h)
        if h.get("mps") and not h.get("mps_installed"):
            fix = "install the driver's MPS tools (nvidia-cuda-mps-control) or set GPUDECK_MPS=off"
            out.append(Check(f"mps ({name})", "fail", "GPUDECK_MPS=on but nvidia-cuda-mps-control is missing", fix))
        elif h["gpus"]:
            said = "on (GPUDECK_MPS)" if h.get("mps") else "installed, off" if h.get("mps_installed") else "absent"
            out.append(Check(f"mps ({name})", "ok" if h.get("mps") or h.get("mps_installed") else "skip", said))
        offset = h.get("clock_offset_s")
        if offset is None:
            continue
        if abs(offset) <= doc["clock_skew_max_s"]:
            out.append(Check(f"clock ({name})", "ok", f"within {abs(offset):.1f} s of the API's"))
        else:
            fix = "run NTP on both hosts (chrony, systemd-timesyncd): expected starts, timeouts and idle rules use it"
            out.append(Check(f"clock ({name})", "fail", f"{offset:+.1f} s from the API's", fix))
    return out


def _released(health: dict[str, Any]) -> list[Check]:
    """GPU memory a process still holds a minute after its job ended (/healthz's gpus_not_released)."""
    held = health.get("gpus_not_released")
    if held is None:
        return []
    if not held:
        return [Check("gpu memory released", "ok", "no process holds GPU memory after its job ended")]
    said = ", ".join(
        f"{x['host']}:{x['gpu']} pid {x['pid']} of job {x['job_id']} ({x.get('used_memory_mib') or '?'} MiB, "
        f"{x['for_s']} s)"
        for x in held
    )
    fix = "kill those processes on their hosts (a stuck one may need the GPU reset); the GPU takes no whole-GPU job"
    return [Check("gpu memory released", "fail", f"still held after the job ended: {said}", fix)]


PRIORITIES = ("high", "normal", "low")
"""Highest first (models.states.PRIORITIES: the client imports nothing of the engine)."""


def trial_priority(me: dict[str, Any]) -> str:
    """The trial's priority: the highest the caller's token may give (`max_priority`, else high), so that a user
    held to `normal` can run the check and nobody's doctor outranks what they may submit (issue 62 #10)."""
    cap = me.get("max_priority")
    return cap if cap in PRIORITIES else "high"


def trial_spec(n_gpus: int, plain: bool = False, priority: str = "high") -> dict[str, Any]:
    """The trial job: LeNet for TRIAL_STEPS steps, on one GPU with mixed precision and XLA where workers serve GPUs
    (what a broken CUDA setup fails first), unless `plain` (float32, no XLA compile); on a CPU worker otherwise."""
    params: dict[str, Any] = {"steps": TRIAL_STEPS}
    if n_gpus and not plain:
        params |= {"mixed_precision": True, "xla": True}
    spec = {"model": "lenet", "dataset": "synthetic", "params": params, "gpus": 1 if n_gpus else 0}
    return spec | {"name": "gpudeck doctor", "tags": ["doctor"], "priority": priority}


def _trials(c: Client, workers: list[dict[str, Any]], timeout_s: int, plain: bool = False) -> list[Check]:
    """A short real training on each GPU a worker serves, all at once (one job each: pinned, mixed precision and
    XLA unless `plain`), or one on a CPU worker where none serves a GPU; each job's GPUs, time and images/s."""
    n_gpus = len({(w["host"], g) for w in workers if w["alive"] for g in w["gpus"]})
    try:
        priority = trial_priority(c.whoami())
    except ApiError:
        priority = "normal"
    spec = trial_spec(n_gpus, plain, priority)
    how = " with mixed precision and XLA" if spec["params"].get("xla") else ""
    if priority != "low":  # (said before it happens: the trial may stop other people's jobs for its GPUs)
        click.echo(
            f"gpudeck doctor: the training check runs {max(1, n_gpus)} job(s) at priority {priority}: it may preempt "
            f"running jobs of lower priority on those GPUs (--no-job skips the check)",
            err=True,
        )
    try:
        made = [c.submit(spec)["id"] for _ in range(max(1, n_gpus))]
    except ApiError as exc:
        return [Check("training", "fail", f"the API refused the trial job: {exc.message}")]
    out, placed, blind = [], [], []
    deadline = time.monotonic() + timeout_s
    for job_id in made:
        job = c.wait(job_id, timeout=max(1, int(deadline - time.monotonic())))
        if job["status"] != "succeeded":
            if job["status"] not in ("succeeded", "failed", "canceled"):
                c.cancel(job_id)
            why = job.get("message") or job.get("reason") or job["status"]
            fix = f"gpudeck logs {job_id}; gpudeck show {job_id}"
            out.append(Check(f"training (job {job_id})", "fail", f"{job['status']}: {why}", fix))
            continue
        where = ",".join(job.get("gpu_ids") or []) or "cpu"
        placed.append(where)
        if n_gpus and not (job.get("result") or {}).get("gpus_seen"):
            blind.append(str(job_id))
        rate = (job.get("result") or {}).get("images_per_sec")
        took = job.get("elapsed_s")
        text = f"{TRIAL_STEPS} steps{how} on {job.get('worker')} (GPU {where}) in {took:.1f} s" if took else where
        out.append(Check(f"training (job {job_id})", "ok", text + (f", {rate:,.0f} images/s" if rate else "")))
    if n_gpus and placed and blind:
        fix = (
            "TensorFlow found no GPU inside the job's sandbox: the CPU build (pip install 'gpudeck[gpu]', or make "
            "install where nvidia-smi lists a GPU), or the driver's libraries or /dev/nvidia* not reachable there"
        )
        out.append(Check("tensorflow sees the GPU", "fail", f"not in job {', '.join(blind)} (trained on CPU)", fix))
    elif n_gpus and placed:
        out.append(Check("tensorflow sees the GPU", "ok", "in every trial, inside its sandbox"))
    if n_gpus > 1 and placed:
        if len(set(placed)) == len(placed) == n_gpus:
            out.append(Check("pinning", "ok", f"each trial on its own GPU ({', '.join(sorted(placed))})"))
        elif len(placed) == n_gpus:
            out.append(Check("pinning", "fail", f"trials shared GPUs: {placed}", "gpudeck show on the jobs above"))
    return out


@click.command()
@connection_options
@click.option("--no-job", is_flag=True, help="skip the trial training (only what the API and workers report)")
@click.option(
    "--plain",
    is_flag=True,
    help="trials in float32 without XLA: seconds sooner (no XLA compile), but a GPU that fails only with mixed "
    "precision or XLA passes",
)
@click.option("--timeout", "timeout_s", type=int, default=600, show_default=True, help="seconds the trials may take")
@json_option
def doctor(no_job, plain, timeout_s, as_json) -> int:
    """Is this gpudeck ready? API, Redis and its saving, disk, workers and their sandboxes, GPUs, and a short real
    training job on each GPU (one on a CPU worker where there is none). Exit 0 only when no check failed."""
    c = client()
    checks, health = _api(c, c.base_url)
    if health is not None:
        workers = c.request("GET", "/api/v1/workers").json()["workers"]
        hosts = c.request("GET", "/api/v1/gpus").json()["hosts"]
        checks += _workers(workers) + _gpus(hosts) + _released(health) + _hosts(c) + _service()
        if no_job:
            checks.append(Check("training", "skip", "--no-job"))
        elif any(w["alive"] for w in workers):
            checks += _trials(c, workers, timeout_s, plain)
        else:
            checks.append(Check("training", "skip", "no worker alive to run it"))
    failed = any(x.result == "fail" for x in checks)
    if as_json:
        echo_json({"ok": not failed, "checks": [asdict(x) for x in checks]})
    else:
        rows = [(MARK[x.result], x.name, x.detail + (f"\n  fix: {x.fix}" if x.fix else "")) for x in checks]
        print_table(("", "CHECK", "RESULT"), rows)
        click.echo("ready" if not failed else "not ready: see the ✗ lines", err=True)
    return EXIT_UNHEALTHY if failed else EXIT_OK


COMMANDS = (doctor,)
