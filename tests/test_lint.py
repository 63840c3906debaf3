"""The code stays ruff-clean (lint and format, with the settings in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = str(Path(sys.executable).parent / "ruff")
PACKAGES = ["api", "jobs", "models", "tui", "tests"]


def test_ruff_check():
    run = subprocess.run([RUFF, "check", *PACKAGES], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout


def test_ruff_format():
    run = subprocess.run([RUFF, "format", "--check", *PACKAGES], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
