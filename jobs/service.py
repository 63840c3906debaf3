"""`gpudeck service install|status`: `gpudeck up` as a systemd service (issue 68 §3): started at boot, restarted on
failure, stopped with its grace, its logs in the journal, its settings in an environment file the operator edits.

`install` writes the unit (and the environment file, where there is none) and, where systemd runs (PID 1 is
systemd: /run/systemd/system exists), reloads it and `enable --now`s the service; elsewhere it prints what to
run. `status` says whether the unit is installed, enabled and active (`systemctl`), or why it cannot tell."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

UNIT_NAME = "gpudeck.service"
UNIT_DIR = Path("/etc/systemd/system")
ENV_FILE = Path("/etc/gpudeck/gpudeck.env")
DEFAULT_HOME = Path("/var/lib/gpudeck")
STOP_TIMEOUT_S = 20
"""systemd's TimeoutStopSec: `gpudeck up` stops within 10 s of SIGTERM (its workers' checkpoints included), then
SIGKILL; twice that before systemd kills what is left."""

ENV_TEMPLATE = """\
# gpudeck's settings for `gpudeck up` as a service (systemd's EnvironmentFile; one NAME=value a line).
# Every variable of the README's Configuration table may be set here; `systemctl restart gpudeck` applies them.
# GPUDECK_TOKENS=admin=...
# GPUDECK_JOB_USER=gpudeck-job
# GPUDECK_JOBS_PER_GPU=4
# GPUDECK_MPS=on
"""


@dataclass
class Unit:
    """What the unit runs: `gpudeck up` of this environment, as `user`, on `home`, `port`."""

    gpudeck: Path
    home: Path
    user: str = "root"
    port: int | None = None
    env_file: Path = ENV_FILE

    def text(self) -> str:
        command = [str(self.gpudeck), "up", "--home", str(self.home)]
        if self.port is not None:
            command += ["--port", str(self.port)]
        group = "" if self.user == "root" else f"User={self.user}\nGroup={self.user}\n"
        return f"""\
[Unit]
Description=gpudeck: training jobs on this box's GPUs (Redis, the API, a worker per GPU)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
{group}Environment=GPUDECK_HOME={self.home}
Environment=PYTHONUNBUFFERED=1
EnvironmentFile=-{self.env_file}
ExecStart={shlex.join(command)}
# gpudeck up stops its API, workers and jobs itself (SIGTERM: the jobs checkpoint), within 10 s
KillMode=mixed
KillSignal=SIGTERM
TimeoutStopSec={STOP_TIMEOUT_S}
Restart=on-failure
RestartSec=5
LimitNOFILE=65536
StandardOutput=journal
StandardError=journal
SyslogIdentifier=gpudeck

[Install]
WantedBy=multi-user.target
"""


def systemd_runs() -> bool:
    """Whether this host was booted with systemd (its own test: sd_booted)."""
    return Path("/run/systemd/system").is_dir()


def gpudeck_command() -> Path:
    """The `gpudeck` of the environment this runs in (its console script beside its Python)."""
    beside = Path(sys.executable).parent / "gpudeck"
    found = beside if beside.exists() else shutil.which("gpudeck")
    return Path(found) if found else beside


def install(unit: Unit, unit_dir: Path = UNIT_DIR, enable: bool = True) -> list[str]:
    """Write the unit and (where missing) the environment file; enable and start it where systemd runs and
    `enable`. The lines to print: what was written, what was run or is left to run."""
    said = []
    unit_dir.mkdir(parents=True, exist_ok=True)
    path = unit_dir / UNIT_NAME
    path.write_text(unit.text())
    said.append(f"wrote {path}")
    if not unit.env_file.exists():
        unit.env_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(unit.env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # (it will hold tokens)
        with os.fdopen(fd, "w") as f:
            f.write(ENV_TEMPLATE)
        said.append(f"wrote {unit.env_file} (0600: edit it, then systemctl restart gpudeck)")
    unit.home.mkdir(parents=True, exist_ok=True)
    steps = [["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", UNIT_NAME]]
    if enable and systemd_runs() and unit_dir == UNIT_DIR:
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                raise RuntimeError(f"{shlex.join(step)} failed: {(done.stderr or done.stdout).strip()[-500:]}")
            said.append(f"ran {shlex.join(step)}")
        said.append("gpudeck runs as a service: systemctl status gpudeck; journalctl -u gpudeck -f")
    else:
        why = "asked not to" if not enable else "systemd does not run here" if not systemd_runs() else "not in /etc"
        said.append(f"not enabled ({why}); where systemd runs: " + "; ".join(shlex.join(s) for s in steps))
    return said


def status(unit_dir: Path = UNIT_DIR) -> dict[str, str | bool | None]:
    """The service as systemd sees it: installed (the unit file), enabled, active; `said` when it cannot tell."""
    path = unit_dir / UNIT_NAME
    out: dict[str, str | bool | None] = {"unit": str(path), "installed": path.exists(), "enabled": None, "active": None}
    if not systemd_runs() or shutil.which("systemctl") is None:
        out["said"] = "systemd does not run on this host: `gpudeck up` is started by hand (or by its container)"
        return out
    for key, verb in (("enabled", "is-enabled"), ("active", "is-active")):
        done = subprocess.run(["systemctl", verb, UNIT_NAME], capture_output=True, text=True, timeout=30)
        out[key] = done.stdout.strip() or None
    return out
