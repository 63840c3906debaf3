"""`python -m models.warm`: a trainer made ahead of time (a warm start), for one zoo job it does not know yet.

A worker starts it in a sandbox of its own (jobs.run.warm) while no job needs it: it imports TensorFlow, Keras
and the zoo — the seconds a cold trainer spends before its first step — and then waits, touching no device, for
one line on the descriptor WARM_FD_ENV names: `{"env": {...}, "argv": [...]}`, the environment and arguments of
`python -m models.train` for the job a work-horse hands it. It takes that environment as its own (the job's
`CUDA_VISIBLE_DEVICES`, its share, its id: all read by TensorFlow only when a device is first touched, which
happens after this) and trains, exactly as `python -m models.train` would, then exits: one job, never two.

End of file on that descriptor (the worker let it go: too old, another code version, the worker stopped) ends it
with status 0 and no job. Had anything touched a device while it warmed (TensorFlow listed its devices), it would
hold devices before its job's were set: it says so and exits 1 instead of waiting, and its worker starts the
job cold.
"""

from __future__ import annotations

import json
import os
import sys
import time

from models.protocol import EVENTS_FD_ENV

WARM_FD_ENV = "GPUDECK_WARM_FD"
"""The inherited descriptor a warm trainer reads its job from (one JSON line)."""
EXIT_NO_JOB = 0
EXIT_TOUCHED = 1


def devices_touched() -> bool:
    """Whether TensorFlow has listed its physical devices in this process (after which CUDA_VISIBLE_DEVICES no
    longer changes what it uses)."""
    from tensorflow.python.eager import context

    return context.context()._physical_devices is not None  # noqa: SLF001 (TensorFlow keeps no public flag)


def warm() -> float:
    """Import what a trainer's start costs; the seconds it took."""
    began = time.monotonic()
    import models.train  # noqa: F401
    import models.trainer  # noqa: F401  (TensorFlow, Keras, the zoo, the input pipeline)

    return time.monotonic() - began


def read_job(fd: int) -> dict | None:
    """The job's line, or None at end of file (no job is coming)."""
    raw = b""
    while not raw.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        raw += chunk
    return json.loads(raw)


def main() -> int:
    fd = int(os.environ[WARM_FD_ENV])
    took = warm()
    if devices_touched():
        print("gpudeck: the warm trainer touched a device before its job: not used", file=sys.stderr, flush=True)
        return EXIT_TOUCHED
    job = read_job(fd)
    os.close(fd)
    if job is None:
        return EXIT_NO_JOB
    events = os.environ.get(EVENTS_FD_ENV)  # (this process's own descriptor, whatever the job's env says)
    os.environ.clear()
    os.environ.update(job["env"])
    if events is not None:
        os.environ[EVENTS_FD_ENV] = events
    from models import train

    print(f"gpudeck: warm start (TensorFlow and the zoo imported {took:.1f}s ahead)", flush=True)
    return train.main(job["argv"])


if __name__ == "__main__":
    from models.train import leave, not_in_a_notebook  # (a warm trainer starts and ends as a cold one does)

    not_in_a_notebook()
    leave(main())
