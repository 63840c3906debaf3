"""An attempt's files into the object store (GPUDECK_ARTIFACTS), from its work-horse (the job never holds the
store's credentials): a thread that uploads each new checkpoint as the trainer completes it — its files first, then
the state file that makes it the newest, then the objects of the checkpoints the trainer let go are deleted — and,
when the attempt ends, the last checkpoint, the model and the result. A store that does not answer loses nothing:
the job dir keeps every file, the job goes on, the next round tries again, and its log says so at the end (what
the store did not take, and when it took it again: lines the attempt writes once its process ended, so no thread
but the pump's writes the log while it runs)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from redis.exceptions import RedisError

from jobs import jobfiles
from jobs.objectstore import CHECKPOINTS, STATE, Store, StoreError, checkpoint_files, newest
from jobs.periodic import Beating

log = logging.getLogger(__name__)

EVERY_S = 2.0
"""How often the job's checkpoints folder is looked at."""
SNAPSHOT_TRIES = 5
"""How many times a round takes the newest checkpoint's files again when the trainer pruned one meanwhile."""
AT_END = ("model.keras", "result.json")
"""What an attempt's end uploads besides its checkpoints."""


def start(artifacts: str | None, job_id: int, job_dir: Path) -> Uploader | None:
    """The running uploader of an attempt where GPUDECK_ARTIFACTS is set (`artifacts`), else None."""
    store = Store.of(artifacts)
    if store is None:
        return None
    uploader = Uploader(store, job_id, job_dir)
    uploader.start()
    return uploader


def ended(
    uploader: Uploader,
    beat: tuple[Callable[[], None], float],
    say: Callable[..., None],
    record: Callable[..., None],
) -> None:
    """The attempt ended: the last checkpoint, the model and the result go to the store (`beat`: the job's heartbeat
    and how often, kept meanwhile); `say`s into the job's log what the store did not take, and `record`s in the
    job's record how many files went and the last error. A Redis outage then leaves that unrecorded, never fails
    the job's end."""
    error = uploader.finish(*beat)
    try:
        if uploader.said:
            say(*uploader.said)
        record(artifacts={"store": str(uploader.store), "files": uploader.uploaded, "error": error})
    except RedisError as exc:
        log.warning("job %s: what the artifact store took is not recorded (Redis: %s)", uploader.job_id, exc)


class Uploader(threading.Thread):
    """Uploads one attempt's checkpoints while it runs (`start`), the rest at its end (`finish`); `said`: lines for
    the job's log (the first failure, and the recovery)."""

    def __init__(self, store: Store, job_id: int, job_dir: Path, every_s: float = EVERY_S):
        super().__init__(name="gpudeck-upload", daemon=True)
        self.store, self.job_id, self.job_dir = store, job_id, job_dir
        self.staging = job_dir.parent / f".{job_id}.upload"
        """Where a round hard-links the checkpoint it uploads (the service's, beside the job dir, out of the job's
        sight): the trainer may save the next checkpoint and prune this one while it goes up, and a checkpoint
        every second to a slow store must still go up whole, not be started over forever."""
        self.said: list[str] = []
        self.every_s = every_s
        self.stopped = threading.Event()
        self.sent: dict[str, tuple[int, int]] = {}  # file name -> (size, mtime_ns) uploaded
        self.sent_state: str | None = None
        self.error: str | None = None
        self.uploaded = 0

    def run(self) -> None:
        while not self.stopped.wait(self.every_s):
            self.sync()

    def sync(self) -> bool:
        """Upload the newest complete checkpoint where it changed; whether the store has it now."""
        state = self.sent_state
        try:
            taken = self._snapshot()
            if taken is None:
                return True  # no checkpoint yet, or none since the last one sent
            state, wanted = taken
            for name in wanted:
                st = os.lstat(self.staging / name)
                if self.sent.get(name) != (st.st_size, st.st_mtime_ns):
                    self.store.put(self.staging / name, self.job_id, f"{CHECKPOINTS}/{name}")
                    self.sent[name] = (st.st_size, st.st_mtime_ns)
                    self.uploaded += 1
            self.store.put_bytes(state.encode(), self.job_id, f"{CHECKPOINTS}/{STATE}")  # (now it is the newest)
            gone = [n for n in self.sent if n not in wanted]
            if gone:
                self.store.delete(self.job_id, [f"{CHECKPOINTS}/{n}" for n in gone])
                for n in gone:
                    del self.sent[n]
        except (StoreError, OSError) as exc:
            if self.error is None:
                kept = "it stays in the job dir, and was sent again every few seconds"
                self.said.append(f"gpudeck: the artifact store did not take {newest(state or '')} ({exc}); {kept}")
            self.error = str(exc)
            return False
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)
        if self.error is not None:
            self.said.append(f"gpudeck: the artifact store took {newest(state)}: it answers again")
            self.error = None
        self.sent_state = state
        return True

    def _snapshot(self) -> tuple[str, list[str]] | None:
        """(the state file, the files of the checkpoints it lists) hard-linked into `staging` together, or None where
        there is no checkpoint or none new. A file the trainer pruned meanwhile: the newest state is read again (its
        state file is written after its files: a state names only whole checkpoints). OSError when none holds still
        for SNAPSHOT_TRIES reads."""
        for _ in range(SNAPSHOT_TRIES):
            try:  # (every read through no link the job left: jobs.jobfiles)
                state = jobfiles.read_text(self.job_dir, f"{CHECKPOINTS}/{STATE}", 1 << 20)
                names = [n for n, st in jobfiles.entries(self.job_dir, CHECKPOINTS) if stat.S_ISREG(st.st_mode)]
            except OSError:
                return None
            if state == self.sent_state:
                return None
            wanted = checkpoint_files(state, names)
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging.mkdir(parents=True)
            try:
                for name in wanted:
                    jobfiles.copy_file(self.job_dir, f"{CHECKPOINTS}/{name}", self.staging, name, link=True)
            except FileNotFoundError:
                continue
            return state, wanted
        raise OSError(f"the checkpoints changed under {SNAPSHOT_TRIES} reads in a row")

    def finish(self, beat: Callable[[], None] | None = None, every_s: float = 3.0) -> str | None:
        """At the attempt's end: the last checkpoint, the model and the result; the error where one could not go.
        `beat` is called every `every_s` meanwhile (the job's heartbeat: a large model to a slow store must not look
        like a lost work-horse)."""
        self.stopped.set()
        if self.is_alive():
            self.join()
        with Beating(beat, every_s, "gpudeck-upload-beat") if beat is not None else contextlib.nullcontext():
            return self._last()

    def _last(self) -> str | None:
        ok = self.sync()
        for name in AT_END:
            try:  # (a regular file reached through no link: a model.keras that points at a root file is not sent)
                fd = jobfiles.open_file(self.job_dir, name)
            except OSError:
                continue
            try:
                self.store.put(Path(jobfiles.fd_path(fd)), self.job_id, name)
                self.uploaded += 1
            except StoreError as exc:
                ok, self.error = False, str(exc)
            finally:
                os.close(fd)
        if not ok:
            self.said.append(
                f"gpudeck: the artifact store did not take everything ({self.error}); the job dir keeps it all"
            )
        return None if ok else self.error
