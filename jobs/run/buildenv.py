"""`python -m jobs.run.buildenv`: build a project's Python environment with uv, inside the job's sandbox (building runs
the project's own code: build backends, setup.py), into the one folder the sandbox lets it write. Every line of
its output goes to the job's log after `[env] `; its exit status is uv's. The work-horse (jobs.run.pyenv) decides
whether to build, holds the lock, and marks the folder ready once this succeeded: a folder without the mark is
never used. Imports nothing but the standard library (it runs with the worker's Python, in the sandbox)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

PREFIX = "[env] "
WORKER_PTH = "_gpudeck_worker.pth"
"""Puts the worker's own site-packages after the environment's own (TensorFlow and its CUDA libraries)."""


def say(line: str) -> None:
    print(PREFIX + line, flush=True)


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> int:
    """Run a uv command, its every output line after PREFIX; its exit status."""
    say("$ " + " ".join(a if " " not in a else repr(a) for a in ["uv", *argv[1:]]))
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        say(line.rstrip("\n"))
    return proc.wait()


def site_packages(env_dir: Path) -> Path:
    return env_dir / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def show_worker(env_dir: Path, worker_sites: list[str]) -> None:
    """Make the worker's packages visible behind the environment's own, and known to uv as installed (their
    metadata copied), so a requirement the worker meets is not downloaded again; a version the project pins
    otherwise is installed into the environment, which comes first."""
    target = site_packages(env_dir)
    (target / WORKER_PTH).write_text("".join(f"{site}\n" for site in worker_sites))
    for site in worker_sites:
        for dist in Path(site).glob("*.dist-info"):
            if not (target / dist.name).exists():
                shutil.copytree(dist, target / dist.name, ignore=shutil.ignore_patterns("RECORD"))
                (target / dist.name / "RECORD").write_text("")  # (uninstalling it removes only its metadata)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.run.buildenv")
    ap.add_argument("--uv", required=True)
    ap.add_argument("--env", required=True, type=Path, help="the folder to build into")
    ap.add_argument("--python", required=True)
    ap.add_argument("--requirements", help="a requirements file (else: uv.lock and pyproject.toml in --project)")
    ap.add_argument("--project", type=Path, help="the source folder with pyproject.toml and uv.lock")
    ap.add_argument("--worker-site", action="append", default=[], help="the worker's site-packages (repeatable)")
    ap.add_argument("--packages", type=int, default=0)
    args = ap.parse_args(argv)
    env = dict(os.environ)
    env.update(UV_CACHE_DIR=str(args.env / ".uv-cache"), UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1")
    env.pop("VIRTUAL_ENV", None)
    say(f"building environment ({args.packages} packages) in {args.env}")
    code = run([args.uv, "venv", "--quiet", "--allow-existing", "--python", args.python, str(args.env)], env)
    if code == 0 and args.worker_site:
        show_worker(args.env, args.worker_site)
    if code == 0 and args.requirements:
        code = run(
            [args.uv, "pip", "install", "--python", str(args.env / "bin" / "python"), "-r", args.requirements], env
        )
    elif code == 0:
        env["UV_PROJECT_ENVIRONMENT"] = str(args.env)
        code = run([args.uv, "sync", "--frozen", "--no-install-project", "--inexact"], env, cwd=args.project)
    shutil.rmtree(args.env / ".uv-cache", ignore_errors=True)
    say("environment ready" if code == 0 else f"the environment could not be built (uv exited with status {code})")
    return code


if __name__ == "__main__":
    sys.exit(main())
