"""Run `gpudeck up` for real in a test, and look at the processes it leaves."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from jobs.redis_server import free_port
from jobs.run.proc import python_module
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
        self.env, self.args = env, args
        self.out = open(log, "ab")  # noqa: SIM115
        self.log = log
        self.proc = self._spawn()
        wait_http(f"{self.url}/healthz", timeout=90)
        self._banner(self.proc, 0)

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            python_module("tui.cli", "up", "--port", str(self.port), "--home", str(self.home), *self.args),
            env=self.env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _banner(self, proc: subprocess.Popen[bytes], seen: int, limit_s: float = 30) -> bool:
        """Wait for `proc`'s banner (the seen+1-th in the log: it follows the API's first answer); False when the
        process exited first."""
        deadline = time.monotonic() + limit_s
        while self.output().count("gpudeck is up") <= seen:
            if proc.poll() is not None:
                return False
            assert time.monotonic() < deadline, self.output()[-3000:]
            time.sleep(0.05)
        return True

    def respawn(self, limit_s: float = 120.0) -> float:
        """Start `gpudeck up` again, on the same home and port, after it was killed (`kill -9`), as an operator or
        a service manager would: again while what the old one left still holds the port or the home's lock.
        Returns how long until it was up."""
        t0 = time.monotonic()
        while True:
            seen = self.output().count("gpudeck is up")
            proc = self._spawn()
            if self._banner(proc, seen, limit_s=90):
                self.proc = proc
                return time.monotonic() - t0
            assert time.monotonic() - t0 < limit_s, self.output()[-3000:]
            time.sleep(1.0)

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
