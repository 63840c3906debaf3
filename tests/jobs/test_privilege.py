"""Issue 37 #1 as an attacker would try it, without a stack: a job in its sandbox (jobs.run.launch.sandboxed, as a
worker starts it) reads its capabilities, unmounts each cover and remounts `/` read-write, reads /etc/shadow and a 0600
file of the service in a 0700 folder, talks to a root-only unix socket, writes outside its dirs, tries su. Every
attempt fails; it still writes its job dir, /tmp and HOME. As root (as CI runs) the job is GPUDECK_JOB_USER; as a
plain user, that user in a user namespace. And the job's environment is an allowlist (#5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.record import Kept
from jobs.run import launch, sandbox
from jobs.settings import Settings

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "scripts" / "privilege.py"
ROOT = os.geteuid() == 0


def run_boxed(tmp_path: Path, settings: Settings, env: dict[str, str]) -> dict:
    job_dir = settings.job_dir(5)
    job_dir.mkdir(parents=True)
    ctx = launch.WorkerContext(settings, "w1", gpu_ids=[])
    attempt = launch.Attempt(5, 1, "gpudeck-5-1.privilege", job_dir)
    how = launch.command(ctx, attempt, Kept({"command": [sys.executable, str(SCRIPT)], "env": env}), None, {})
    lifeline, held = os.pipe()
    boxed = launch.sandboxed(ctx, how, job_dir, [], lifeline=lifeline)
    try:
        out = subprocess.run(
            boxed.argv, env=boxed.env, pass_fds=boxed.fds(), capture_output=True, timeout=120, start_new_session=True
        )
    finally:
        boxed.close_files()
        os.close(held)
    lines = [line for line in out.stdout.decode().splitlines() if line.startswith("PRIVILEGE ")]
    assert out.returncode == 0 and lines, out.stdout.decode()[-2000:] + out.stderr.decode()[-2000:]
    return json.loads(lines[0][len("PRIVILEGE ") :])


def test_a_job_has_no_privilege_and_cannot_reach_what_its_permissions_deny(tmp_path, service_secrets, monkeypatch):
    if sandbox.unavailable():
        pytest.skip(sandbox.unavailable())
    monkeypatch.setenv("HF_TOKEN", "hf_operator_secret")  # the operator's, in the shell that ran the worker
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # (what an operator sets for GPUs passes)
    monkeypatch.setenv("LAB_PROXY", "http://proxy:3128")  # (passed by name: GPUDECK_PASS_ENV)
    home = tmp_path / "home"
    settings = Settings(home=home, pass_env=("LAB_PROXY",), redis_url=f"unix://{home}/redis/redis.sock")
    (home / "redis").mkdir(parents=True)
    (home / "redis" / "up.lock").write_text("the service's")
    covers = [str(home), "/tmp", os.path.expanduser("~")]
    targets = ["/etc/pwned", str(service_secrets / "pwned"), str(home / "pwned"), "/pwned"]
    env = {
        "COVERS": ":".join(covers),
        "SECRET_FILE": str(service_secrets / "secret"),
        "ROOT_SOCKET": str(service_secrets / "daemon.sock"),
        "WRITE_TARGETS": ":".join(targets),
    }
    report = run_boxed(tmp_path, settings, env)

    assert report["CapEff"] == report["CapPrm"] == report["CapAmb"] == "0000000000000000", report
    assert report["NoNewPrivs"] == "1", report  # no setuid binary or file capability gives anything back
    if ROOT:  # the worker is root: the job is GPUDECK_JOB_USER (nobody here), all capability sets empty
        assert (report["uid"], report["euid"]) == sandbox.job_user(None) or report["uid"] != 0, report
        assert report["uid"] != 0 and report["gid"] != 0 and report["groups"] == [], report
        assert report["CapBnd"] == report["CapInh"] == "0000000000000000", report
    for cover in covers:
        assert report["umount_cli"][cover] != 0 and report["umount_syscall"][cover] != 0, report
    assert report["remount_rw"] != 0 and report["mount_tmpfs"] != 0, report
    assert report["home_after"] == [] or report["home_after"] is None or "redis" not in report["home_after"], report
    assert report["setuid_root"] != 0, report
    assert report["wrote_outside"] == [], report
    assert not any(Path(t).exists() for t in targets)
    assert report["own"] == {"job_dir": None, "tmp": None, "home": None}, report
    assert (settings.job_dir(5) / "own.txt").read_text() == "pwned"
    if ROOT:  # (a plain user's job runs as that user: its own files are its own, /etc/shadow never was)
        assert report["shadow"] == "PermissionError" and report["secret_file"] == "PermissionError", report
        assert report["root_socket"] == "PermissionError", report
    # the environment: an allowlist, the operator's secret not in it
    assert "HF_TOKEN" not in report["env"] and "REDIS_URL" not in report["env"], report["env"]
    assert "NCCL_DEBUG" in report["env"] and "LAB_PROXY" in report["env"] and "HOME" in report["env"]


def test_the_job_user_is_named_by_the_operator_and_never_root(monkeypatch):
    if not ROOT:
        assert sandbox.job_user("nobody") is None  # (a plain user's worker: its jobs run as that user)
        return
    from jobs.errors import ConfigError

    assert sandbox.job_user(None) == sandbox.job_user("nobody") != None  # noqa: E711
    assert sandbox.job_user("4321:4322") == (4321, 4322)
    for bad in ("root", "0", "4321:0", "no-such-user-here", "4321:staff"):
        with pytest.raises(ConfigError, match="GPUDECK_JOB_USER"):
            sandbox.job_user(bad)


def test_the_job_dir_is_handed_to_the_job_user_links_and_all_without_following_them(tmp_path):
    if not ROOT:
        pytest.skip("handing files over needs root")
    job_dir = tmp_path / "job"
    (job_dir / "src").mkdir(parents=True)
    (job_dir / "src" / "train.py").write_text("print(1)")
    outside = tmp_path / "outside"
    outside.write_text("root's")
    (job_dir / "link").symlink_to(outside)
    sandbox.hand_over(job_dir, (4321, 4322))
    for p in (job_dir, job_dir / "src", job_dir / "src" / "train.py", job_dir / "link"):
        assert (os.lstat(p).st_uid, os.lstat(p).st_gid) == (4321, 4322), p
    assert os.stat(outside).st_uid == 0  # what a link points at stays as it was
    # and what the service writes there at an attempt's start goes through no link a job left
    (job_dir / "log.txt").symlink_to(outside)
    (job_dir / "spec.json").symlink_to(outside)
    with launch.LogFile(job_dir / "log.txt") as log_file:
        log_file.write("a line\n")
    launch.write_new(job_dir / "spec.json", "{}\n")
    assert outside.read_text() == "root's"
    assert (job_dir / "log.txt").read_text() == "a line\n" and (job_dir / "spec.json").read_text() == "{}\n"


def test_the_listener_of_a_port_is_known_by_its_process(tmp_path):
    """What a notebook session checks before it sends its token to the port it chose (issue 37 #6): whoever listens
    there. A process of another job that bound the port first is not the session's own."""
    import time

    from jobs.redis_server import free_port
    from jobs.run.proc import descendants, listening_pids

    port = free_port()
    code = f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1',{port})); s.listen(); print(1, flush=True)"
    code += "; time.sleep(60)"
    squatter = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert squatter.stdout.readline().strip() == b"1"
        deadline = time.monotonic() + 10
        while not listening_pids(port):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert listening_pids(port) == {squatter.pid}
        assert not listening_pids(port) <= descendants(os.getpid()) - {squatter.pid}  # not ours but for its pid
    finally:
        squatter.kill()
        squatter.wait()
        squatter.stdout.close()
