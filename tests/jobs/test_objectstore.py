"""Issue 46 §3, the store's side: a job's checkpoints uploaded as the trainer completes them (the state file that
makes one the newest goes last; the objects of checkpoints the trainer let go are deleted), fetched back on a host
without them, and a store that goes down mid-run losing nothing. Against moto's S3 server on 127.0.0.1 (real HTTP,
real boto3)."""

from __future__ import annotations

import dataclasses

import pytest

from jobs import objectstore
from jobs.errors import ConfigError
from jobs.run.upload import Uploader
from jobs.settings import Settings
from tests.support.s3 import s3_store


@pytest.fixture
def s3(monkeypatch):
    with s3_store() as store:
        for k, v in store.env.items():
            monkeypatch.setenv(k, v)
        objectstore._clients.clear()  # (a client per thread, made with the environment of its time)
        yield store
        objectstore._clients.clear()


def _checkpoint(folder, n: int, keep: tuple[int, ...]) -> None:
    """Checkpoint ckpt-n written as TensorFlow writes it (its data and index, then the state file naming the kept)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"ckpt-{n}.data-00000-of-00001").write_bytes(bytes([n]) * 5000)
    (folder / f"ckpt-{n}.index").write_bytes(b"index %d" % n)
    for old in folder.glob("ckpt-*"):
        if int(old.name.split(".")[0].split("-")[1]) not in keep:
            old.unlink()
    paths = "".join(f'all_model_checkpoint_paths: "ckpt-{k}"\n' for k in keep)
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{n}"\n{paths}')


def test_checkpoints_go_up_as_they_come_the_newest_last_and_come_back_where_they_are_not(s3, tmp_path):
    store = objectstore.Store.of(s3.env["GPUDECK_ARTIFACTS"])
    job_dir = tmp_path / "a" / "7"
    up = Uploader(store, 7, job_dir)
    assert up.sync()  # nothing yet
    _checkpoint(job_dir / "checkpoints", 2, (2,))
    assert up.sync() and up.uploaded == 2
    _checkpoint(job_dir / "checkpoints", 4, (2, 4))
    _checkpoint(job_dir / "checkpoints", 6, (4, 6))  # (the trainer keeps two: ckpt-2 went)
    assert up.sync()
    names = ("checkpoint", "ckpt-4.data-00000-of-00001", "ckpt-4.index", "ckpt-6.data-00000-of-00001", "ckpt-6.index")
    assert s3.keys() == [f"gpudeck/jobs/7/checkpoints/{n}" for n in names]
    assert up.sync() and up.uploaded == 6  # (unchanged: nothing sent again)

    (job_dir / "model.keras").write_bytes(b"model")
    assert up.finish() is None and "gpudeck/jobs/7/model.keras" in s3.keys()

    # Another host, no job dir: the newest checkpoint comes back whole, the state file last.
    mine = tmp_path / "b" / "7" / "checkpoints"
    assert objectstore.fetch_checkpoints(store, 7, mine) == "ckpt-6"
    assert sorted(p.name for p in mine.iterdir()) == sorted(p.name for p in (job_dir / "checkpoints").iterdir())
    assert (mine / "ckpt-6.data-00000-of-00001").read_bytes() == bytes([6]) * 5000
    assert objectstore.fetch_checkpoints(store, 8, tmp_path / "c") is None  # (a job that left none)
    assert store.delete(7) == 6 and s3.keys() == []


def test_a_store_down_mid_run_loses_no_checkpoint_and_takes_it_when_it_answers_again(s3, tmp_path):
    store = objectstore.Store.of(s3.env["GPUDECK_ARTIFACTS"])
    job_dir = tmp_path / "7"
    up = Uploader(store, 7, job_dir)
    _checkpoint(job_dir / "checkpoints", 2, (2,))
    assert up.sync()
    s3.stop()
    _checkpoint(job_dir / "checkpoints", 4, (2, 4))
    assert not up.sync() and not up.sync()  # (refused twice: said once)
    assert len(up.said) == 1 and "did not take ckpt-4" in up.said[0] and "stays in the job dir" in up.said[0]
    assert sorted(p.name for p in (job_dir / "checkpoints").iterdir())[-1] == "ckpt-4.index"  # (kept here)
    s3.start()
    assert up.sync() and "took ckpt-4: it answers again" in up.said[1]
    assert "ckpt-4" in objectstore.newest(store.read(7, "checkpoints/checkpoint").decode())
    s3.stop()
    (job_dir / "result.json").write_text("{}")
    error = up.finish()  # (the end, the store down: said, recorded, every file still in the job dir)
    assert error is not None and "did not take everything" in up.said[-1] and (job_dir / "result.json").exists()
    s3.start()


def test_gpudeck_artifacts_must_name_a_bucket():
    assert objectstore.parse("s3://lab/runs/gpu-box/") == ("lab", "runs/gpu-box")
    assert objectstore.Store.of("s3://lab").key(3, "model.keras") == "jobs/3/model.keras"
    with pytest.raises(ConfigError, match="GPUDECK_ARTIFACTS must be s3://BUCKET"):
        Settings.from_env({"GPUDECK_ARTIFACTS": "https://lab.s3.amazonaws.com/runs"})


def test_a_checkpoint_the_trainer_prunes_while_it_goes_up_still_goes_up_whole(s3, tmp_path):
    """A trainer that checkpoints faster than the store takes files (a checkpoint a second, a slow link) prunes the
    checkpoint being uploaded: the round sends the one it took, whole (held by hard links), instead of failing at
    each round for good; the next round sends the newest and deletes what the trainer let go."""
    job_dir = tmp_path / "jobs" / "9"
    folder = job_dir / "checkpoints"
    saved = [2]

    class Busy(objectstore.Store):
        """The store, while the trainer saves the next checkpoint (keeping only it) as each file goes up."""

        def put(self, path, job_id, name):
            saved.append(saved[-1] + 2)
            _checkpoint(folder, saved[-1], (saved[-1],))
            return super().put(path, job_id, name)

    plain = objectstore.Store.of(s3.env["GPUDECK_ARTIFACTS"])
    store = Busy(**{f.name: getattr(plain, f.name) for f in dataclasses.fields(plain)})
    _checkpoint(folder, 2, (2,))
    up = Uploader(store, 9, job_dir)
    assert up.sync() and up.said == []
    assert not list(folder.glob("ckpt-2.*")) and not up.staging.exists()  # (pruned here meanwhile; nothing left over)
    names = ("checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index")
    assert [k for k in s3.keys() if "/jobs/9/" in k] == [f"gpudeck/jobs/9/checkpoints/{n}" for n in names]
    mine = tmp_path / "b" / "checkpoints"
    assert objectstore.fetch_checkpoints(store, 9, mine) == "ckpt-2"
    assert (mine / "ckpt-2.data-00000-of-00001").read_bytes() == bytes([2]) * 5000

    up.store = plain
    assert up.sync()  # the newest, and ckpt-2's objects gone
    newest = f"ckpt-{saved[-1]}"
    assert objectstore.newest(plain.read(9, "checkpoints/checkpoint").decode()) == newest
    names = ("checkpoint", f"{newest}.data-00000-of-00001", f"{newest}.index")
    assert [k for k in s3.keys() if "/jobs/9/" in k] == [f"gpudeck/jobs/9/checkpoints/{n}" for n in names]
