"""Issue 68 §3: `gpudeck service install` writes a systemd unit for `gpudeck up` that systemd itself accepts
(`systemd-analyze verify`, Debian's systemd package), and an environment file only root reads; `service status`
says what it finds. (Where systemd runs, install also enables and starts it: not on this machine, which is booted
without it, as CI's is.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from jobs.run.proc import python_module


def gpudeck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(python_module("tui.cli", *args), capture_output=True, text=True, timeout=60)


def test_the_unit_passes_systemds_own_check_and_the_settings_file_is_roots(tmp_path):
    units, env_file, home = tmp_path / "units", tmp_path / "etc" / "gpudeck.env", tmp_path / "home"
    made = gpudeck("service", "install", "--unit-dir", str(units), "--env-file", str(env_file), "--home", str(home),
                   "--port", "8687", "--no-enable")  # fmt: skip
    assert made.returncode == 0, made.stderr
    unit = units / "gpudeck.service"
    text = unit.read_text()
    assert f"ExecStart={sys.prefix}/bin/gpudeck up --home {home} --port 8687" in text, text
    assert "Restart=on-failure" in text and f"EnvironmentFile=-{env_file}" in text and "WantedBy=multi-user" in text
    assert env_file.stat().st_mode & 0o777 == 0o600 and "GPUDECK_TOKENS" in env_file.read_text()
    assert "not enabled (asked not to)" in made.stdout and "systemctl enable --now gpudeck.service" in made.stdout
    env_file.write_text("GPUDECK_JOBS_PER_GPU=4\n")  # (the operator's edits survive a second install)
    assert gpudeck("service", "install", "--unit-dir", str(units), "--env-file", str(env_file), "--home", str(home),
                   "--no-enable").returncode == 0  # fmt: skip
    assert env_file.read_text() == "GPUDECK_JOBS_PER_GPU=4\n"
    state = json.loads(gpudeck("service", "status", "--unit-dir", str(units), "--json").stdout)
    assert state["installed"] is True and state["unit"] == str(unit)

    verify = shutil.which("systemd-analyze")
    if verify is None:
        pytest.skip("systemd-analyze is not installed here (Debian's systemd package)")
    checked = subprocess.run([verify, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    broken = tmp_path / "broken" / "gpudeck.service"  # (and the check is one: a unit it must refuse)
    broken.parent.mkdir()
    broken.write_text(text.replace(f"ExecStart={sys.prefix}/bin/gpudeck", "ExecStart=gpudeck-nowhere"))
    assert subprocess.run([verify, "verify", str(broken)], capture_output=True, text=True).returncode != 0
