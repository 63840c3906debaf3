"""POST/GET /api/v1/datasets: uploads in every archive kind, versions, jobs naming `name:version` / `name`, and
bodies too big, over real HTTP (a gunicorn API process); archive attacks refused with nothing written outside and
bad form fields named, through Flask's test client (the same app and request parsing, without an API process
started for each of twenty cases)."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
import requests

from jobs.settings import Settings
from tests.support import formats
from tests.support.live import start_api

LIMITS = {"GPUDECK_DATASET_MAX_BYTES": "2M", "GPUDECK_DATASET_MAX_FILES": "200"}


@pytest.fixture
def api(spawn, child_env) -> str:
    """A real API process with small upload limits, so bombs are cheap to build."""
    return start_api(spawn, {**child_env, **LIMITS})


@pytest.fixture
def limited(settings, redis):
    """Flask's test client of the app with the same small limits (read from LIMITS as the API process reads them)."""
    from api import create_app

    small = Settings.from_env(LIMITS)
    s = replace(settings, dataset_max_bytes=small.dataset_max_bytes, dataset_max_files=small.dataset_max_files)
    return create_app({"SETTINGS": s, "REDIS": redis, "TESTING": True}).test_client()


def post(api: str, name: str, version: str, data: bytes, filename: str = "data.tar.gz", **extra) -> requests.Response:
    return requests.post(
        f"{api}/api/v1/datasets",
        data={"name": name, "version": version, **extra},
        files={"file": (filename, data)},
        timeout=60,
    )


def post_to(client, name: str, version: str, data: bytes, filename: str = "data.tar.gz"):
    """`post` through Flask's test client."""
    form = {"name": name, "version": version, "file": (io.BytesIO(data), filename)}
    return client.post("/api/v1/datasets", data=form, content_type="multipart/form-data")


def tar_bytes(add, mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:
        add(t)
    return buf.getvalue()


def add_file(t: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    t.addfile(info, io.BytesIO(data))


def add_special(t: tarfile.TarFile, name: str, kind: bytes, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    t.addfile(info)


def zip_bytes(entries: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16) | 0  # S_IFLNK
            z.writestr(info, target)
    return buf.getvalue()


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.name.endswith(".log")}


def test_upload_versions_and_jobs_naming_them(api, tmp_path, settings):
    first = post(api, "cifar10", "1.0.0", formats.cifar_tgz(tmp_path))
    assert first.status_code == 201, first.text
    meta = first.json()
    assert meta["ref"] == "cifar10:1.0.0" and meta["format"] == "cifar10-binary"
    assert meta["files"] == 7 and meta["size_bytes"] == 60 * 3073 + 70  # 6 batches + 10 class names
    stored = settings.datasets_dir / "cifar10" / "1.0.0" / "cifar-10-batches-bin"
    assert (stored / "test_batch.bin").stat().st_size == 20 * 3073

    # An IDX dataset inside a wrapping folder, as a zip, as a second version of the same name.
    src = formats.idx(tmp_path / "mnist", formats.images(30, (28, 28, 1)), formats.images(10, (28, 28, 1)))
    second = post(
        api, "cifar10", "2.0.0", zip_bytes({f"mnist/{p.name}": p.read_bytes() for p in src.iterdir()}), "m.zip"
    )
    assert second.status_code == 201 and second.json()["format"] == "idx", second.text

    listing = requests.get(f"{api}/api/v1/datasets", timeout=10).json()
    (ds,) = listing["datasets"]
    assert ds["name"] == "cifar10" and ds["latest"] == "2.0.0"
    assert [v["version"] for v in ds["versions"]] == ["2.0.0", "1.0.0"]
    assert requests.get(f"{api}/api/v1/datasets/cifar10", timeout=10).json() == ds
    assert requests.get(f"{api}/api/v1/datasets/nope", timeout=10).status_code == 404

    # A version is immutable: the same name:version again is refused and the stored files stay as they were.
    before = (stored / "data_batch_1.bin").read_bytes()
    again = post(api, "cifar10", "1.0.0", formats.cifar_tgz(tmp_path, seed=5))
    assert again.status_code == 409 and "immutable" in again.json()["message"]
    assert (stored / "data_batch_1.bin").read_bytes() == before

    submit = lambda ds: requests.post(  # noqa: E731
        f"{api}/api/v1/jobs", json={"model": "lenet", "dataset": ds, "params": {"steps": 1}}, timeout=10
    )
    newest = submit("cifar10").json()
    assert newest["spec"]["dataset"] == "cifar10:2.0.0"  # the newest, pinned
    older = submit("cifar10:1.0.0").json()
    assert older["spec"]["dataset"] == "cifar10:1.0.0"
    bad = submit("cifar10:3.0.0")
    assert bad.status_code == 404 and "versions: 2.0.0, 1.0.0" in bad.json()["details"]["fields"]["dataset"]
    assert "no dataset named 'imagenet'" in submit("imagenet").json()["details"]["fields"]["dataset"]
    outside = submit("/etc")
    assert outside.status_code == 403 and "GPUDECK_DATA_ROOTS" in outside.json()["details"]["fields"]["dataset"]

    # Deleting a version: refused while a queued job uses it (naming the job), then its files and entry go.
    version = f"{api}/api/v1/datasets/cifar10/1.0.0"
    refused = requests.delete(version, timeout=10)
    assert refused.status_code == 409 and f"job {older['id']}:" in refused.json()["message"]
    assert refused.json()["details"]["jobs"] == [older["id"]] and stored.exists()
    requests.post(f"{api}/api/v1/jobs/{older['id']}/cancel", timeout=10).raise_for_status()
    deleted = requests.delete(version, timeout=10)
    assert deleted.status_code == 200 and deleted.json()["bytes_freed"] == 60 * 3073 + 70
    assert not (settings.datasets_dir / "cifar10" / "1.0.0").exists()
    assert [v["version"] for v in requests.get(f"{api}/api/v1/datasets/cifar10", timeout=10).json()["versions"]] == [
        "2.0.0"
    ]
    assert requests.delete(version, timeout=10).status_code == 404
    assert requests.delete(f"{api}/api/v1/datasets/cifar10/2.0.0", timeout=10).status_code == 409  # still in use


@pytest.mark.slow
def test_a_job_trains_on_an_uploaded_dataset(api, tmp_path, worker):
    assert post(api, "tiny", "1", formats.cifar_tgz(tmp_path)).status_code == 201
    spec = {"model": "lenet", "dataset": "tiny", "params": {"steps": 3, "batch_size": 8}}
    job = requests.post(f"{api}/api/v1/jobs", json=spec, timeout=10).json()
    done = requests.get(f"{api}/api/v1/jobs/{job['id']}/wait?timeout=240", timeout=260).json()
    assert done["status"] == "succeeded", requests.get(f"{api}/api/v1/jobs/{job['id']}/logs", timeout=10).text
    assert done["result"]["steps"] == 3
    log = requests.get(f"{api}/api/v1/jobs/{job['id']}/logs", timeout=10).text
    assert "cifar10" in log and "tiny/1" in log  # the trainer says what it read, from the version's folder


def _symlink_chain(t: tarfile.TarFile) -> None:
    # Each link alone looks inside; together `a` resolves to the parent of the dataset folder.
    add_special(t, "a", tarfile.SYMTYPE, "b/../outside")
    add_special(t, "b", tarfile.SYMTYPE, ".")


ATTACKS = {
    "zip slip": (lambda: zip_bytes({"ok.txt": b"x", "../../evil.txt": b"owned"}), 422, "outside"),
    "tar with ../": (lambda: tar_bytes(lambda t: add_file(t, "data/../../evil.txt", b"owned")), 422, "outside"),
    "absolute path": (lambda: tar_bytes(lambda t: add_file(t, "/tmp/gpudeck-evil.txt", b"owned")), 422, "absolute"),
    "symlink escape": (
        lambda: tar_bytes(
            lambda t: (add_special(t, "link", tarfile.SYMTYPE, "../../outside"), add_file(t, "link/evil.txt", b"x"))
        ),
        422,
        "symlink",
    ),
    "absolute symlink": (lambda: tar_bytes(lambda t: add_special(t, "etc", tarfile.SYMTYPE, "/etc")), 422, "absolute"),
    "symlink chain": (lambda: tar_bytes(_symlink_chain), 422, "resolves outside"),
    "zip symlink": (lambda: zip_bytes({"a.txt": b"x"}, {"l": "../../outside"}), 422, "outside"),
    "write through an inside symlink": (
        lambda: tar_bytes(lambda t: (add_special(t, "d", tarfile.SYMTYPE, "."), add_file(t, "d/x.txt", b"x"))),
        422,
        "through",
    ),
    "device file": (lambda: tar_bytes(lambda t: add_special(t, "null", tarfile.CHRTYPE)), 422, "device"),
    "fifo": (lambda: tar_bytes(lambda t: add_special(t, "pipe", tarfile.FIFOTYPE)), 422, "fifo"),
    "tar.gz bomb": (lambda: tar_bytes(lambda t: add_file(t, "zeros.bin", bytes(8 << 20))), 413, "more than"),
    "tar.gz bomb of many files": (
        lambda: tar_bytes(lambda t: [add_file(t, f"z{i}.bin", bytes(1 << 20)) for i in range(6)]),
        413,
        "more than",
    ),
    "zip bomb": (lambda: zip_bytes({"zeros.bin": bytes(8 << 20)}), 413, "more than"),
    "too many files": (
        lambda: tar_bytes(lambda t: [add_file(t, f"f{i}.txt", b"x") for i in range(300)]),
        413,
        "entries",
    ),
    "not an archive": (lambda: os.urandom(4096), 422, "not a readable"),
    "no dataset inside": (lambda: tar_bytes(lambda t: add_file(t, "README", b"hello")), 422, "no dataset found"),
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_unsafe_archives_are_refused_with_nothing_written_outside(limited, tmp_path, settings, attack):
    make, status, words = ATTACKS[attack]
    (tmp_path / "outside").mkdir()
    before = files_under(tmp_path)
    resp = post_to(limited, "evil", "1", make())
    assert resp.status_code == status, resp.text
    body = resp.json
    assert body["details"]["field"] == "file" and words in body["message"]
    assert files_under(tmp_path) - before <= {"home", "home/datasets", "home/datasets/.staging"}
    assert not (settings.datasets_dir / "evil").exists()
    assert not any((settings.datasets_dir / ".staging").iterdir())
    assert not Path("/tmp/gpudeck-evil.txt").exists()
    assert limited.get("/api/v1/datasets").json["datasets"] == []
    # A refused upload does not hold the name: a good archive under it is accepted next.
    assert post_to(limited, "evil", "1", formats.cifar_tgz(tmp_path)).status_code == 201


@pytest.mark.parametrize(
    ("form", "field", "words"),
    [
        ({"version": "1"}, "name", "must match"),
        ({"name": "a/b", "version": "1"}, "name", "must match"),
        ({"name": "synthetic", "version": "1"}, "name", "reserved"),
        ({"name": "ok", "version": "../1"}, "version", "must match"),
        ({"name": "ok", "version": "1", "colour": "red"}, "colour", "unknown form field"),
    ],
)
def test_bad_form_fields_are_named(limited, form, field, words):
    resp = limited.post("/api/v1/datasets", data={**form, "file": (io.BytesIO(b"x"), "a.tgz")})
    assert resp.status_code == 400
    body = resp.json
    assert field in (body["details"].get("fields") or {body["details"].get("field"): 1}) and words in body["message"]


def test_missing_file_and_oversized_bodies(api):
    resp = requests.post(f"{api}/api/v1/datasets", data={"name": "a", "version": "1"}, timeout=10)
    assert resp.status_code == 400 and "required" in resp.json()["details"]["fields"]["file"]
    # Bigger than the expanded-size limit (2 MiB) plus per-entry headers: refused from Content-Length alone.
    big = requests.post(
        f"{api}/api/v1/datasets", data={"name": "a", "version": "1"}, files={"file": ("a.tgz", bytes(3 << 20))}
    )
    assert big.status_code == 413 and big.json()["error"] == "request_entity_too_large"
    # JSON endpoints keep their own 1 MiB limit.
    huge = requests.post(
        f"{api}/api/v1/jobs", data=b"{" + b" " * (2 << 20) + b"}", headers={"Content-Type": "application/json"}
    )
    assert huge.status_code == 413
