"""The one interface of a place where jobs run (issue 63 #4), as dramatiq's `Broker` is its brokers': what the
engine asks of it wherever the answer depends on where jobs run — the default GPUs of a spec, which specs it admits,
what follows a job entering a line, the line's places and expected starts, a priority or a place changed, what
`gpudeck up` starts. No module outside `jobs/backends/` tests which backend it has.

One backend a process (`of`: the one GPUDECK_BACKEND names, made the first time it is asked for, as Django loads its
database engine by name), or the one a test installs (`use`). The implementations sit high in the layers (they
place, forecast and steer); the engine below reaches them through this interface alone, by name, so an import never
goes up."""

from __future__ import annotations

import importlib
import threading
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from jobs.backends import IMPLEMENTATIONS
from jobs.record import Job

if TYPE_CHECKING:
    from redis import Redis

    from jobs.record import Kept
    from jobs.settings import Settings

Starts = dict[int, tuple[Any, Any]]
"""Expected starts of queued jobs: id -> (epoch seconds or None, why or None)."""


class Backend(ABC):
    """A place where jobs run."""

    name: str = ""
    agent_module: str | None = None
    """The module `gpudeck up` runs in place of workers (its compute nodes are not gpudeck's), or None."""

    @abstractmethod
    def default_gpus(self, redis: Redis) -> int:
        """The GPUs a spec that names none gets."""

    @abstractmethod
    def admit(self, redis: Redis, spec: Kept, settings: Settings) -> None:
        """Raise (a GpudeckError naming the field) for a normalized spec this backend could never run."""

    @abstractmethod
    def queued(self, redis: Redis, job_id: int, settings: Settings) -> None:
        """A job just entered a line (submitted, or steered): start what can start now."""

    @abstractmethod
    def lines(self, redis: Redis, recs: list[Job], settings: Settings) -> tuple[dict[int, int], Starts]:
        """The queued jobs of `recs`: their places in line, and their expected starts."""

    @abstractmethod
    def reprioritize(self, redis: Redis, rec: Job, priority: str, settings: Settings) -> None:
        """Before a queued job's priority changes in its record: tell the place that orders the line, if not ours."""

    @abstractmethod
    def move(self, redis: Redis, job_id: int, before: int | None, after: int | None) -> Job:
        """A queued job moved in its line (before or after another, or first): its record."""

    def check_up(self, gpus: str | None, cpu_workers: int | None) -> None:
        """Raise ConfigError for options of `gpudeck up` that do not apply here (all do, by default)."""
        return None


_chosen: dict[str, Backend] = {}
_installed: list[Backend] = []
_lock = threading.Lock()


def of(settings: Settings) -> Backend:
    """This process's backend: the one a test installed, else the one `settings.backend` names (made once)."""
    if _installed:
        return _installed[-1]
    name = settings.backend
    backend = _chosen.get(name)
    if backend is None:
        with _lock:
            backend = _chosen.get(name)
            if backend is None:
                backend = importlib.import_module(IMPLEMENTATIONS[name]).BACKEND()
                _chosen[name] = backend
    return backend


def use(backend: Backend | None) -> None:
    """Install `backend` for this process (a test's stub), or remove the installed one (None)."""
    if backend is None:
        _installed.clear()
    else:
        _installed.append(backend)
