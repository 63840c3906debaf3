"""Whose an environment is (issue 37 #2), without a stack: an environment of what an index serves is shared by
content; one that reads anything of the job's source (a local package, `-e .`, a wheel in the tree, another
requirements file, a path or VCS source, the uv project itself) is keyed by the source and its owner too, so the
same requirements.txt with another `./pkg` never reuses a build; the size bound removes the builder's own first and
never another's within their share. tests/jobs/test_pyenv_e2e.py builds real environments with uv."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jobs.record import Kept
from jobs.run import pyenv
from jobs.settings import Settings


def project(tmp_path: Path, name: str, requirements: str, pkg: str | None = None) -> Path:
    src = tmp_path / name
    src.mkdir()
    (src / "requirements.txt").write_text(requirements)
    if pkg is not None:
        (src / "pkg").mkdir()
        (src / "pkg" / "setup.py").write_text(pkg)
    return src


@pytest.mark.parametrize(
    "requirements",
    [
        "./pkg\n",
        "-e .\n",
        "wheels/evil-1.0-py3-none-any.whl\n",
        "-r more.txt\n",
        "-c pins.txt\nnumpy\n",
        "--find-links ./wheels\nnumpy\n",
        "evil @ file:///srv/evil\n",
        "git+https://example.invalid/evil.git\n",
        "numpy\n-f wheels\n",
        "numpy\n!weird line\n",
    ],  # fmt: skip
)
def test_what_reads_the_source_is_keyed_by_the_source_and_the_owner(tmp_path, requirements):
    alice = project(tmp_path, "alice", requirements, pkg="print('alice')")
    mallory = project(tmp_path, "mallory", requirements, pkg="print('mallory: a .pth for you')")
    a = pyenv.need(Kept({"source": "src:" + "a" * 64}), alice, "alice")
    m = pyenv.need(Kept({"source": "src:" + "b" * 64}), mallory, "mallory")
    assert a is not None and m is not None and a.local and m.local
    assert a.digest != m.digest  # the same requirements.txt, another ./pkg: never the same environment
    same_source_other_user = pyenv.need(Kept({"source": "src:" + "a" * 64}), alice, "mallory")
    assert same_source_other_user is not None and same_source_other_user.digest != a.digest
    assert pyenv.need(Kept({"source": "src:" + "a" * 64}), alice, "alice").digest == a.digest  # (and hers is reused)


def test_what_an_index_serves_is_shared_by_content(tmp_path):
    text = "numpy==1.26.4 --hash=sha256:abc\nrequests[socks]>=2,<3 ; python_version >= '3.8'\n# pinned\n"
    text += "--extra-index-url https://pypi.example/simple\n"
    a = pyenv.need(Kept({"source": "src:" + "a" * 64}), project(tmp_path, "a", text), "alice")
    b = pyenv.need(Kept({"source": "src:" + "b" * 64}), project(tmp_path, "b", text), "bob")
    assert a is not None and b is not None and not a.local and a.digest == b.digest


def test_a_uv_project_built_from_its_own_tree_is_its_owners(tmp_path):
    src = tmp_path / "uvproj"
    src.mkdir()
    (src / "pyproject.toml").write_text("[project]\nname = 'p'\nversion = '1'\n")
    registry = '[[package]]\nname = "numpy"\nversion = "1.26.4"\nsource = { registry = "https://pypi.org/simple" }\n'
    (src / "uv.lock").write_text(registry + '[[package]]\nname = "p"\nversion = "1"\nsource = { virtual = "." }\n')
    shared = pyenv.need(Kept({}), src, "alice")
    assert shared is not None and not shared.local
    (src / "uv.lock").write_text(registry + '[[package]]\nname = "p"\nversion = "1"\nsource = { editable = "." }\n')
    own = pyenv.need(Kept({}), src, "alice")
    assert own is not None and own.local and own.digest != pyenv.need(Kept({}), src, "bob").digest


def fake_env(settings: Settings, digest: str, owner: str, size: int, used_ago: float) -> None:
    path = pyenv.envs_dir(settings) / digest
    path.mkdir(parents=True)
    (path / "blob").write_bytes(b"x" * size)
    (path / pyenv.READY).write_text(json.dumps({"kind": "requirements", "owner": owner, "built_at": 0}))
    (path / pyenv.USED).write_text(json.dumps({"last_used": time.time() - used_ago, "jobs": []}))


def test_one_users_builds_cannot_push_out_anothers_environments_within_their_share(tmp_path):
    settings = Settings(home=tmp_path, env_max_bytes=45_000, env_max_age_s=None)
    fake_env(settings, "alice1", "alice", 10_000, used_ago=3600)  # alice's, the least recently used of all
    for i in range(4):  # mallory builds four in a row
        fake_env(settings, f"mallory{i}", "mallory", 10_000, used_ago=100 - i)
    removed = pyenv.prune(settings, keep="mallory3", owner="mallory")
    assert "alice1" not in removed and removed == ["mallory0"], removed  # her own oldest goes, not alice's
    assert (pyenv.envs_dir(settings) / "alice1").is_dir()
    fake_env(settings, "alice2", "alice", 30_000, used_ago=0)  # alice now holds more than her share
    removed = pyenv.prune(settings, keep="alice2", owner="bob")
    assert removed and removed[0] == "alice1", removed
