"""jobs.periodic: a helper thread whose round never comes back is said in the log, with where it is stuck (the
GPU sampler's samples would otherwise just expire, and nothing would say why)."""

from __future__ import annotations

import logging
import threading
import time

from jobs.periodic import Periodic, Watch


class Blocking(Periodic):
    what, every_s, stuck_s = "blocking helper", 0.05, 60.0

    def __init__(self, redis_url: str):
        super().__init__(redis_url, "blocking")
        self.release = threading.Event()
        self.rounds = 0

    def round(self) -> None:
        self.rounds += 1
        if self.rounds == 2:
            self.release.wait(30)  # (a tool that never answers)


def test_a_stuck_round_is_said_once_with_its_stack_and_a_round_that_comes_back_is_not(redis_url, redis, caplog):
    helper = Blocking(redis_url)
    watch = Watch(redis_url, [helper])
    caplog.set_level(logging.WARNING, logger="jobs.periodic")
    helper.start()
    try:
        deadline = time.monotonic() + 10
        while helper.rounds < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        watch.once()
        assert not caplog.records  # (stuck for less than its stuck_s yet)
        helper.stuck_s = 0.0  # (as if its 60 s had passed)
        watch.once()
        watch.once()
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1, said
        assert "blocking helper: a round has not come back" in said[0] and "self.release.wait(30)" in said[0]
    finally:
        helper.release.set()
        helper.stopped.set()
        helper.join(5)
    caplog.clear()
    watch.once()
    assert not caplog.records and helper.round_since is None
