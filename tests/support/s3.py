"""An S3-compatible store for tests: moto's server on 127.0.0.1 (real HTTP, real boto3 on both sides), a bucket
in it, and the environment that points gpudeck's processes at it (GPUDECK_ARTIFACTS and boto3's variables)."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jobs.redis_server import free_port
from tests.support.live import wait_http

SECRET = "s3cret-key-never-shown"
"""The secret access key the test store is given: no log, spec, record or job environment may hold it."""


class S3:
    def __init__(self, port: int, bucket: str):
        self.port, self.bucket = port, bucket
        self.url = f"http://127.0.0.1:{port}"
        self.env = {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "gpudeck-test",
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
            "GPUDECK_ARTIFACTS": f"s3://{bucket}/gpudeck",
        }
        self.server: Any = None

    def start(self, process: bool = False) -> None:
        """In a thread of this process; or (`process`) as a process of its own at nice 15 (benchmarks)."""
        if process:
            argv = ["nice", "-n", "15", sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
            self.server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_http(f"{self.url}/moto-api/")
            return
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # (a line per request would bury a failure's report)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        if isinstance(self.server, subprocess.Popen):
            self.server.terminate()
            self.server.wait(10)
        else:
            self.server.stop()

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.url, aws_access_key_id="gpudeck-test", aws_secret_access_key=SECRET,
            region_name="us-east-1",
        )  # fmt: skip

    def keys(self, prefix: str = "gpudeck/") -> list[str]:
        got = self.client().list_objects_v2(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for o in got.get("Contents", []))


@contextmanager
def s3_store(bucket: str = "lab", process: bool = False) -> Iterator[S3]:
    """moto's S3 server on a free port of 127.0.0.1 with `bucket` made; stopped at the end."""
    store = S3(free_port(), bucket)
    store.start(process)
    try:
        store.client().create_bucket(Bucket=bucket)
        yield store
    finally:
        store.stop()
