"""What an attempt runs, without Redis or RQ (jobs.run.launch): a command's environment (gpudeck's variables, the job's
own, its secrets; none of the worker's), the trainer's, a retry's checkpoints, refusals, and the sandbox's
command line and options."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from jobs.record import Kept
from jobs.run import launch, sandbox
from jobs.run.proc import SHIM_FILE
from jobs.settings import Settings
from models import protocol


@pytest.fixture
def ctx(tmp_path: Path) -> launch.WorkerContext:
    venv = tmp_path / "venvs" / "tf"
    (venv / "bin").mkdir(parents=True)
    settings = Settings(home=tmp_path / "home", envs=(("tf", venv),), redis_url="unix:///run/gpudeck/redis.sock")
    return launch.WorkerContext(settings, "w1", gpu_ids=["0", "1"], stop_grace_s=20.0)


@pytest.fixture
def attempt(ctx: launch.WorkerContext) -> launch.Attempt:
    job_dir = ctx.settings.job_dir(7)
    job_dir.mkdir(parents=True)
    return launch.Attempt(job_id=7, attempt=2, run_id="gpudeck-7-2.abc", job_dir=job_dir)


def test_a_command_gets_gpudecks_variables_its_own_and_none_of_the_workers(ctx, attempt, monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://secret-host:6379/0")
    monkeypatch.setenv("GPUDECK_TOKENS", "s3cret")
    spec = {"command": "python train.py", "env": {"LR": "0.1"}, "secret_env": {"API_KEY": "k"}, "env_name": "tf"}
    how = launch.command(ctx, attempt, Kept(spec), data_dir=Path("/data/cifar"), extra_env={"TF_CONFIG": "{}"})
    assert how.argv == ["/bin/sh", "-c", "python train.py"] and how.cwd == attempt.job_dir / "src"
    env = how.env
    assert "REDIS_URL" not in env and "GPUDECK_TOKENS" not in env
    assert env["GPUDECK_JOB_ID"] == "7" and env["GPUDECK_ATTEMPT"] == "2" and env[launch.RUN_ID_ENV] == attempt.run_id
    assert env["GPU_COUNT"] == "2" and env["DATA_DIR"] == "/data/cifar" and env["TF_CONFIG"] == "{}"
    assert env["LR"] == "0.1" and env["API_KEY"] == "k"  # the job's own, its secret too
    assert env["PATH"].startswith(str(ctx.settings.env_python("tf"))) and env["VIRTUAL_ENV"].endswith("tf")
    assert "API_KEY" not in how.injected and how.injected["SRC_DIR"] == str(attempt.job_dir / "src")


def test_the_trainer_writes_its_events_to_the_descriptor_it_is_given(ctx, attempt, monkeypatch):
    monkeypatch.setenv("GPUDECK_TOKEN", "t")
    how = launch.trainer(ctx, attempt, events_w=9, extra_env={"X": "1"})
    assert how.argv[-6:] == ["-m", "models.train", "--spec", "spec.json", "--job-dir", "."]
    assert how.env[protocol.EVENTS_FD_ENV] == "9" and how.env["X"] == "1" and "GPUDECK_TOKEN" not in how.env
    assert float(how.env[protocol.STOP_GRACE_ENV]) < ctx.stop_grace_s  # its own deadline comes first


def test_a_command_that_cannot_start_here_is_refused_by_name(ctx, attempt):
    with pytest.raises(launch.Refused, match="environment 'torch' is not registered on worker w1"):
        launch.command(ctx, attempt, Kept({"command": "true", "env_name": "torch"}), None, {})
    fresh = launch.Attempt(8, 1, "r", ctx.settings.job_dir(8))  # (no source copy made yet)
    fresh.job_dir.mkdir(parents=True)
    with pytest.raises(launch.Refused, match="source src:.* is not under"):
        launch.command(ctx, fresh, Kept({"command": "true", "source": "src:" + "a" * 64}), None, {})


def test_a_retry_links_the_last_whole_checkpoint_of_the_job_it_retries(ctx, attempt):
    theirs = ctx.settings.job_dir(3) / "checkpoints"
    theirs.mkdir(parents=True)
    for name in ("checkpoint", "ckpt-10.index", "ckpt-10.data-00000-of-00001", "ckpt-12_temp"):
        (theirs / name).write_text(name)
    said = launch.take_checkpoints(ctx.settings, attempt.job_dir, resumes=3)
    assert said == "gpudeck: resuming from the last checkpoint of job 3"
    mine = sorted(p.name for p in (attempt.job_dir / "checkpoints").iterdir())
    assert mine == ["checkpoint", "ckpt-10.data-00000-of-00001", "ckpt-10.index"]  # the cut-short save left out
    assert launch.take_checkpoints(ctx.settings, attempt.job_dir, resumes=3) is None  # its own now
    assert "left no checkpoint" in launch.take_checkpoints(ctx.settings, ctx.settings.job_dir(8), resumes=4)


def test_the_sandbox_gets_the_environment_through_a_descriptor_and_bwrap_runs_with_path_alone(ctx, attempt):
    if sandbox.unavailable():
        pytest.skip(sandbox.unavailable())
    how = launch.command(ctx, attempt, Kept({"command": "true", "secret_env": {"API_KEY": "k"}}), None, {})
    lifeline, held = os.pipe()
    boxed = launch.sandboxed(ctx, how, attempt.job_dir, [Path("/data")], lifeline=lifeline)
    try:
        assert boxed.sandboxed and boxed.argv[0].endswith("bwrap") and "--args" in boxed.argv
        inside = boxed.argv[boxed.argv.index("--") + 1 :]  # what bubblewrap runs: the shim, then the command
        who = "-" if os.geteuid() else ":".join(map(str, sandbox.job_user(None) or ()))  # (root: GPUDECK_JOB_USER)
        env_fd = boxed.fds()[1]
        assert inside[-10:] == ["-I", "-S", SHIM_FILE, str(lifeline), who, str(env_fd), "--", "/bin/sh", "-c", "true"]
        assert "k" not in boxed.argv and set(boxed.env) <= set(sandbox.BWRAP_ENV)  # the secret is not on its line
        options_fd = boxed.fds()[0]
        options = os.pread(options_fd, 1 << 20, 0).split(b"\0")
        # the shim starts with a fixed environment; the job's comes through its own descriptor
        assert b"--clearenv" in options and b"API_KEY" not in options
        setenv = [options[i + 1] for i, o in enumerate(options) if o == b"--setenv"]
        assert set(setenv) == {k.encode() for k in sandbox.SHIM_ENV}, setenv
        assert b"API_KEY=k\0" in os.pread(env_fd, 1 << 20, 0)
        for hidden in (ctx.settings.home, Path("/run/gpudeck")):
            if hidden.is_dir():
                assert options[options.index(str(hidden).encode()) - 1] == b"--tmpfs"
        assert options[options.index(str(attempt.job_dir).encode()) - 1] == b"--bind"
    finally:
        boxed.close_files()  # (the lifeline's read end with it: the sandbox's now)
        os.close(held)
    off = launch.WorkerContext(Settings(home=ctx.settings.home, sandbox="off"), "w1")
    assert launch.sandboxed(off, how, attempt.job_dir, [], lifeline=-1) is how


def test_a_sandboxed_job_whose_work_horse_died_leaves_nothing_in_its_sandbox(ctx, attempt):
    """Found by the chaos soak: a work-horse killed with SIGKILL (it is the one that ends what a job leaves) left
    an escaping job's strays (setsid, an empty environment) alive in their sandbox, and bubblewrap waiting on them,
    for good. The shim, when the lifeline closes, now ends everything in the sandbox's PID namespace."""
    import subprocess
    import time

    from tests.support.live import environ

    if sandbox.unavailable():
        pytest.skip(sandbox.unavailable())
    marker = f"gpudeck-stray-{os.getpid()}"
    script = f"setsid env -i SOAK_STRAY={marker} sleep 300 >/dev/null 2>&1 </dev/null & echo started; sleep 300"
    how = launch.command(ctx, attempt, Kept({"command": script}), None, {})
    lifeline, held = os.pipe()
    boxed = launch.sandboxed(ctx, how, attempt.job_dir, [], lifeline=lifeline)
    proc = subprocess.Popen(
        boxed.argv, env=boxed.env, pass_fds=boxed.fds(), stdout=subprocess.PIPE, start_new_session=True
    )
    boxed.close_files()

    def strays() -> list[int]:
        return [int(e) for e in os.listdir("/proc") if e.isdigit() and environ(int(e)).get("SOAK_STRAY") == marker]

    try:
        assert proc.stdout.readline().strip() == b"started"
        deadline = time.monotonic() + 10
        while not strays():
            assert time.monotonic() < deadline, "the stray did not start"
            time.sleep(0.05)
        os.close(held)  # the work-horse is gone
        held = -1
        proc.wait(60)  # the shim stops the job (SIGTERM to its group), then ends the rest of the sandbox
        deadline = time.monotonic() + 15
        while strays():
            assert time.monotonic() < deadline, "a stray outlived its job's work-horse"
            time.sleep(0.1)
    finally:
        if held != -1:
            os.close(held)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_python_is_the_registered_environments_python3_where_it_has_no_python(ctx, attempt, tmp_path):
    """Issue 43: `GPUDECK_ENVS=torch=/usr` on Debian (a /usr/bin with python3 and no python): a command's `python`
    is that environment's python3, not `/bin/sh: python: not found`."""
    import subprocess
    from dataclasses import replace

    usr = tmp_path / "usr"
    (usr / "bin").mkdir(parents=True)
    (usr / "bin" / "python3").symlink_to(os.path.realpath(sys.executable))
    debian = replace(ctx, settings=replace(ctx.settings, envs=(("torch", usr),)))
    spec = Kept({"command": "python -c 'import sys; print(sys.version_info[0])'", "env_name": "torch"})
    how = launch.command(debian, attempt, spec, None, {})
    ran = subprocess.run(how.argv, cwd=how.cwd, env=how.env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stdout.strip() == "3", ran.stderr
    assert how.env["PATH"].split(os.pathsep)[1] == str(usr / "bin") and how.env["VIRTUAL_ENV"] == str(usr)


def test_the_sandbox_shows_the_folder_gpudecks_packages_are_imported_from():
    """A job's trainer runs `python -m models.train` inside the sandbox: the folder holding models/ and jobs/ must
    be readable there, wherever the checkout lies (a clone under /tmp, which the sandbox otherwise covers)."""
    import models

    assert Path(models.__file__).resolve().parents[1] in sandbox.runtime_paths()
