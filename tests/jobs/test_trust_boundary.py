"""Issue 62 as a hostile job would try it, as root as CI runs: where the service, still privileged, touches what a
job controls — its environment, the files it leaves in its job dir, a build's files, its source copy — nothing the
job put there runs, is read, written, uploaded or exported as root. Without a stack: each root-side reader and
writer is called as the work-horse or the API calls it. (The MPS pipes are attacked in tests/e2e/test_gpu_share.py,
`gpudeck mcp --http` in tests/tui/test_mcp.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import export, scalars, search
from jobs.record import Kept
from jobs.run import launch, pyenv, sandbox
from jobs.run.upload import Uploader
from jobs.settings import Settings

ROOT = os.geteuid() == 0
REPO = Path(__file__).resolve().parents[2]
SECRET = "ROOT-ONLY-SECRET"


@pytest.fixture
def vault(tmp_path):
    """Root's: a 0700 folder with a 0600 JSON file, a JSON-lines file and a checkpoint state (what a link would
    expose), and a 0700 folder a write through a link would land in."""
    folder = tmp_path / "vault"
    folder.mkdir(mode=0o700)
    (folder / "secret.json").write_text(json.dumps({"secret": SECRET, "test_accuracy": 0.99}))
    (folder / "secret.jsonl").write_text(json.dumps({"step": 1, "loss": 4.2, "secret": 1}) + "\n")
    (folder / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n')
    (folder / "ckpt-1.index").write_text(SECRET)
    for f in folder.iterdir():
        f.chmod(0o600)
    landing = tmp_path / "landing"
    landing.mkdir(mode=0o700)
    return folder, landing


def untouched(folder: Path, landing: Path) -> None:
    assert sorted(p.name for p in landing.iterdir()) == [], "something was written through a link"
    assert {p.name: (p.stat().st_uid, p.stat().st_mode & 0o777) for p in folder.iterdir()} == {
        p.name: (os.geteuid(), 0o600) for p in folder.iterdir()
    }


# -- 1: the job's environment reaches no privileged process -------------------------------------------------------
EVIL_C = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    FILE *f = fopen("%s", "a");
    if (f) { fprintf(f, "so %%d %%d\n", (int)getuid(), (int)geteuid()); fclose(f); }
}
unsigned int la_version(unsigned int v) { return v; }
"""


def test_a_jobs_python_and_loader_variables_run_its_code_only_as_the_job_user(tmp_path):
    """The job's PYTHONPATH with a sitecustomize.py in its source, PYTHONUSERBASE with a usercustomize.py,
    PYTHONSTARTUP, LD_PRELOAD and LD_AUDIT of its own library: every process that imports or loads them records
    its uid. They reach the job (its own python records), and no process of uid 0 (the sandbox's first one
    before its drop) ever ran them."""
    if sandbox.unavailable():
        pytest.skip(sandbox.unavailable())
    home = tmp_path / "home"
    settings = Settings(home=home)
    job_dir = settings.job_dir(9)
    job_dir.mkdir(parents=True)
    marks = job_dir / "uids"
    ctx = launch.WorkerContext(settings, "w1", gpu_ids=[])
    attempt = launch.Attempt(9, 1, "gpudeck-9-1.attack", job_dir)
    code = f"import os\nopen({str(marks)!r}, 'a').write(f'py {{os.getuid()}} {{os.geteuid()}}\\n')\n"
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o755)
    env = {"PYTHONPATH": ".", "PYTHONUSERBASE": str(job_dir / "ub"), "PYTHONSTARTUP": "./sitecustomize.py",
           "PYTHONWARNINGS": "error", "PYTHONNOUSERSITE": "", "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        (lib / "evil.c").write_text(EVIL_C % marks)
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib / "evil.so"), str(lib / "evil.c")], check=True)
        env |= {"LD_PRELOAD": str(lib / "evil.so"), "LD_AUDIT": str(lib / "evil.so")}
    how = launch.command(ctx, attempt, Kept({"command": [sys.executable, "-c", "pass"], "env": env}), None, {})
    (job_dir / "src" / "sitecustomize.py").write_text(code)
    user_site = job_dir / "ub" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "usercustomize.py").write_text(code)
    lifeline, held = os.pipe()
    boxed = launch.sandboxed(ctx, how, job_dir, [lib], lifeline=lifeline)
    try:
        out = subprocess.run(boxed.argv, env=boxed.env, pass_fds=boxed.fds(), capture_output=True, timeout=120,
                             start_new_session=True)  # fmt: skip
    finally:
        boxed.close_files()
        os.close(held)
    said = out.stdout.decode() + out.stderr.decode()
    assert out.returncode == 0, said[-3000:]
    lines = marks.read_text().splitlines()
    assert any(line.startswith("py ") for line in lines), lines  # the job's own python took its variables
    if cc:
        assert any(line.startswith("so ") for line in lines), lines  # and its own processes its library
    if ROOT:
        assert all(line.split()[1:] != ["0", "0"] and "0" not in line.split()[1:] for line in lines), lines


# -- 2, 3: links a job leaves are followed by no privileged reader or writer ---------------------------------------
def test_every_file_the_service_reads_in_a_job_dir_refuses_a_link_to_a_root_file(tmp_path, vault):
    folder, landing = vault
    settings = Settings(home=tmp_path / "home")
    job_dir = settings.job_dir(5)
    job_dir.mkdir(parents=True)
    (job_dir / "result.json").symlink_to(folder / "secret.json")
    (job_dir / "metrics.jsonl").symlink_to(folder / "secret.jsonl")
    (job_dir / "events.out.tfevents.1").symlink_to(folder / "secret.json")
    (job_dir / "model.keras").symlink_to("/proc/self/environ")  # (the service's own environment: its tokens)
    (job_dir / "checkpoints").symlink_to(folder)
    (job_dir / ".gpudeck").symlink_to(landing)
    (job_dir / "runs").symlink_to(folder)  # (a folder of "event files" that is root's)

    assert scalars.read_result(job_dir) is None
    reader = scalars.ScalarReader(job_dir)
    assert reader.poll() == [] and reader._event_files() == []
    reader.save()  # (its state goes into the job dir's .gpudeck: not into the folder that link names)
    reader.close()
    assert launch.newest_checkpoint(job_dir) is None

    class Recording:  # the object store's side: what would be uploaded
        def __init__(self):
            self.sent: list[tuple[str, bytes]] = []

        def put(self, path, job_id, rel):
            self.sent.append((rel, Path(path).read_bytes()))

        def put_bytes(self, data, job_id, rel):
            self.sent.append((rel, data))

        def delete(self, job_id, rels):
            pass

    store = Recording()
    uploader = Uploader(store, 5, job_dir)  # type: ignore[arg-type]
    assert uploader.finish() is None and store.sent == []
    with export.artifact_copies(settings, 5) as files:
        assert files == []  # nothing for MLflow either
    untouched(folder, landing)


def test_a_regular_file_is_still_read_and_uploaded(tmp_path):
    """(The same readers, given what a job really leaves: what the test above refuses is the links alone.)"""
    settings = Settings(home=tmp_path / "home")
    job_dir = settings.job_dir(6)
    (job_dir / "checkpoints").mkdir(parents=True)
    (job_dir / "result.json").write_text(json.dumps({"test_accuracy": 0.5}))
    (job_dir / "metrics.jsonl").write_text(json.dumps({"step": 3, "loss": 0.25, "time": 1.5}) + "\n")
    (job_dir / "model.keras").write_bytes(b"model")
    (job_dir / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\n')
    (job_dir / "checkpoints" / "ckpt-7.index").write_bytes(b"i")
    assert scalars.read_result(job_dir) == {"test_accuracy": 0.5}
    reader = scalars.ScalarReader(job_dir)
    assert reader.poll() == [{"step": 3, "loss": 0.25, "time": 1.5}]
    reader.save()
    line = json.dumps({"step": 3, "loss": 0.25, "time": 1.5}) + "\n"
    assert json.loads((job_dir / ".gpudeck" / "scalars.json").read_text()) == {"metrics.jsonl": len(line)}
    assert launch.newest_checkpoint(job_dir) == 7
    with export.artifact_copies(settings, 6) as files:
        assert sorted(f.name for f in files) == ["model.keras", "result.json"]
        assert files[0].read_bytes() in (b"model", b'{"test_accuracy": 0.5}')


def test_a_resumed_job_takes_no_link_from_the_job_it_resumes(tmp_path, vault):
    """The new job's checkpoints are copied from another job's dir, which that job controlled: a link there (to a
    root file) is neither copied nor hard-linked (a hard link would then be handed to the job user, owner and all)."""
    folder, landing = vault
    settings = Settings(home=tmp_path / "home")
    theirs = settings.job_dir(3) / "checkpoints"
    theirs.mkdir(parents=True)
    (theirs / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    (theirs / "ckpt-1.data-00000-of-00001").write_bytes(b"d")
    (theirs / "ckpt-1.index").symlink_to(folder / "ckpt-1.index")
    (theirs / "sub").symlink_to(folder)
    mine = settings.job_dir(4)
    mine.mkdir(parents=True)
    (mine / "checkpoints").symlink_to(landing)  # (and this job's own dir, from an earlier attempt: a link too)
    assert launch.take_checkpoints(settings, mine, resumes=3) == "gpudeck: resuming from the last checkpoint of job 3"
    assert sorted(p.name for p in (mine / "checkpoints").iterdir()) == ["checkpoint", "ckpt-1.data-00000-of-00001"]
    if ROOT:
        sandbox.hand_over(mine, (4321, 4321))
    untouched(folder, landing)


def test_an_environments_marks_and_a_source_copy_go_through_no_link_a_build_or_a_job_left(tmp_path, vault):
    folder, landing = vault
    env = tmp_path / "envs" / "abc"
    env.mkdir(parents=True)
    (env / pyenv.READY).symlink_to(landing / "ready")
    (env / pyenv.USED).symlink_to(folder / "secret.json")
    need = pyenv.Need("abc", "requirements", env / "requirements.txt", 1, False)
    pyenv.mark_ready(env, need, 7, "alice")
    pyenv.used(env, 7)
    assert not (env / pyenv.READY).is_symlink() and json.loads((env / pyenv.READY).read_text())["built_by"] == 7
    assert json.loads((env / pyenv.USED).read_text())["jobs"] == [7]  # (not the secret's, which it never read)
    assert pyenv.is_ready(env)
    # a job dir whose src an earlier attempt replaced with a link: the source is copied anew, the link is not used
    settings = Settings(home=tmp_path / "home")
    job_dir = settings.job_dir(8)
    job_dir.mkdir(parents=True)
    (job_dir / "src").symlink_to(landing)
    ctx = launch.WorkerContext(settings, "w1")
    src = launch.source_copy(ctx, Kept({}), job_dir)
    assert src.is_dir() and not src.is_symlink()
    # and the requirements the key is made of are read through no link either
    (src / "requirements.txt").symlink_to(folder / "secret.json")
    assert pyenv.need(Kept({}), src, "alice") is None  # (a link is no requirements file: not read)
    with pytest.raises(pyenv.Unusable):
        pyenv.need(Kept({"requirements": "requirements.txt"}), src, "alice")
    untouched(folder, landing)


def test_a_source_with_uv_configuration_builds_its_owners_own_environment(tmp_path):
    """Issue 62 #4: the same index-only requirements beside a uv.toml (or [tool.uv]) that points uv elsewhere
    are not shared under the index-only key; the job dir above the source counts too (uv looks upwards)."""
    plain, configured, upper = (tmp_path / n / "src" for n in ("a", "b", "c"))
    for src in (plain, configured, upper):
        src.mkdir(parents=True)
        (src / "requirements.txt").write_text("numpy==2.0.0\n")
    (configured / "uv.toml").write_text('find-links = ["/home/mallory/wheels"]\n')
    (upper.parent / "pyproject.toml").write_text('[tool.uv]\nfind-links = ["/home/mallory/wheels"]\n')
    shared = pyenv.need(Kept({}), plain, "alice")
    assert shared is not None and not shared.local
    for src in (configured, upper):
        own = pyenv.need(Kept({}), src, "mallory")
        assert own is not None and own.local and own.digest != shared.digest


# -- 8: hostile numbers and sizes: a 400 naming the field, in under a second, nothing stored -----------------------
BASE = {"command": "python train.py --lr {LR}", "gpus": 0}
HUGE = 10**400


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/sweeps", {"space": {"args.LR": {"choice": list(range(20_000))}}}, "space.args.LR"),
        ("/api/v1/sweeps", {"space": {"args.LR": {"int": [-(10**300), 10**300]}}}, "space.args.LR"),
        ("/api/v1/sweeps", {"space": {"args.LR": {"int": [-HUGE, HUGE]}}}, "space.args.LR"),
        ("/api/v1/sweeps", {"space": {"args.LR": {"uniform": [-1e308, 1e308]}}}, "space.args.LR"),
        ("/api/v1/sweeps", {"space": {"args.LR": {"choice": [1, HUGE]}}}, "space.args.LR"),
        ("/api/v1/sweeps", {"time_budget": HUGE}, "time_budget"),
        ("/api/v1/jobs", {"command": "true", "gpus": 0, "gpu_memory": HUGE}, "gpu_memory"),
        ("/api/v1/jobs", {"command": "true", "gpus": 0, "gpu_memory": "9" * 400 + "G"}, "gpu_memory"),
    ],
)
def test_hostile_numbers_are_400s_naming_the_field_fast_and_store_nothing(command_client, redis, path, body, field):
    if path.endswith("sweeps"):
        body = {"search": "tpe", "base": BASE, "space": {"args.LR": {"uniform": [0.1, 1]}}, "metric": "loss", **body}
    t0 = time.monotonic()
    resp = command_client.post(path, json=body)
    took = time.monotonic() - t0
    assert resp.status_code == 400, resp.json
    details = resp.json["details"]
    assert field in (details.get("fields") or {}) or details.get("field") == field, details
    assert took < 1.0, took
    assert redis.zcard("gpudeck:jobs") == 0 and not redis.exists("gpudeck:next_sweep_id")
    assert not list(redis.scan_iter(match="gpudeck:sweep:*"))


# -- 7: one search that raises stops no other -----------------------------------------------------------------------
def test_a_search_that_raises_fails_with_its_error_and_the_others_go_on(command_client, redis, settings):
    made = [
        command_client.post("/api/v1/sweeps", json={"search": "random", "base": BASE, "metric": "loss",
                            "space": {"args.LR": {"uniform": [0.1, 1]}}, "max_trials": 3, "max_concurrent": 1}).json
        for _ in range(2)
    ]  # fmt: skip
    bad, good = made[0]["id"], made[1]["id"]
    from jobs.store import JobStore

    store = JobStore(redis)
    for m in made:
        (job_id,) = m["job_ids"]
        store.update(job_id, status="succeeded", ended_at=time.time(), result={"loss": 0.5})
    record = json.loads(redis.get(f"gpudeck:sweep:{bad}"))  # (stored as an older gpudeck took it)
    record["space"] = {"args.LR": {"int": [-(10**300), 10**300]}}
    redis.set(f"gpudeck:sweep:{bad}", json.dumps(record))
    searcher = search.Searcher(settings)
    searcher.redis = redis
    searcher.round()
    shown = command_client.get(f"/api/v1/sweeps/{bad}").json
    assert shown["state"] == "failed" and shown["stopped"].startswith(search.FAILED), shown["stopped"]
    assert len(command_client.get(f"/api/v1/sweeps/{good}").json["trials"]) == 2  # the next trial launched


# -- 9: what reaches a job of the worker's environment, what an export error says --------------------------------
def test_no_secret_looking_variable_passes_by_a_prefix_and_no_credential_is_in_an_export_error(monkeypatch, tmp_path):
    worker = {"TF_TOKEN_hub": "t", "TF_VAR_db_password": "p", "NVIDIA_API_KEY": "k", "CUDA_SECRET": "s",
              "TF_CPP_MIN_LOG_LEVEL": "3", "NVIDIA_VISIBLE_DEVICES": "all"}  # fmt: skip
    for name, value in worker.items():
        monkeypatch.setenv(name, value)
    env = launch.base_env(launch.Attempt(1, 1, "r", tmp_path), Settings(home=tmp_path, pass_env=("CUDA_SECRET",)))
    assert "TF_TOKEN_hub" not in env and "TF_VAR_db_password" not in env and "NVIDIA_API_KEY" not in env
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "3" and env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["CUDA_SECRET"] == "s"  # (named whole by the operator: passed)
    uri = "https://lab:hunter2pass@mlflow.lab.example:5000"
    said = export.redacted(f"MlflowException: API request to {uri}/api/2.0 failed (user lab, hunter2pass)", uri)
    assert "hunter2pass" not in said and "lab:" not in said and "https://***@mlflow.lab.example" in said


# -- 10: the doctor's trial runs at what its caller may give ------------------------------------------------------
def test_the_doctors_trial_runs_at_the_callers_highest_allowed_priority():
    from tui.cli.doctor import trial_priority, trial_spec

    assert trial_priority({"max_priority": "normal"}) == "normal"
    assert trial_priority({"max_priority": None}) == trial_priority({}) == "high"
    assert trial_spec(1, True, "normal")["priority"] == "normal"


# -- the one module: nothing else opens a path where a job may write --------------------------------------------------
JOBFILES_CALLERS = {
    "api/files.py", "jobs/artifacts.py", "jobs/export.py", "jobs/scalars.py", "jobs/run/launch.py",
    "jobs/run/pyenv.py", "jobs/run/sessionrun.py", "jobs/run/upload.py", "jobs/run/warmwant.py",
}  # fmt: skip
RAW_IO = {
    # module -> what it opens by path (none of it a job's to write)
    "api/files.py": "send_file of jobfiles.fd_path: the very file jobfiles opened",
    "jobs/archives.py": "an upload extracted into the service's own staging folder",
    "jobs/artifacts.py": "tarfile writing into a pipe",
    "jobs/datasets.py": "the service's datasets folder",
    "jobs/jobfiles.py": "the module itself",
    "jobs/objectstore.py": "a checkpoint fetched into the service's own staging folder",
    "jobs/onslurm.py": "a Slurm batch script's output, written by the service's agent",
    "jobs/redis_server.py": "the embedded Redis's config and log",
    "jobs/run/buildenv.py": "runs inside the job's sandbox, as the job's user",
    "jobs/run/launch.py": "the stored source into a new folder of its own (O_EXCL names), the log file and spec "
    "(O_NOFOLLOW, renamed into place), the cgroup's memory events",
    "jobs/run/proc.py": "/proc",
    "jobs/run/pyenv.py": "lock files in the service's envs folder",
    "jobs/run/shim.py": "/proc, inside the sandbox",
    "jobs/run/warmpy.py": "the job's script and its record of imports, as the job user inside its sandbox",
    "jobs/run/warm.py": "renames inside the service's warm folder and job dir (no link followed)",
    "jobs/sources.py": "the service's sources folder",
    "jobs/supervisor.py": "gpudeck up's own logs and lock",
    "jobs/tensorboard.py": "TensorBoard's own logs, /proc",
    "jobs/usage.py": "/proc",
    "jobs/mps.py": "/proc",
    "jobs/bundle.py": "this environment's installed distributions, repacked into the operator's wheelhouse",
    "jobs/service.py": "the systemd unit and its environment file, where the operator says",
    "jobs/run/sandbox.py": "hand_over's walk (lchown: links themselves, never followed), /dev",
    "jobs/run/sessionrun.py": "an environment's site-packages folders (the service's once built), to find Jupyter",
}
RAW = re.compile(
    r"(?<!jobfiles)\.(read_text|read_bytes|write_text|write_bytes|iterdir|glob|rglob)\(|\bopen\(|os\.(open|walk|scandir|link|"
    r"rename|replace)\(|shutil\.(copy\w*|move)\(|send_file\(|tarfile\.open\("
)


def test_every_reader_and_writer_where_a_job_may_write_goes_through_jobfiles():
    """A new module of api/ or jobs/ that opens paths by itself fails here until it is looked at: it goes through
    jobs.jobfiles, or its paths are the service's own (RAW_IO says which and why)."""
    raw, callers = set(), set()
    for path in sorted([*REPO.glob("api/**/*.py"), *REPO.glob("jobs/**/*.py")]):
        rel = str(path.relative_to(REPO))
        text = path.read_text()
        if RAW.search(text):
            raw.add(rel)
        if re.search(r"\bjobfiles\.", text) and rel != "jobs/jobfiles.py":
            callers.add(rel)
    assert raw <= set(RAW_IO), f"new raw file access: {sorted(raw - set(RAW_IO))}: use jobs.jobfiles, or say why"
    assert callers == JOBFILES_CALLERS, sorted(callers ^ JOBFILES_CALLERS)
