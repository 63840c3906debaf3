"""jobs.run.warm without a stack: which jobs may start warm, why one cannot, the code version an upgrade changes,
the job dir moved into a warm folder (and put back on a failure), and the exit status read from bubblewrap's status
pipe by a process that is not bubblewrap's parent."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.record import Kept
from jobs.run import sandbox, warm
from jobs.run.warm import Adopted, Warm


def a_warm(tmp_path: Path, status: int = -1, readable: list[Path] | None = None) -> Warm:
    folder = tmp_path / "home" / "warm" / "box-1-abc"
    folder.mkdir(parents=True)
    proc = subprocess.Popen(["true"])
    proc.wait()
    return Warm(proc, folder, "warm-w.abc", warm.code_version(), 9, -1, -1, status, -1, readable or [])


def test_a_zoo_job_or_a_python_command_of_one_worker_is_handed_a_warm_process():
    assert warm.warm_wanted(Kept({"model": "lenet", "dataset": "synthetic"}))
    assert warm.warm_wanted(Kept({"model": "lenet", "dataset": "synthetic", "workers": 1}))
    assert not warm.warm_wanted(Kept({"model": "resnet20", "dataset": "synthetic", "workers": 2}))
    assert warm.warm_wanted(Kept({"command": "python train.py"}))
    assert not warm.warm_wanted(Kept({"command": "python train.py", "workers": 2}))
    assert not warm.warm_wanted(Kept({"command": "bash run.sh"}))
    assert not warm.warm_wanted(Kept({"kind": "session", "shell": True}))


def test_which_commands_a_warm_interpreter_can_run_as_python_would():
    inv = warm.python_invocation
    assert inv("python train.py --lr 0.1") == warm.Invocation("python", (), ["train.py", "--lr", "0.1"])
    assert inv("python3 -u -m pkg.train 'a b'") == warm.Invocation("python3", ("-u",), ["-m", "pkg.train", "a b"])
    assert inv(["/opt/venv/bin/python3.11", "t.py"]) == warm.Invocation("/opt/venv/bin/python3.11", (), ["t.py"])
    refused = {
        "python train.py | tee out": "a shell command line",
        "python train.py > out": "a shell command line",
        "LR=1 python train.py": "a shell command line",
        "python $SCRIPT": "a shell command line",
        "python *.py": "a shell command line",
        "python t.py; echo": "a shell command line",
        "exec python t.py": "it runs exec, not python",
        "torchrun --nproc-per-node 2 t.py": "it runs torchrun, not python",
        "python": "python with no script",
        "python -c pass": "python -c (only a script, -m and -u start warm)",
        "python -O t.py": "python -O (only",
        "python -m": "python -m with no module name",
        "python -m 'a b'": "python -m with no module name",
        "python 'unclosed": "a shell command line it cannot read",
    }
    for command, why in refused.items():
        said = inv(command)
        assert isinstance(said, str) and said.startswith(why), (command, said)


def test_what_a_gpus_warm_key_says_to_keep_warm():
    want = warm.PythonWant("/v/bin/python", "/v/bin:/usr/bin", "/v", ("/data",), {"PYTHONUNBUFFERED": "1"}, ("np",))
    now = 1000.0
    assert warm.wanted(None, now, 60) is None
    assert warm.wanted(repr(now - 10).encode(), now, 60) == "zoo"
    assert warm.wanted(repr(now - 61).encode(), now, 60) is None
    said = {"kind": "python", "at": now - 10, **dataclasses.asdict(want)}
    assert warm.wanted(json.dumps(said).encode(), now, 60) == want
    assert warm.wanted(json.dumps({**said, "at": now - 61}).encode(), now, 60) is None
    assert warm.wanted(json.dumps({**said, "python": None, "extra": 1}).encode(), now, 60) is None
    assert warm.wanted(b"{not json", now, 60) is None


def test_why_a_work_horse_starts_cold(tmp_path):
    r, w = os.pipe()
    try:
        datasets = (tmp_path / "home" / "datasets").resolve()
        (datasets / "cifar" / "1").mkdir(parents=True)
        elsewhere = tmp_path / "data"
        elsewhere.mkdir()
        ready = a_warm(tmp_path, status=r, readable=[datasets])
        assert ready.unusable(False, False, None, {}) is None
        assert ready.unusable(False, False, datasets / "cifar" / "1", {}) is None
        assert ready.unusable(True, False, None, {}) == "a command job"
        interpreter = dataclasses.replace(ready, want=warm.PythonWant("/p", "/", None, (), {}))
        assert interpreter.unusable(False, False, None, {}).startswith("a zoo job")
        assert ready.unusable(False, True, None, {}) == "a task of a job of several workers"
        assert "MPS" in ready.unusable(False, False, None, {"CUDA_MPS_PIPE_DIRECTORY": "/run/mps/0"})
        assert "not in the warm sandbox's sight" in ready.unusable(False, False, elsewhere, {})
        os.write(w, b'{ "child-pid": 12 }\n')  # (bubblewrap's first line: it runs)
        assert ready.unusable(False, False, None, {}) is None
        os.write(w, b'{ "exit-code": 143 }\n')
        assert ready.unusable(False, False, None, {}) == "it exited" and ready.returncode == 143
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.xdist_group("warm")  # (it moves models/warm.py's time: a warm trainer made meanwhile would look stale)
def test_the_code_version_changes_when_the_trainers_code_on_disk_does():
    before = warm.code_version()
    source = sandbox.runtime_paths()[-1] / "models" / "warm.py"
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        assert warm.code_version() != before
    finally:
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert warm.code_version() == before


def test_a_stale_warm_trainer_says_why(tmp_path):
    old = a_warm(tmp_path)
    assert old.stale(3600) is not None and "exited" in old.stale(3600)  # (`true` is long gone)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        live = Warm(sleeper, old.folder, "warm-w.x", warm.code_version(), 9, -1, -1, -1, -1, born=0.0)
        assert "older than 3600s" in live.stale(3600)
        live.born = 1e18
        assert live.stale(3600) is None
        live.version = "another"
        assert live.stale(3600) == "the trainer's code changed since it was made"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_job_dir_becomes_the_warm_folder_with_its_files(tmp_path):
    ready = a_warm(tmp_path)
    job_dir = tmp_path / "home" / "jobs" / "7"
    (job_dir / "checkpoints").mkdir(parents=True)
    (job_dir / "spec.json").write_text("{}")
    (job_dir / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-4"')
    inode = ready.folder.stat().st_ino
    ready._move_in(job_dir)
    assert job_dir.stat().st_ino == inode and not ready.folder.exists()  # (the sandbox's bind follows the folder)
    assert (job_dir / "spec.json").read_text() == "{}" and (job_dir / "checkpoints" / "checkpoint").exists()


def test_a_job_dir_that_cannot_become_the_warm_folder_keeps_its_files(tmp_path, monkeypatch):
    ready = a_warm(tmp_path)
    job_dir = tmp_path / "home" / "jobs" / "8"
    job_dir.mkdir(parents=True)
    (job_dir / "spec.json").write_text("{}")
    (job_dir / "log.txt").write_text("line\n")
    real_rename = os.rename

    def rename(src, dst):
        if Path(src) == ready.folder:
            raise OSError(errno.EBUSY, "busy")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError):
        ready._move_in(job_dir)
    assert sorted(p.name for p in job_dir.iterdir()) == ["log.txt", "spec.json"]
    assert list(ready.folder.iterdir()) == []


def test_an_adopted_trainers_exit_status_comes_from_bubblewraps_status_pipe(tmp_path):
    """The work-horse is not bubblewrap's parent: it reads the status bubblewrap writes (a real bubblewrap)."""
    if sandbox.unavailable():
        pytest.skip(sandbox.unavailable())
    for script, code in (("exit 7", 7), ("kill -TERM $$", 128 + 15)):
        r, w = os.pipe()
        proc = subprocess.Popen(
            ["bwrap", "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
             "--json-status-fd", str(w), "sh", "-c", script],
            pass_fds=(w,),
            stdout=subprocess.PIPE,
        )  # fmt: skip
        os.close(w)
        ready = a_warm(tmp_path / str(code), status=r)
        ready.proc = proc
        adopted = Adopted(ready)
        assert adopted.pid == proc.pid and adopted.wait() == code == adopted.returncode
        proc.wait()
        ready.close()
    (tmp_path / "k").mkdir()
    r, w = os.pipe()
    os.close(w)  # (bubblewrap killed with its group: no word at all)
    gone = a_warm(tmp_path / "k", status=r)
    assert Adopted(gone).wait() == warm.KILLED
    os.close(r)


def test_one_warm_trainer_a_gpu_its_first_worker_keeps_whichever_slot_ran_the_zoo_job(redis):
    """Issue 64: with four job slots a GPU, each slot that ran a zoo job kept a warm trainer (577 MiB each). A zoo
    job on any slot marks its GPUs; only their first worker by name (where a job of whole GPUs is placed) keeps one."""
    import socket
    import time
    from types import SimpleNamespace

    from jobs.keys import warm_wanted_key
    from jobs.worker import GpudeckWorker
    from tests.support.workers import register

    host = socket.gethostname()
    for name, gpus in ((f"{host}.gpu0-0", ("0",)), (f"{host}.gpu0-1", ("0",)), (f"{host}.gpu1-0", ("1",))):
        register(redis, name, host=host, gpus=gpus)

    def worker(name: str, gpus: list[str]) -> SimpleNamespace:
        w = SimpleNamespace(connection=redis, name=name, context=SimpleNamespace(gpu_ids=gpus))
        w._warm_key = lambda: GpudeckWorker._warm_key(w)
        return w

    first, second, other = (
        worker(f"{host}.gpu0-0", ["0"]),
        worker(f"{host}.gpu0-1", ["0"]),
        worker(f"{host}.gpu1-0", ["1"]),
    )
    now = time.time()
    keeps = lambda w: GpudeckWorker._keeps_warm(w, now, 600)  # noqa: E731
    assert not any(map(keeps, (first, second, other)))  # (no zoo job ran yet)
    redis.set(warm_wanted_key(host, ["0"]), repr(now - 5))  # a zoo job ran on GPU 0's second slot
    assert [keeps(first), keeps(second), keeps(other)] == ["zoo", None, None]
    assert not GpudeckWorker._keeps_warm(first, now + 600, 600)  # (too long ago)


def test_a_warm_interpreter_records_the_libraries_its_job_imported(tmp_path):
    """What the next warm interpreter imports ahead: the top-level libraries the job imported, in order, not the
    standard library's, not the job's own modules; and what the work-horse reads back of it (names only)."""
    own = tmp_path / "src"
    own.mkdir()
    (own / "mine.py").write_text("import json\n")
    script = (
        "import sys\n"
        f"sys.path[:0] = [{str(Path(warm.WARMPY_FILE).parent)!r}, {str(own)!r}]\n"
        "import warmpy\n"
        "before = {n.partition('.')[0] for n in sys.modules}\n"
        "import mine, numpy, csv, yaml\n"
        f"warmpy.record({str(tmp_path / warm.RECORD_NAME)!r}, before, [{str(own)!r}])\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    names = (tmp_path / warm.RECORD_NAME).read_text().split()
    assert names[:1] == ["numpy"] and "yaml" in names
    assert not {"mine", "csv", "json", "warmpy"} & set(names)
    (tmp_path / warm.RECORD_NAME).write_text("numpy\n../etc/passwd\nos.path\n_private\nyaml\nnumpy\n")
    assert warm.recorded_imports(tmp_path) == ("numpy", "yaml")
    assert not (tmp_path / warm.RECORD_NAME).exists()
    (tmp_path / "elsewhere").write_text("numpy\n")
    (tmp_path / warm.RECORD_NAME).symlink_to(tmp_path / "elsewhere")  # (a link a job left: not followed)
    assert warm.recorded_imports(tmp_path) == ()


def test_a_warm_interpreter_is_made_of_what_no_job_chose(settings, tmp_path):
    """Made before its job is known, it may serve anybody's next job of its environment: its Python is the
    service's, a registered environment's or the project's built one, never one a job brought; and no variable a
    job set reaches it (a library may read one as it is imported: the next job would get the last one's)."""
    from dataclasses import replace

    from jobs.run.launch import Launch

    src = tmp_path / "jobs" / "7" / "src"
    (src / "venv" / "bin").mkdir(parents=True)
    (src / "venv" / "bin" / "python").symlink_to(sys.executable)
    here = Path(sys.executable).parent
    how = Launch(["/bin/sh", "-c", "python t.py"], src, {"PATH": f"{here}:/usr/bin", "LANG": "C.UTF-8"}, source=src)
    spec = Kept({"command": "python t.py"})
    inv = warm.python_invocation(spec.command)
    want = warm.want_of(how, spec, inv, None, settings)
    assert isinstance(want, warm.PythonWant) and want.python == str(here / "python"), want
    assert want.start_vars == {"LANG": "C.UTF-8"}
    said = lambda *a: warm.want_of(*a)  # noqa: E731
    own = warm.python_invocation("venv/bin/python t.py")
    assert "absolute" in said(how, spec, own, None, settings)
    mine = warm.python_invocation(f"{src}/venv/bin/python t.py")
    assert "linked in its job dir" in said(how, spec, mine, None, settings)
    elsewhere = replace(how, env={"PATH": f"{tmp_path}/bin"})
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    assert "not the service's Python" in said(elsewhere, spec, inv, None, settings)
    registered = replace(settings, envs=(("mine", tmp_path / "bin"),))
    assert isinstance(said(elsewhere, spec, inv, None, registered), warm.PythonWant)
    secret = Kept({"command": "python t.py", "env": {"HF_HOME": "/x"}, "secret_env": {"HF_TOKEN": "s"}})
    assert said(how, secret, inv, None, settings).startswith("it has a secret_env")
    loader = Kept({"command": "python t.py", "env": {"LD_PRELOAD": "lib/x.so"}})
    assert said(how, loader, inv, None, settings).startswith("its env sets LD_PRELOAD")
    relative = Kept({"command": "python t.py", "env": {"PYTHONPATH": "/opt/lib:src"}})
    assert said(how, relative, inv, None, settings).startswith("its PYTHONPATH names a folder relative")
    # Variables of its own: a warm interpreter made with them serves their owner's next job with the same ones.
    own = Kept({"command": "python t.py", "env": {"HF_HOME": "/x", "PYTHONHASHSEED": "7"}})
    alice = said(replace(how, env={**how.env, "PYTHONHASHSEED": "7"}), own, inv, None, settings, "alice")
    assert alice.owner == "alice" and alice.env == {"HF_HOME": "/x", "PYTHONHASHSEED": "7"}
    assert alice.start_vars["PYTHONHASHSEED"] == "7"
    assert want.owner is None and want.env == {}  # (none of its own: anybody's)
    assert not alice.same_place(want) and alice.same_place(replace(alice, imports=("numpy",)))


def test_a_warm_process_that_failed_by_itself_is_made_again_after_a_while_not_at_each_job(tmp_path, monkeypatch):
    """One whose imports touched a device exits 1 as it warms: made again at every job, it would cost every job
    its imports' seconds of CPU. One that was killed (128 + N) is made again at once."""
    from types import SimpleNamespace

    from jobs.worker import WARM_RETRY_S, GpudeckWorker

    started = []
    monkeypatch.setattr(warm, "start", lambda ctx: started.append(ctx) or None)

    def worker_holding(code: int) -> SimpleNamespace:
        held = a_warm(tmp_path / str(code))
        held.proc = subprocess.Popen(["sh", "-c", f"exit {code}"])
        held.proc.wait()
        settings = SimpleNamespace(warm=True, warm_max_age_s=600)
        return SimpleNamespace(
            _let_go=[], context=SimpleNamespace(settings=settings), _warm=held, _warm_failed_at=0.0,
            _keeps_warm=lambda now, max_age: "zoo", _let_warm_go=lambda w, why: None,
        )  # fmt: skip

    failed, killed = worker_holding(1), worker_holding(137)
    for w in (failed, killed):
        GpudeckWorker._keep_warm(w)
    assert len(started) == 1  # (the killed one's: at once)
    assert time.time() - failed._warm_failed_at < WARM_RETRY_S


def test_a_warm_sandboxs_first_process_mounts_only_a_plain_job_dir(tmp_path):
    """The shim of a warm interpreter mounts its folder at the job dir's path that the work-horse sent: never a
    relative or unnormalized path, nor one a link (which the interpreter, before its job, might have made) would
    redirect. (Only its refusals are tried here: outside a sandbox, a mount would be the host's.)"""
    from jobs.run import shim

    folder = tmp_path / "warm"
    folder.mkdir()
    assert "not a job dir" in shim._mount_job_dir(str(folder), "jobs/12")
    assert "not a job dir" in shim._mount_job_dir(str(folder), f"{tmp_path}/jobs/../etc")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "jobs").symlink_to(tmp_path / "elsewhere")
    assert "is not a plain folder" in shim._mount_job_dir(str(folder), f"{tmp_path}/jobs/12")
    assert (tmp_path / "elsewhere" / "12").is_dir() and not os.path.ismount(tmp_path / "elsewhere" / "12")
    usage = subprocess.run(
        [sys.executable, "-I", "-S", shim.__file__, "3", "-", "4", "--warm", "5", "--"],
        capture_output=True,
        text=True,
    )
    assert usage.returncode == 2 and "usage:" in usage.stderr
