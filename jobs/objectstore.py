"""A job's files in an S3-compatible object store (GPUDECK_ARTIFACTS=s3://bucket/prefix), with boto3: AWS, Ceph,
Garage, SeaweedFS, RustFS, MinIO alike. Where it is set, a job's checkpoints are uploaded while it trains and its
model and result when it ends (jobs.run.upload), an attempt on a host without them fetches the newest checkpoint
from here before it starts, the API serves a job's files from here where its host has no job dir, and deleting a
job deletes its objects. The endpoint and credentials are boto3's own (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_PROFILE, …, in the worker's and the API's environment; never a job's).

Objects: `<prefix>/jobs/<id>/<path in the job dir>`. A checkpoint becomes the newest only once its files are all
there: the TensorFlow state file (`checkpoints/checkpoint`) that names it goes last."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE = "checkpoint"
"""TensorFlow's checkpoint state file: which checkpoints are complete, the newest first."""
CHECKPOINTS = "checkpoints"
PATTERN = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?$")

_clients: dict[tuple[int, int], Any] = {}
_lock = threading.Lock()


class StoreError(Exception):
    """The store did not answer or refused: the message says what (never a credential)."""


def parse(url: str) -> tuple[str, str]:
    """`s3://bucket/prefix` -> (bucket, prefix without slashes at its ends); ValueError saying what is wrong."""
    m = PATTERN.match(url.strip())
    if m is None:
        raise ValueError(f"GPUDECK_ARTIFACTS must be s3://BUCKET or s3://BUCKET/PREFIX, got {url!r}")
    return m.group(1), (m.group(2) or "").strip("/")


@dataclass(frozen=True)
class Store:
    bucket: str
    prefix: str

    @classmethod
    def of(cls, url: str | None) -> Store | None:
        """The store GPUDECK_ARTIFACTS names, or None where it is not set."""
        return cls(*parse(url)) if url else None

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, job_id: int, rel: str = "") -> str:
        base = f"{self.prefix}/jobs/{job_id}/" if self.prefix else f"jobs/{job_id}/"
        return base + rel

    @property
    def client(self) -> Any:
        """boto3's S3 client (one per process and thread: boto3's sessions are not thread-safe, and a forked
        work-horse must not share its worker's connections)."""
        me = (os.getpid(), threading.get_ident())
        with _lock:
            if me not in _clients:
                try:
                    import boto3
                    from botocore.config import Config
                except ImportError:
                    raise StoreError(
                        "GPUDECK_ARTIFACTS needs boto3: pip install 'gpudeck[s3]' where the workers and the API run"
                    ) from None
                config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=60)
                _clients[me] = boto3.session.Session().client("s3", config=config)
            return _clients[me]

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        try:
            return fn(Bucket=self.bucket, **kwargs)
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 (botocore's errors, one message: what failed and why)
            raise StoreError(f"{what} in {self}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from None

    def put(self, path: Path, job_id: int, rel: str) -> None:
        """Upload one file (boto3 splits a large one into parts; the object appears whole or not at all)."""
        key = self.key(job_id, rel)
        self._call(f"uploading {rel}", lambda **kw: self.client.upload_file(str(path), kw["Bucket"], key))

    def put_bytes(self, data: bytes, job_id: int, rel: str) -> None:
        self._call(f"uploading {rel}", self.client.put_object, Key=self.key(job_id, rel), Body=data)

    def listing(self, job_id: int, prefix: str = "") -> list[dict[str, Any]]:
        """The job's objects under `prefix` (relative to the job): path, size, modified (sorted by path)."""
        base = self.key(job_id)
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            more = {"ContinuationToken": token} if token else {}
            page = self._call("listing", self.client.list_objects_v2, Prefix=base + prefix, **more)
            for obj in page.get("Contents", []):
                modified = (
                    obj["LastModified"].strftime("%Y-%m-%dT%H:%M:%S.")
                    + f"{obj['LastModified'].microsecond // 1000:03d}Z"
                )
                out.append({"path": obj["Key"][len(base) :], "size": obj["Size"], "modified": modified})
            if not page.get("IsTruncated"):
                return sorted(out, key=lambda f: f["path"])
            token = page["NextContinuationToken"]

    def get(self, job_id: int, rel: str, byte_range: str | None = None) -> dict[str, Any]:
        """GetObject's answer (Body, ContentLength, ETag, ContentRange…) for a path of the job."""
        more = {"Range": byte_range} if byte_range else {}
        return self._call(f"reading {rel}", self.client.get_object, Key=self.key(job_id, rel), **more)

    def read(self, job_id: int, rel: str) -> bytes | None:
        """A small object's bytes, or None where there is none."""
        try:
            return self.get(job_id, rel)["Body"].read()
        except StoreError as exc:
            if "NoSuchKey" in str(exc) or "404" in str(exc):
                return None
            raise

    def download(self, job_id: int, rel: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        key = self.key(job_id, rel)
        self._call(f"downloading {rel}", lambda **kw: self.client.download_file(kw["Bucket"], key, str(dest)))

    def delete(self, job_id: int, rels: list[str] | None = None) -> int:
        """Delete the job's objects (only `rels` where given): how many."""
        keys = (
            [self.key(job_id, r) for r in rels]
            if rels is not None
            else [self.key(job_id, f["path"]) for f in self.listing(job_id)]
        )
        for i in range(0, len(keys), 1000):
            batch = {"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}
            self._call("deleting", self.client.delete_objects, Delete=batch)
        return len(keys)

    def objects(self, job_id: int, rels: list[str]) -> Iterator[tuple[str, Any, int]]:
        """(path, a readable body, size) of each path, one after the other (a folder's archive)."""
        for rel in rels:
            got = self.get(job_id, rel)
            yield rel, got["Body"], got["ContentLength"]


def checkpoint_files(state: str, names: list[str]) -> list[str]:
    """The files (of `names`, a checkpoints folder's) that make up the checkpoints a state file lists."""
    listed = set(re.findall(r'^(?:all_)?model_checkpoint_paths?: "([^"/]+)"', state, re.M))
    return sorted(n for n in names if n.split(".", 1)[0] in listed and n != STATE)


def newest(state: str) -> str | None:
    """The newest checkpoint a state file names (`ckpt-8`), or None."""
    m = re.search(r'^model_checkpoint_path: "([^"/]+)"', state, re.M)
    return m.group(1) if m else None


def fetch_checkpoints(store: Store, job_id: int, dest: Path) -> str | None:
    """The job's newest checkpoint from the store into `dest` (a checkpoints folder that has none), its files first
    and the state file last; the checkpoint's name, or None where the store has none."""
    state = store.read(job_id, f"{CHECKPOINTS}/{STATE}")
    if state is None:
        return None
    text = state.decode()
    names = [f["path"].split("/", 1)[1] for f in store.listing(job_id, f"{CHECKPOINTS}/")]
    for name in checkpoint_files(text, names):
        store.download(job_id, f"{CHECKPOINTS}/{name}", dest / name)
    (dest / STATE).write_text(text)
    return newest(text)
