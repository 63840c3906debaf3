"""The Slurm agent (GPUDECK_BACKEND=slurm; `python -m jobs.slurmagent`, started by `gpudeck up --backend slurm` in
place of workers): the threads a worker runs for the box, less the box's own scheduling (Slurm places, orders,
shares and preempts): the Slurm round (jobs.onslurm: jobs to sbatch, squeue into the records), the searcher (a
search's trials launched and stopped early, as on one box), the notifier, and retention. Lost attempts are the
round's to judge (it knows what Slurm did with them), not the reaper's."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any

from jobs import control
from jobs.cronjobs import Timetable
from jobs.errors import ConfigError
from jobs.notify import Notifier
from jobs.onslurm import Round, SlurmAway, Tools
from jobs.periodic import Periodic, Watch
from jobs.reaper import Reaper
from jobs.search import Searcher
from jobs.settings import Settings

log = logging.getLogger(__name__)


def run(settings: Settings, stopped: threading.Event | None = None) -> None:
    """Run the agent's threads until `stopped` is set (SIGTERM or SIGINT in `main`)."""
    if not settings.redis_url:
        raise ConfigError("the Slurm agent needs REDIS_URL (gpudeck up --backend slurm sets it)")
    stopped = stopped or threading.Event()
    try:
        Tools().squeue()
    except SlurmAway as exc:  # (an outage the round rides out: said at the start, not refused)
        log.warning("Slurm does not answer yet: %s", exc)
    retention = (lambda r: control.apply_retention(r, settings)) if settings.retention else None
    helpers: list[Periodic] = [
        Round(settings),
        Reaper(settings.redis_url, retention, jobs=False),
        Searcher(settings),
        Timetable(settings),
        Notifier(settings),
    ]
    helpers.append(Watch(settings.redis_url, list(helpers)))
    for helper in helpers:
        helper.start()
    log.info("gpudeck's Slurm agent: partition %s, account %s", settings.slurm_partition or "(Slurm's default)",
             settings.slurm_account or "(each user's default)")  # fmt: skip
    stopped.wait()
    for helper in helpers:
        helper.stopped.set()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stopped = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        run(Settings.from_env(), stopped)
    except ConfigError as exc:
        print(f"gpudeck: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
