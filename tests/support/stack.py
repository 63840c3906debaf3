"""Run `gpudeck up` for real in a test, and look at the processes it leaves."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from jobs.proc import python_module
from jobs.redis_server import free_port
from tests.support.live import kill_tree, wait_http


class Up:
    """`gpudeck up --port P --home DIR [ARGS…]` as a child process."""

    def __init__(
        self, home: Path, env: dict[str, str], log: Path, redis_url: str | None = None, args: tuple[str, ...] = ()
    ):
        self.home, self.port = home, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in env.items() if k != "REDIS_URL"}  # the embedded Redis, as `make up` does
        if redis_url:
            env["REDIS_URL"] = redis_url
        self.out = open(log, "ab")  # noqa: SIM115
        self.log = log
        self.proc = subprocess.Popen(
            python_module("tui.cli", "up", "--port", str(self.port), "--home", str(home), *args),
            env=env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_http(f"{self.url}/healthz", timeout=90)
        deadline = time.monotonic() + 30
        while "gpudeck is up" not in self.output():  # the banner follows the API's first answer
            assert time.monotonic() < deadline and self.proc.poll() is None, self.output()[-3000:]
            time.sleep(0.05)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> float:
        """Signal it and return how long it took to exit."""
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        self.proc.wait(30)
        took = time.monotonic() - t0
        self.out.close()
        return took

    def kill(self) -> None:
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)
            self.proc.wait()
        self.out.close()
