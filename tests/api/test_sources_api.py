"""Command jobs through the API (Flask's test client, real Redis, real disk): sources stored by content, the
safety gate, and every bad input refused by field with nothing stored."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

from jobs.keys import COUNTER_KEY
from models import sourcetree
from tui import pack

SCRIPT = b"import os\nprint(os.environ['JOB_DIR'])\n"


def tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_bytes(SCRIPT)
    (root / "pkg" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "pkg" / "run.sh").chmod(0o755)
    (root / "link.py").symlink_to("train.py")
    return root


def tgz(root: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name in sourcetree.files(root):
            t.add(root / name, arcname=name, recursive=False)
    return buf.getvalue()


def zipped(root: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name in sourcetree.files(root):
            if not (root / name).is_symlink():
                z.write(root / name, name)
        info = zipfile.ZipInfo("link.py")
        info.external_attr = 0o120777 << 16
        z.writestr(info, "train.py")
    return buf.getvalue()


def upload(client, data: bytes, name: str = "src.tar.gz", **form):
    return client.post("/api/v1/sources", data={"file": (io.BytesIO(data), name), **form})


def test_the_same_tree_is_stored_once_whatever_archive_carries_it(command_client, settings, tmp_path):
    root = tree(tmp_path / "project")
    first = upload(command_client, tgz(root), git_commit="0123abcd" * 5, git_dirty="true")
    assert first.status_code == 201, first.json
    ref = first.json["ref"]
    # What gpudeck run computes before it uploads is the server's ref: it can skip the upload.
    assert ref == pack.collect(root).ref == sourcetree.ref(sourcetree.digest(root))
    assert first.json["files"] == 3 and first.json["git_commit"] == "0123abcd" * 5 and first.json["git_dirty"] is True
    again = upload(command_client, zipped(root), name="src.zip")
    assert again.status_code == 200 and again.json["ref"] == ref
    stored = settings.sources_dir / ref[4:]
    assert sorted(p.name for p in settings.sources_dir.iterdir()) == [".staging", ref[4:]]
    assert list((settings.sources_dir / ".staging").iterdir()) == []
    assert (stored / "pkg" / "run.sh").stat().st_mode & 0o111  # the executable bit travels
    assert command_client.get(f"/api/v1/sources/{ref}").json["sha256"] == ref[4:]
    assert command_client.get("/api/v1/sources/src:" + "0" * 64).status_code == 404
    assert command_client.get("/api/v1/sources/nope").status_code == 400


def test_hostile_or_oversized_sources_are_refused_and_leave_nothing(command_client, settings, tmp_path):
    def evil(t: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("../outside.py")
        info.size = 1
        t.addfile(info, io.BytesIO(b"x"))

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        evil(t)
    resp = upload(command_client, buf.getvalue())
    assert resp.status_code == 422 and "'../outside.py'" in resp.json["message"]
    assert not (tmp_path / "outside.py").exists() and not (settings.home / "outside.py").exists()
    assert upload(command_client, b"not an archive").status_code == 422
    assert command_client.post("/api/v1/sources", data={}).json["details"]["fields"] == {
        "file": "is required: the source folder as a tar (any compression) or zip archive"
    }
    assert list((settings.sources_dir / ".staging").iterdir()) == []


def test_command_jobs_are_refused_unless_tokens_or_the_operator_turn_them_on(client, redis):
    resp = client.post("/api/v1/jobs", json={"command": "python train.py"})
    assert resp.status_code == 403
    assert "GPUDECK_TOKENS" in resp.json["message"] and "GPUDECK_COMMAND_JOBS=1" in resp.json["message"]
    assert redis.get(COUNTER_KEY) is None  # nothing stored, not even an id


def test_bad_command_jobs_name_the_field_and_store_nothing(command_client, redis, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    cases = [  # (body, field, words, status): a reference to what does not exist is 404, to a path not allowed 403
        ({"command": "python t.py", "model": "lenet", "dataset": "synthetic"}, "model", "not both"),
        ({"command": "  "}, "command", "must not be empty"),
        ({"command": []}, "command", "as a list"),
        ({"command": 5}, "command", "shell string or a list"),
        ({"command": "x", "source": "src:" + "a" * 64}, "source", "unknown source", 404),
        ({"command": "x", "source": "src:xyz"}, "source", "not a src:<sha256> ref"),
        ({"command": "x", "source": str(outside)}, "source", "not under GPUDECK_DATA_ROOTS", 403),
        ({"command": "x", "env": {"1BAD": "v"}}, "env", "not a valid variable name"),
        ({"command": "x", "env": {"JOB_DIR": "/tmp"}}, "env", "cannot be overridden"),
        ({"command": "x", "env": {"SEED": 1}}, "env", "values must be strings"),
        ({"command": "x", "env_name": "conda"}, "env_name", "registered (GPUDECK_ENVS): tf", 404),
        ({"command": "x", "params": {"lr": 0.1}}, "params", "belongs to model jobs"),
        ({"command": "x", "dataset": "synthetic"}, "dataset", "uploaded NAME[:VERSION] or a server folder"),
        ({"model": "lenet", "dataset": "synthetic", "env": {"A": "b"}}, "env", "belongs to command jobs"),
    ]
    for body, field, words, *status in cases:
        resp = command_client.post("/api/v1/jobs", json=body)
        assert resp.status_code == (status or [400])[0], (body, resp.json)
        assert words in resp.json["details"]["fields"][field], (body, resp.json)
    assert redis.get(COUNTER_KEY) is None


def test_a_server_folder_is_snapshotted_when_the_job_is_submitted(command_client, settings, tmp_path):
    folder = tree(tmp_path / "roots" / "project")
    job = command_client.post(
        "/api/v1/jobs", json={"command": ["python", "train.py"], "source": str(folder), "env": {"API_KEY": "s3cret"}}
    ).json
    (folder / "train.py").write_text("changed after submission")
    assert job["source"]["path"] == str(folder) and job["spec"]["source"] == job["source"]["ref"]
    stored = settings.sources_dir / job["source"]["sha256"]
    assert (stored / "train.py").read_bytes() == SCRIPT  # the queued job keeps what was there
    assert job["spec"]["env"] == {"API_KEY": "***"}  # secrets are not shown back
    assert job["name"] == "python train.py"
    retried_spec = command_client.get(f"/api/v1/jobs/{job['id']}").json["spec"]
    assert retried_spec["source"] == job["source"]["ref"]


def test_an_archive_sent_as_a_plain_form_field_is_read_like_a_file_part(command_client, tmp_path):
    """Generated clients (and schemathesis) send the `file` field without a filename: a plain form field. An
    uncompressed tar of text files survives that (UTF-8); it is the same tree as the file part's."""
    root = tmp_path / "plain"
    root.mkdir()
    (root / "train.py").write_bytes(SCRIPT)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        t.add(root / "train.py", arcname="train.py")
    as_file = upload(command_client, buf.getvalue(), "src.tar")
    as_field = command_client.post("/api/v1/sources", data={"file": buf.getvalue().decode()})
    assert as_file.status_code == 201 and as_field.status_code == 200, as_field.json
    assert as_field.json["ref"] == as_file.json["ref"] == sourcetree.ref(sourcetree.digest(root))
    assert command_client.post("/api/v1/tensorboard", json={"jobs": [999.0]}).status_code == 404  # 999.0 is 999
