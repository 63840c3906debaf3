"""Command jobs end to end, with real workers and real scripts that know nothing of gpudeck: the README's
`gpudeck run` walkthrough (Keras + TensorBoard callback), a Kibernetika command run unchanged, a 2-task command
job, a SIGTERM-proof forking script canceled, and a checkpointing script resumed after kill -9 of its worker."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jobs import scalars
from jobs.run.launch import RUN_ID_ENV
from tests.support.digits import digits_arrays
from tests.support.live import alive, on_a_terminal, until, wait_job
from tests.support.readme import run_block
from tests.support.stack import Up

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parents[1] / "support" / "scripts"


def marked(run_id: str) -> set[int]:
    """The job's processes: those whose environment carries this attempt's mark (not the sandbox's own: bwrap
    and jobs/run/shim.py, whose environment is its own fixed one anyway)."""
    mark = f"{RUN_ID_ENV}={run_id}".encode()
    found = set()
    for entry in os.listdir("/proc"):
        try:
            if (
                entry.isdigit()
                and mark in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                and alive(int(entry))
                and Path(f"/proc/{entry}/comm").read_text().strip() != "bwrap"
                and b"jobs/run/shim.py" not in Path(f"/proc/{entry}/cmdline").read_bytes()
            ):
                found.add(int(entry))
        except OSError:
            continue
    return found


def event_scalars(folder: Path, tag: str) -> dict[int, float]:
    """What the event files in `folder` hold for `tag`, read independently of gpudeck's reader."""
    scalars._loader_module()  # tensorboard's TensorFlow-free reader, in this process too
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    acc.Reload()
    return {e.step: float(tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)}


TICKING = (
    "import json, os, time\n"
    "for s in range(1, 16):\n"
    "    with open(os.path.join(os.environ['JOB_DIR'], 'metrics.jsonl'), 'a') as f:\n"
    "        f.write(json.dumps({'step': s, 'loss': 1 / s}) + '\\n')\n"
    "    print('tick', s, flush=True)\n"
    "    time.sleep(0.4)\n"
)
"""A script of 15 steps in 6 s, with a metric point each."""


def test_the_readme_walkthrough_runs_a_keras_script_from_its_folder(tmp_path, child_env):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    shutil.copy(SCRIPTS / "keras_train.py", project / "train.py")
    (project / ".gitignore").write_text("data/\n")
    (x_train, y_train), (x_test, y_test) = digits_arrays()
    flat = {"x_train": x_train.reshape(-1, 64) / 255, "y_train": y_train, "x_test": x_test.reshape(-1, 64) / 255}
    np.savez(project / "data" / "digits.npz", **flat, y_test=y_test)  # ~1 MB: must not be uploaded
    env = {
        **child_env,
        "GPUDECK_COMMAND_JOBS": "1",
        "GPUDECK_DATA_ROOTS": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}:{child_env['PATH']}",
    }
    stack = Up(tmp_path / "home", env, tmp_path / "up.log")
    env["GPUDECK_API"] = stack.url
    try:
        ran, shown, metrics, waited = run_block("walkthrough-script", stack.port, project, env=env)
        assert "Epoch 3/3" in ran  # the log, followed live to the end
        assert "command  python train.py --epochs 3" in shown and "2 files" in shown  # data/ stayed home
        job = json.loads(subprocess.check_output(["curl", "-s", f"{stack.url}/api/v1/jobs/1"]))
        assert job["status"] == "succeeded" and job["result"]["test_accuracy"] >= 0.8, stack.output()[-3000:]
        stored = tmp_path / "home" / "sources" / job["source"]["sha256"]
        assert sorted(p.name for p in stored.iterdir()) == [".gitignore", "train.py"]
        assert job["environment"]["DATA_DIR"] == str(project / "data") and job["environment"]["GPUDECK_ATTEMPT"] == "1"
        curves = json.loads(metrics)
        tensorboard = tmp_path / "home" / "jobs" / "1" / "tensorboard"
        train_loss = {p["step"]: p["loss"] for p in curves["train"] if "loss" in p}
        val_loss = {p["step"]: p["val_loss"] for p in curves["validation"] if "val_loss" in p}
        assert train_loss == event_scalars(tensorboard / "train", "epoch_loss") and len(train_loss) == 3
        assert val_loss == event_scalars(tensorboard / "validation", "epoch_loss") and len(val_loss) == 3
        assert "succeeded" in waited
        gate = subprocess.run(
            ["gpudeck", "wait", "1", "--min-accuracy", "1.01"], env=env, capture_output=True, text=True, timeout=60
        )
        assert gate.returncode == 1 and "test_accuracy" in gate.stderr and "below --min-accuracy 1.01" in gate.stderr
        submitted, waited = run_block("walkthrough-script-rest", stack.port, project, env=env)
        assert json.loads(submitted)["source"]["files"] == 1
        job = json.loads(waited)
        assert job["status"] == "succeeded" and job["environment"]["SEED"] == "1", job

        # --detach prints the id; Ctrl-C stops following, not the job, and says how to go on.
        detached = subprocess.run(
            ["gpudeck", "run", "--no-source", "--detach", "--", "echo", "detached"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert detached.returncode == 0 and detached.stdout.strip() == "3"
        following = subprocess.Popen(
            ["gpudeck", "run", "--no-source", "--", "echo", "started;", "sleep", "60"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # A terminal's Ctrl-C: started from a background shell (CI), SIGINT would be inherited as ignored.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            assert following.stdout.readline().strip() == "started"  # job 4's log, live
            following.send_signal(signal.SIGINT)
            out, err = following.communicate(timeout=30)
        finally:
            if following.poll() is None:
                following.kill()
                following.communicate()
        assert following.returncode == 130
        assert "gpudeck logs 4 -f" in err and "gpudeck cancel 4" in err
        show = json.loads(subprocess.check_output(["gpudeck", "show", "4", "--json"], env=env))
        assert show["status"] == "running"  # it goes on
        subprocess.run(["gpudeck", "cancel", "4"], env=env, check=True, capture_output=True)

        # Issue 24 #6: on a terminal, `gpudeck run` keeps the job's status line (step, loss, ETA) under its log.
        argv = ["gpudeck", "run", "--no-source", "--total-steps", "15", "--", "python", "-c", shlex.quote(TICKING)]
        shown = on_a_terminal(argv, env)
        assert "tick 15" in shown, shown[-2000:]
        assert re.search(r"job 5 running +step \d+/15 +loss \d\.\d{4} +eta \d+s", shown), shown[-2000:]
    finally:
        stack.kill()


def test_seed_commands_multi_worker_tasks_and_a_stubborn_script(command_client, spawn, child_env, settings, tmp_path):
    client = command_client
    roots = tmp_path / "roots"
    source = roots / "kibernetika"
    source.mkdir()
    shutil.copy(SCRIPTS / "cifar10_main.py", source)
    shutil.copy(SCRIPTS / "stubborn.py", source)
    data = roots / "cifar"
    data.mkdir()
    (data / "data_batch_1.bin").write_bytes(b"\0" * 10)
    venv = tmp_path / "venvs" / "tf"  # an environment the operator registered: `python` is its own
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    env = {**child_env, "GPUDECK_ENVS": f"tf={venv}"}
    for name in ("a", "b"):
        spawn("worker", "--cpu", "--stop-grace", "3", env=env, name=name)
    until(lambda: len(client.get("/api/v1/workers").json["workers"]) == 2)

    # Kibernetika's execution command, unchanged.
    seed = (
        "python cifar10_main.py --num-gpus=$GPU_COUNT --train-steps=1000 --data-dir=$DATA_DIR "
        "--job-dir=$TRAINING_DIR/$BUILD_ID"
    )
    job_id = client.post("/api/v1/jobs", json={"command": seed, "source": str(source), "dataset": str(data)}).json["id"]
    job, _ = wait_job(client, job_id, timeout=60)
    assert job["status"] == "succeeded", job
    line = next(x for x in client.get(f"/api/v1/jobs/{job_id}/logs").text.splitlines() if "cifar10_main" in x)
    got = json.loads(line.split("cifar10_main ", 1)[1])
    job_dir = settings.job_dir(job_id)
    assert got["num_gpus"] == 0 and got["train_steps"] == 1000 and got["files"] == ["data_batch_1.bin"]
    assert got["data_dir"] == str(data) and got["job_dir"] == f"{job_dir}/{job_id}"

    # A job that names a registered environment runs its python.
    named = client.post("/api/v1/jobs", json={"command": "command -v python; echo $VIRTUAL_ENV", "env_name": "tf"})
    job, _ = wait_job(client, named.json["id"], timeout=60)
    assert job["status"] == "succeeded", job
    lines = client.get(f"/api/v1/jobs/{job['id']}/logs").text.splitlines()
    assert lines == [str(venv / "bin" / "python"), str(venv)]

    # Two tasks, each with its own TF_CONFIG, one log.
    two = client.post(
        "/api/v1/jobs",
        json={
            "command": "python cifar10_main.py --num-gpus=1 --train-steps=1 --data-dir=$DATA_DIR --job-dir=$SRC_DIR",
            "source": str(source),
            "dataset": str(data),
            "workers": 2,
        },
    ).json["id"]
    job, _ = wait_job(client, two, timeout=90)
    assert job["status"] == "succeeded", job
    lines = client.get(f"/api/v1/jobs/{two}/logs").text.splitlines()
    tasks = {}
    for prefix in ("[worker0] ", "[worker1] "):
        got = json.loads(next(x for x in lines if x.startswith(prefix + "cifar10_main")).split("cifar10_main ", 1)[1])
        tasks[prefix] = json.loads(got["TF_CONFIG"])
        assert got["GPUDECK_TASK_TYPE"] == "worker" and got["GPUDECK_TASK_INDEX"] == prefix[7]
    assert [t["task"] for t in tasks.values()] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert tasks["[worker0] "]["cluster"] == tasks["[worker1] "]["cluster"], "\n".join(lines)

    # PyTorch's variables (issue 30 #2): each task meets the others at MASTER_ADDR:MASTER_PORT, as
    # init_process_group("gloo") would; a job of one task is a world of one with a master of its own.
    shutil.copy(SCRIPTS / "rendezvous.py", source)
    met = client.post("/api/v1/jobs", json={"command": "python rendezvous.py", "source": str(source), "workers": 2})
    job, _ = wait_job(client, met.json["id"], timeout=90)
    assert job["status"] == "succeeded", job
    lines = client.get(f"/api/v1/jobs/{job['id']}/logs").text.splitlines()
    seen = [json.loads(x.split("rendezvous ", 1)[1]) for x in lines if " rendezvous {" in x]
    seen.sort(key=lambda v: v["RANK"])
    assert [(v["RANK"], v["NODE_RANK"], v["peers"]) for v in seen] == [("0", "0", [1]), ("1", "1", [0])], lines
    assert {(v["MASTER_ADDR"], v["MASTER_PORT"], v["WORLD_SIZE"], v["NNODES"]) for v in seen} == {
        (seen[0]["MASTER_ADDR"], seen[0]["MASTER_PORT"], "2", "2")
    }
    assert {(v["LOCAL_RANK"], v["LOCAL_WORLD_SIZE"]) for v in seen} == {("0", "1")}
    alone = client.post("/api/v1/jobs", json={"command": "python rendezvous.py", "source": str(source)})
    job, _ = wait_job(client, alone.json["id"], timeout=60)
    assert job["status"] == "succeeded", job
    line = next(x for x in client.get(f"/api/v1/jobs/{job['id']}/logs").text.splitlines() if "rendezvous {" in x)
    one = json.loads(line.split("rendezvous ", 1)[1])
    assert (one["WORLD_SIZE"], one["RANK"], one["NNODES"], one["MASTER_ADDR"], one["peers"]) == (
        "1",
        "0",
        "1",
        "127.0.0.1",
        [],
    )

    # A script that ignores SIGTERM and forks (one child leaves the process group): cancel ends all of them.
    stubborn = client.post("/api/v1/jobs", json={"command": ["python", "stubborn.py"], "source": str(source)}).json[
        "id"
    ]
    until(lambda: len(client.get(f"/api/v1/jobs/{stubborn}/metrics").json["train"]) >= 3, 60, "a curve while it runs")
    assert client.get(f"/api/v1/jobs/{stubborn}").json["status"] == "running"
    procs = marked(client.get(f"/api/v1/jobs/{stubborn}").json["environment"]["GPUDECK_RUN_ID"])
    assert len(procs) == 3, procs
    canceled = time.monotonic()
    client.post(f"/api/v1/jobs/{stubborn}/cancel")
    job, _ = wait_job(client, stubborn, timeout=30)
    took = time.monotonic() - canceled
    assert job["status"] == "canceled" and took < 3 + 8, (job, took)
    until(lambda: not any(alive(p) for p in procs), 5, "every process of the canceled script gone")


def test_a_checkpointing_script_resumes_after_its_worker_is_killed(command_client, spawn, child_env, settings, redis):
    client = command_client
    source = Path(settings.home).parent / "roots" / "ckpt"
    source.mkdir(parents=True)
    shutil.copy(SCRIPTS / "checkpointed.py", source)
    first = spawn("worker", "--cpu", env=child_env, name="doomed")
    job_id = client.post(
        "/api/v1/jobs", json={"command": "python checkpointed.py", "source": str(source), "total_steps": 40}
    ).json["id"]
    until(lambda: len(client.get(f"/api/v1/jobs/{job_id}/metrics").json["train"]) >= 12, 90, "12 steps logged")
    job = client.get(f"/api/v1/jobs/{job_id}").json
    assert job["status"] == "running" and job["progress"]["total_steps"] == 40 and job["eta_s"] is not None
    script = int(redis.hget(f"gpudeck:job:{job_id}", "pid"))
    horse = int(Path(f"/proc/{script}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(first.proc.pid, signal.SIGKILL)
    os.kill(horse, signal.SIGKILL)
    spawn("worker", "--cpu", env=child_env, name="rescuer")
    job, _ = wait_job(client, job_id, timeout=120)
    assert job["status"] == "succeeded" and job["attempt"] == 2, job
    log = client.get(f"/api/v1/jobs/{job_id}/logs").text
    resumed_at = int(log.split("attempt 2: resumed at step ")[1].split()[0])
    assert resumed_at >= 10 and resumed_at % 5 == 0
    steps = [p["step"] for p in client.get(f"/api/v1/jobs/{job_id}/metrics").json["train"]]
    # The first attempt's points, each step once, then the second's from its checkpoint on (not from 0).
    k = next((i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]), resumed_at)
    first, second = steps[:k], steps[k:]
    assert first == list(range(1, k + 1)) and k >= resumed_at, steps
    assert second == list(range(resumed_at + 1, 41)), steps
    assert job["result"]["loss"] == pytest.approx(4.0**2 * 0.81**40, rel=1e-4)  # its last logged value


BARS = r"""
import sys, time
for i in range(1, 6):  # Keras' bar, piped: each update after a carriage return, backspaces, colour
    sys.stdout.write("\r" + f"{i}/5 [" + "=" * i + "." * (5 - i) + "] - \x1b[1mloss\x1b[0m: 0.5" + "\b" * 3 + "0.4")
    sys.stdout.flush()
print()
for i in (0, 50, 100):  # tqdm's, on stderr
    sys.stderr.write(f"\r{i:3d}%|{'#' * (i // 10):<10}| {i // 10}/10")
    sys.stderr.flush()
sys.stderr.write("\n")
print("done")
"""


def test_progress_bars_read_as_a_terminal_leaves_them(command_client, spawn, child_env, settings):
    """Issue 24 #5: a line of carriage returns, backspaces and colour codes reads as its final state in the log
    everyone reads (/logs, gpudeck logs, the TUI); the job dir's log.txt keeps the bytes as written."""
    spawn("worker", "--cpu", env=child_env)
    job_id = command_client.post("/api/v1/jobs", json={"command": [sys.executable, "-c", BARS]}).json["id"]
    job, _ = wait_job(command_client, job_id, timeout=120)
    assert job["status"] == "succeeded", job
    lines = command_client.get(f"/api/v1/jobs/{job_id}/logs").get_data(as_text=True).splitlines()
    assert "5/5 [=====] - loss: 0.4" in lines and "100%|##########| 10/10" in lines, lines
    assert lines[-1] == "done" and not any("\r" in line or "\b" in line or "\x1b" in line for line in lines)
    raw = (settings.job_dir(job_id) / "log.txt").read_bytes().decode()  # (read_text reads \r as a newline)
    assert "\r1/5 [=....]" in raw and "\b\b\b0.4" in raw and "\x1b[1mloss" in raw
