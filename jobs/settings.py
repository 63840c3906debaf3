"""One Settings object per process, built from the environment once and passed down."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_HOME = "~/.local/share/gpudeck"
"""Data root when GPUDECK_HOME is unset: job dirs, the embedded Redis, logs of `gpudeck up`."""

DEFAULT_API = "http://127.0.0.1:8686"
"""Where clients (CLI, TUI) find the API when GPUDECK_API is unset."""

DEFAULT_PORT = 8686
"""Port the API binds in `gpudeck up` / `gpudeck api`."""


@dataclass(frozen=True)
class Settings:
    """Process-wide configuration; every field comes from one documented env variable."""

    home: Path
    redis_url: str | None = None
    api_url: str = DEFAULT_API
    token: str | None = None
    tokens: tuple[str, ...] = ()
    data_roots: tuple[Path, ...] = field(default_factory=tuple)

    @classmethod
    def from_env(cls, environ: os._Environ[str] | dict[str, str] | None = None) -> Settings:
        """Read GPUDECK_HOME, REDIS_URL, GPUDECK_API, GPUDECK_TOKEN(S), GPUDECK_DATA_ROOTS."""
        env = os.environ if environ is None else environ
        home = Path(env.get("GPUDECK_HOME") or DEFAULT_HOME).expanduser().resolve()
        tokens = tuple(t.strip() for t in env.get("GPUDECK_TOKENS", "").split(",") if t.strip())
        roots = tuple(Path(p).expanduser().resolve() for p in env.get("GPUDECK_DATA_ROOTS", "").split(os.pathsep) if p)
        return cls(
            home=home,
            redis_url=env.get("REDIS_URL") or None,
            api_url=(env.get("GPUDECK_API") or DEFAULT_API).rstrip("/"),
            token=env.get("GPUDECK_TOKEN") or None,
            tokens=tokens,
            data_roots=roots,
        )

    @property
    def jobs_dir(self) -> Path:
        """Parent of every job dir: `$GPUDECK_HOME/jobs/<id>/`."""
        return self.home / "jobs"

    def job_dir(self, job_id: int) -> Path:
        """The dir that holds one job's spec, log, metrics, checkpoints and results."""
        return self.jobs_dir / str(job_id)

    def redis(self):
        """A Redis client for REDIS_URL (raises ConfigError when none is configured)."""
        from redis import Redis

        from jobs.errors import ConfigError

        if not self.redis_url:
            raise ConfigError("REDIS_URL is not set and no embedded Redis was started")
        return Redis.from_url(self.redis_url)
