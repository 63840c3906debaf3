"""`gpudeck doctor` against a real `gpudeck up` on two FAKE GPUs (a fake nvidia-smi on PATH: none exist here): a
short real training runs on each GPU at once, each on its own, and the doctor says that TensorFlow saw no GPU in
them (true: these are fakes) and what to do, exit 1; every other check passes (`--no-job`: exit 0); on a Redis
that would lose the queue at a restart it says so, says what to do, and exits 1."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest
import requests

from jobs import gpuhealth
from jobs.run.proc import python_module
from tests.support.live import fake_gpus, fake_nvidia_smi
from tests.support.stack import Up

pytestmark = pytest.mark.slow


def test_gpudeck_doctor_says_whether_the_box_is_ready_and_what_to_do(tmp_path, child_env, redis, redis_url):
    fake_nvidia_smi(tmp_path / "bin", fake_gpus(2))
    env = {**child_env, "PATH": f"{tmp_path / 'bin'}:{child_env['PATH']}"}
    up = Up(tmp_path / "home", env, tmp_path / "up.log", redis_url=redis_url)
    cli = {k: v for k, v in env.items() if k != "REDIS_URL"} | {"GPUDECK_API": up.url}
    try:
        # (--plain: float32 without XLA, whose compile on this CPU doubled each trial's cost; the default's trials:
        # tests/tui/test_doctor_checks.py)
        doctor = python_module("tui.cli", "doctor", "--plain")
        ran = subprocess.run(doctor, env=cli, capture_output=True, text=True, timeout=600)
        assert ran.returncode == 1, (ran.stdout, ran.stderr, up.output()[-3000:])  # (fake GPUs: TensorFlow sees none)
        lines = ran.stdout.splitlines()
        blind = next(x for x in lines if " tensorflow sees the GPU " in x)
        assert blind.startswith("✗") and "trained on CPU" in blind, lines
        assert "fix: TensorFlow found no GPU inside the job's sandbox" in ran.stdout
        marks = {line.split()[1]: line.split()[0] for line in lines[1:] if line[:1] in "✓✗–"}
        assert marks["api"] == marks["redis"] == marks["disk"] == marks["workers"] == marks["sandbox"] == "✓", lines
        assert marks["gpus"] == "✓" and "2: " in next(x for x in lines if " gpus " in x), lines
        trials = [x for x in lines if " training (job " in x]
        assert len(trials) == 2 and all(x.startswith("✓") and "20 steps on " in x for x in trials), lines
        trained = [requests.get(f"{up.url}/api/v1/jobs/{n}").json()["spec"]["params"] for n in (1, 2)]
        assert all(p["steps"] == 20 and "xla" not in p and "mixed_precision" not in p for p in trained), trained
        assert sorted("(GPU 0)" in x for x in trials) == [False, True] and any("(GPU 1)" in x for x in trials), lines

        assert next(x for x in lines if " pinning " in x).startswith("✓"), lines
        host = socket.gethostname()
        assert next(x for x in lines if f" driver ({host}) " in x).split()[-1] == "550.54.15", lines
        assert next(x for x in lines if f" clock ({host}) " in x).startswith("✓"), lines  # (one host: its own clock)
        assert next(x for x in lines if f" mps ({host}) " in x).startswith("–"), lines  # (no MPS tools here)
        assert [x[:1] for x in lines[1:] if x[:1] in "✓✗–"].count("✗") == 1, lines  # (that one only)
        assert ran.stderr.strip().endswith("not ready: see the ✗ lines")
        ran = subprocess.run(python_module("tui.cli", "doctor", "--no-job"), env=cli, capture_output=True, text=True)
        assert ran.returncode == 0 and ran.stderr.strip().endswith("ready"), (ran.stdout, ran.stderr)

        saved = redis.config_get("save")["save"]
        redis.config_set("save", "")  # (the session's Redis: no append-only file, and now no snapshots either)
        try:
            ran = subprocess.run(
                python_module("tui.cli", "doctor", "--no-job", "--json"), env=cli, capture_output=True, text=True
            )
        finally:
            redis.config_set("save", saved)
        assert ran.returncode == 1, (ran.stdout, ran.stderr)
        doc = json.loads(ran.stdout)
        saving = next(x for x in doc["checks"] if x["name"] == "redis saving")
        assert doc["ok"] is False and saving["result"] == "fail" and "appendonly yes" in saving["fix"], doc
        assert next(x for x in doc["checks"] if x["name"] == "training")["result"] == "skip"

        # (a hardware XID the kernel log reported on GPU 1: tests/e2e/test_gpu_health.py)
        gpuhealth.cordon(redis, host, "1", {"xid": 79, "at": 1.0, "text": "fell off the bus"})
        ran = subprocess.run(
            python_module("tui.cli", "doctor", "--no-job", "--json"), env=cli, capture_output=True, text=True
        )
        doc = json.loads(ran.stdout)
        out = next(x for x in doc["checks"] if x["name"] == "cordoned gpus")
        assert ran.returncode == 1 and out["result"] == "fail" and f"{host}:1 (Xid 79)" in out["detail"]
        assert "gpudeck gpu uncordon" in out["fix"]
        assert next(x for x in doc["checks"] if x["name"] == "gpu memory released")["result"] == "ok"
    finally:
        up.kill()
