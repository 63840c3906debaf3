"""One Settings object per process, built from the environment once and passed down."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs import objectstore
from jobs.backends import IMPLEMENTATIONS
from jobs.errors import ConfigError
from models.common import AGE, DEFAULT_API, DEFAULT_PORT, parse_age, parse_size  # noqa: F401 (their home for jobs/)
from models.protocol import KEEP_CHECKPOINTS_ENV, keep_checkpoints
from models.states import ENDED, PRIORITIES

DEFAULT_HOME = "~/.local/share/gpudeck"
"""Data root when GPUDECK_HOME is unset: job dirs, the embedded Redis, logs of `gpudeck up`."""


def parse_retention(raw: str) -> tuple[tuple[str, int], ...]:
    """GPUDECK_RETENTION, `failed,canceled:14d;succeeded:90d`, as ((status, max age s), …); ValueError naming
    what is wrong. Empty: nothing is deleted by age."""
    rules: dict[str, int] = {}
    for part in (p.strip() for p in raw.split(";")):
        if not part:
            continue
        statuses, sep, age = part.partition(":")
        if not sep:
            raise ValueError(f"each rule is STATUSES:AGE (failed,canceled:14d), got {part!r}")
        seconds = parse_age(age)
        for status in (s.strip().lower() for s in statuses.split(",")):
            if status not in ENDED:
                raise ValueError(f"{status!r} is not an ended status ({', '.join(ENDED)}) in {part!r}")
            if status in rules:
                raise ValueError(f"{status!r} has two rules")
            rules[status] = seconds
    return tuple(rules.items())


def _size(env, name: str, default: int, zero: bool = False) -> int:
    raw = env.get(name)
    if not raw:
        return default
    if zero and raw.strip() == "0":  # (0 turns the limit off)
        return 0
    try:
        return parse_size(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a positive number like 1000, 512M or 8G, got {raw!r}") from None


def _checked(parse, env, name: str):
    """`parse(env[name])`, its ValueError a ConfigError that names the variable."""
    try:
        return parse(env.get(name) or "")
    except ValueError as exc:
        raise ConfigError(str(exc) if name in str(exc) else f"{name}: {exc}") from None


def _unless_unset(parse, env, name: str, default: Any) -> Any:
    """`_checked(parse, ...)` where `name` is set, else `default`."""
    return _checked(parse, env, name) if (env.get(name) or "").strip() else default


def _artifacts(env) -> str | None:
    """GPUDECK_ARTIFACTS, checked (s3://BUCKET[/PREFIX]), or None."""
    url = (env.get("GPUDECK_ARTIFACTS") or "").strip()
    if url:
        _checked(objectstore.parse, env, "GPUDECK_ARTIFACTS")
    return url or None


def _command_jobs(env) -> tuple[bool, bool]:
    """GPUDECK_COMMAND_JOBS: (command jobs on without tokens, the operator trusts every user who may run commands
    with the service itself). `trusted` is both: named users run commands even where no sandbox can be made."""
    raw = (env.get("GPUDECK_COMMAND_JOBS") or "").strip().lower()
    if raw == "trusted":
        return True, True
    return _flag(env, "GPUDECK_COMMAND_JOBS"), False


def _choice(env, name: str, choices: tuple[str, ...]) -> str:
    raw = (env.get(name) or choices[0]).strip().lower()
    if raw not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return raw


POLICIES = ("fifo", "las")
"""GPUDECK_POLICY's values, the default first."""


def _las_limits(raw: str) -> tuple[int, ...]:
    """GPUDECK_LAS_LIMITS: GPU-times (`10m,1h` or GPU-seconds), rising."""
    limits = tuple(int(part) if part.strip().isdigit() else _duration(part) for part in raw.split(","))
    if not limits or any(a >= b for a, b in zip(limits, limits[1:])) or limits[0] <= 0:
        raise ValueError(f"write rising GPU-times above 0, comma-separated (10m,1h), got {raw!r}")
    return limits


def _positive(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e6:
        raise ValueError(f"write a number above 0, got {raw!r}")
    return value


def _switch(env, name: str, default: bool) -> bool:
    """An on/off setting with a default (`on`, `off`, 1, 0, true, false)."""
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    return _flag(env, name)


def _duration(raw: str) -> int:
    """`0`, `90s`, `5m`, `7d` as seconds."""
    if raw.strip() == "0":
        return 0
    try:
        return parse_age(raw)
    except ValueError:
        raise ValueError(f"write a duration such as 0, 90s, 5m or 7d, got {raw!r}") from None


def _seconds(env, name: str, default: Any) -> Any:
    """A duration setting (`0`, `90s`, `5m`, `1h30m`, `7d`) as seconds; unset: the field's one default."""
    return _checked(_duration, env, name) if env.get(name) else default


def _jobs_per_gpu(raw: str, name: str = "GPUDECK_JOBS_PER_GPU") -> int:
    """GPUDECK_JOBS_PER_GPU: workers `gpudeck up` starts on each GPU (its job slots: whole-GPU jobs take one, jobs
    with `gpu_memory` share the rest), 1 to 16; unset: 1."""
    if not raw.strip():
        return 1
    if not raw.strip().isdigit() or not 1 <= int(raw) <= 16:
        raise ValueError(f"{name} must be a whole number from 1 to 16, got {raw!r}")
    return int(raw)


DEMAND_SLOTS_MAX = 4
"""GPUDECK_MAX_JOBS_PER_GPU's default where GPUDECK_JOBS_PER_GPU is not set either."""


def _max_jobs_per_gpu(env, per_gpu: int) -> int:
    """GPUDECK_MAX_JOBS_PER_GPU: the most job slots `gpudeck up` grows a GPU to while shares that fit its memory wait
    for a slot (at least GPUDECK_JOBS_PER_GPU); unset: GPUDECK_JOBS_PER_GPU where that is set (fixed slots, as the
    operator chose), else DEMAND_SLOTS_MAX (a default `up`: slots follow demand, issue 64)."""
    name = "GPUDECK_MAX_JOBS_PER_GPU"
    if not (env.get(name) or "").strip():
        return per_gpu if (env.get("GPUDECK_JOBS_PER_GPU") or "").strip() else max(per_gpu, DEMAND_SLOTS_MAX)
    most = _checked(lambda raw: _jobs_per_gpu(raw, name), env, name)
    if most < per_gpu:
        raise ConfigError(f"{name} ({most}) must be at least GPUDECK_JOBS_PER_GPU ({per_gpu})")
    return most


def _names(raw: str) -> tuple[str, ...]:
    """GPUDECK_PASS_ENV: variable names, comma-separated (a trailing `*` takes every name with that prefix)."""
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    for n in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\*?", n):
            raise ValueError(f"GPUDECK_PASS_ENV: {n!r} is not a variable name (NAME or PREFIX*)")
    return names


def _flag(env, name: str) -> bool:
    raw = (env.get(name) or "0").strip().lower()
    if raw not in ("1", "true", "yes", "on", "0", "false", "no", "off", ""):
        raise ConfigError(f"{name} must be 1 or 0, got {raw!r}")
    return raw in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Cache:
    """A host folder the operator shares with the jobs that name it (GPUDECK_CACHES): the variable it is known by
    (KERAS_HOME, HF_HOME, TFDS_DATA_DIR, TORCH_HOME, …), its path, whether jobs may write to it."""

    name: str
    path: Path
    writable: bool = False


def _caches(raw: str) -> tuple[Cache, ...]:
    """GPUDECK_CACHES: `KERAS_HOME=/srv/keras:rw;HF_HOME=/srv/hf` (`:rw`: jobs may write there; else read-only)."""
    out: list[Cache] = []
    for item in (i.strip() for i in raw.split(";")):
        if not item:
            continue
        name, sep, path = item.partition("=")
        path, writable = (path[:-3], True) if path.endswith(":rw") else (path.removesuffix(":ro"), False)
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.strip()) or not path.strip().startswith("/"):
            raise ValueError(f"GPUDECK_CACHES takes NAME=/absolute/path[:rw];…, got {item!r}")
        if any(c.name == name.strip() for c in out):
            raise ValueError(f"GPUDECK_CACHES names {name.strip()!r} twice")
        out.append(Cache(name.strip(), Path(path.strip()), writable))
    return tuple(out)


def _envs(raw: str) -> tuple[tuple[str, Path], ...]:
    """GPUDECK_ENVS: `name=/path/to/venv,other=/opt/conda/envs/x`."""
    envs = []
    for item in (i.strip() for i in raw.split(",")):
        if not item:
            continue
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ConfigError(f"GPUDECK_ENVS takes name=/path/to/venv,…; got {item!r}")
        envs.append((name.strip(), Path(path.strip()).expanduser()))
    return tuple(envs)


@dataclass(frozen=True)
class Webhook:
    """An endpoint the operator named (GPUDECK_WEBHOOKS): where a job's notifications go, in which shape."""

    name: str
    url: str
    slack: bool = False
    secret: str | None = None


def _webhooks(env: os._Environ[str] | dict[str, str]) -> tuple[Webhook, ...]:
    """GPUDECK_WEBHOOKS `lab=https://…;ci:slack=https://…` and GPUDECK_WEBHOOK_SECRETS `lab=…;ci=…`."""
    secrets: dict[str, str] = {}
    for item in (i.strip() for i in env.get("GPUDECK_WEBHOOK_SECRETS", "").split(";")):
        name, sep, secret = item.partition("=")
        if item and (not sep or not name.strip() or not secret):
            raise ConfigError("GPUDECK_WEBHOOK_SECRETS takes name=secret;… (the names of GPUDECK_WEBHOOKS)")
        if item:
            secrets[name.strip()] = secret
    hooks = []
    for item in (i.strip() for i in env.get("GPUDECK_WEBHOOKS", "").split(";")):
        if not item:
            continue
        name, sep, url = item.partition("=")
        name, _, shape = name.strip().partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", name) or shape not in ("", "slack"):
            raise ConfigError(f"GPUDECK_WEBHOOKS takes name=URL;name:slack=URL;…; got {item!r}")
        if not re.match(r"^https?://[^/\s]+", url.strip()):
            raise ConfigError(f"GPUDECK_WEBHOOKS: {name}'s URL must be http:// or https://, got {url.strip()!r}")
        hooks.append(Webhook(name, url.strip(), shape == "slack", secrets.pop(name, None)))
    if secrets:
        raise ConfigError(f"GPUDECK_WEBHOOK_SECRETS names endpoints GPUDECK_WEBHOOKS has not: {sorted(secrets)}")
    return tuple(hooks)


def _admin_notify(env: os._Environ[str] | dict[str, str]) -> tuple[str, ...]:
    """GPUDECK_ADMIN_NOTIFY: the endpoints of GPUDECK_WEBHOOKS told of what befalls the box (a GPU cordoned)."""
    names = tuple(n.strip() for n in (env.get("GPUDECK_ADMIN_NOTIFY") or "").split(",") if n.strip())
    known = {w.name for w in _webhooks(env)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"GPUDECK_ADMIN_NOTIFY names endpoints GPUDECK_WEBHOOKS has not: {unknown}")
    return names


def _slurm_qos(raw: str) -> tuple[tuple[str, str], ...]:
    """GPUDECK_SLURM_QOS `high=gpu-high,low=scavenger`: a QOS name for some of gpudeck's priorities."""
    out = []
    for item in (i.strip() for i in raw.split(",") if i.strip()):
        priority, sep, qos = (x.strip() for x in item.partition("="))
        if not sep or priority not in PRIORITIES or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", qos):
            raise ValueError(f"GPUDECK_SLURM_QOS takes priority=QOS,… ({', '.join(PRIORITIES)}); got {item!r}")
        out.append((priority, qos))
    return tuple(out)


@dataclass(frozen=True)
class Settings:
    """Process-wide configuration; every field comes from one documented env variable."""

    home: Path
    redis_url: str | None = None
    tokens: tuple[str, ...] = ()
    data_roots: tuple[Path, ...] = field(default_factory=tuple)
    dataset_max_bytes: int = 64 << 30
    dataset_max_files: int = 2_000_000
    tensorboard_max: int = 4
    tensorboard_idle_s: int = 3600
    command_jobs: bool = False
    command_jobs_trusted: bool = False
    sandbox: str = "auto"
    envs: tuple[tuple[str, Path], ...] = ()
    caches: tuple[Cache, ...] = ()
    source_max_bytes: int = 100 << 20
    source_max_files: int = 100_000
    min_free: int = 2 << 30
    retention: tuple[tuple[str, int], ...] = ()
    keep_checkpoints: int | None = 2
    advertise_host: str | None = None
    preempt: bool = True
    preempt_after_s: int = 300
    fairshare: bool = True
    fairshare_halflife_s: int = 7 * 86400
    fairshare_age_max_s: int = 86400
    backfill: bool = True
    policy: str = "fifo"
    """GPUDECK_POLICY: `fifo` (within a priority and the fair share, the order of submission) or `las` (least
    attained service first, preempting at a checkpoint: jobs.las)."""
    las_limits: tuple[int, ...] = (3600,)
    """GPUDECK_LAS_LIMITS: the GPU-time (`1h`, or GPU-seconds) that puts a job in the next band, comma-separated."""
    las_promote: float = 2.0
    """GPUDECK_LAS_PROMOTE: a job that has waited this many times as long as it has run goes back to band 0."""
    foreign_memory: int = 1 << 30
    gpu_memory_reserve: int = 1 << 30
    gpu_context_memory: int = 1 << 30
    """GPUDECK_GPU_CONTEXT_MEMORY: what a process holds on its GPU beside what its framework allocates (its CUDA
    context; 576-610 MiB for JAX 0.11 and PyTorch 2.11 on an H200 with CUDA 13): a share is packed as its
    `gpu_memory` and one context, and the watchdog allows each of a share's processes one."""
    gpu_memory_grace_s: int = 10
    jobs_per_gpu: int = 1
    max_jobs_per_gpu: int = DEMAND_SLOTS_MAX
    """GPUDECK_MAX_JOBS_PER_GPU (see _max_jobs_per_gpu): job slots a GPU grows to for shares that wait."""
    mps: bool = False
    idle_gpu: str = "off"
    idle_gpu_window_s: int = 1800
    warm: bool = True
    """GPUDECK_WARM: a worker that ran a zoo job keeps a trainer ready for the next (jobs.run.warm)."""
    warm_max_age_s: int = 3600
    webhooks: tuple[Webhook, ...] = ()
    admin_notify: tuple[str, ...] = ()
    public_url: str | None = None
    webhook_retry_s: float = 5.0
    env_max_bytes: int = 20 << 30
    env_max_age_s: int = 30 * 86400
    session_idle_min_s: int = 60
    session_idle_max_s: int = 4 * 3600
    session_max_s: int = 24 * 3600
    job_user: str | None = None
    pass_env: tuple[str, ...] = ()
    artifacts: str | None = None
    """GPUDECK_ARTIFACTS: s3://bucket/prefix, where jobs' checkpoints, models and results are kept too
    (jobs.objectstore); none: only in the job dirs."""
    mlflow_uri: str | None = None
    """GPUDECK_MLFLOW_URI: the MLflow the API exports ended jobs to (jobs.export); none: no server-side export."""
    mlflow_experiment: str = "gpudeck"
    backend: str = "local"
    """GPUDECK_BACKEND: `local` (gpudeck's workers and scheduler) or `slurm` (jobs run as Slurm jobs: jobs.onslurm)."""
    slurm_partition: str | None = None
    slurm_account: str | None = None
    slurm_qos: tuple[tuple[str, str], ...] = ()
    """GPUDECK_SLURM_QOS `high=gpu-high,low=scavenger`: gpudeck's priorities as the cluster's QOS names."""
    slurm_grace_s: int = 60
    slurm_poll_s: int = 5

    @property
    def command_jobs_allowed(self) -> bool:
        """Command jobs run anything as the service: only with tokens required, or turned on by the operator."""
        return bool(self.tokens) or self.command_jobs

    @classmethod
    def from_env(cls, environ: os._Environ[str] | dict[str, str] | None = None) -> Settings:
        """Read GPUDECK_HOME, REDIS_URL, GPUDECK_TOKENS, GPUDECK_DATA_ROOTS, GPUDECK_ADVERTISE_HOST, the command-job
        switches and the limits."""
        env = os.environ if environ is None else environ
        home = Path(env.get("GPUDECK_HOME") or DEFAULT_HOME).expanduser().resolve()
        tokens = tuple(t.strip() for t in env.get("GPUDECK_TOKENS", "").split(",") if t.strip())
        roots = tuple(Path(p).expanduser().resolve() for p in env.get("GPUDECK_DATA_ROOTS", "").split(os.pathsep) if p)
        return cls(
            home=home,
            redis_url=env.get("REDIS_URL") or None,
            tokens=tokens,
            data_roots=roots,
            dataset_max_bytes=_size(env, "GPUDECK_DATASET_MAX_BYTES", cls.dataset_max_bytes),
            dataset_max_files=_size(env, "GPUDECK_DATASET_MAX_FILES", cls.dataset_max_files),
            tensorboard_max=_size(env, "GPUDECK_TENSORBOARD_MAX", cls.tensorboard_max),
            tensorboard_idle_s=_size(env, "GPUDECK_TENSORBOARD_IDLE", cls.tensorboard_idle_s),
            command_jobs=_command_jobs(env)[0],
            command_jobs_trusted=_command_jobs(env)[1],
            sandbox=_choice(env, "GPUDECK_SANDBOX", ("auto", "bwrap", "off")),
            envs=_envs(env.get("GPUDECK_ENVS", "")),
            caches=_checked(_caches, env, "GPUDECK_CACHES"),
            source_max_bytes=_size(env, "GPUDECK_SOURCE_MAX_BYTES", cls.source_max_bytes),
            source_max_files=_size(env, "GPUDECK_SOURCE_MAX_FILES", cls.source_max_files),
            min_free=0
            if env.get("GPUDECK_MIN_FREE", "").strip() == "0"
            else _size(env, "GPUDECK_MIN_FREE", cls.min_free),
            retention=_checked(parse_retention, env, "GPUDECK_RETENTION"),
            keep_checkpoints=_checked(keep_checkpoints, env, KEEP_CHECKPOINTS_ENV),
            advertise_host=(env.get("GPUDECK_ADVERTISE_HOST") or "").strip() or None,
            preempt=_switch(env, "GPUDECK_PREEMPT", True),
            preempt_after_s=_seconds(env, "GPUDECK_PREEMPT_AFTER", cls.preempt_after_s),
            fairshare=_switch(env, "GPUDECK_FAIRSHARE", True),
            fairshare_halflife_s=_seconds(env, "GPUDECK_FAIRSHARE_HALFLIFE", cls.fairshare_halflife_s),
            fairshare_age_max_s=_seconds(env, "GPUDECK_FAIRSHARE_AGE_MAX", cls.fairshare_age_max_s),
            backfill=_switch(env, "GPUDECK_BACKFILL", True),
            policy=_choice(env, "GPUDECK_POLICY", POLICIES),
            las_limits=_checked(_las_limits, env, "GPUDECK_LAS_LIMITS")
            if env.get("GPUDECK_LAS_LIMITS")
            else cls.las_limits,
            las_promote=_checked(_positive, env, "GPUDECK_LAS_PROMOTE")
            if env.get("GPUDECK_LAS_PROMOTE")
            else cls.las_promote,
            foreign_memory=_size(env, "GPUDECK_FOREIGN_MEMORY", cls.foreign_memory, zero=True),
            gpu_memory_reserve=_size(env, "GPUDECK_GPU_MEMORY_RESERVE", cls.gpu_memory_reserve, zero=True),
            gpu_context_memory=_size(env, "GPUDECK_GPU_CONTEXT_MEMORY", cls.gpu_context_memory, zero=True),
            gpu_memory_grace_s=_seconds(env, "GPUDECK_GPU_MEMORY_GRACE", cls.gpu_memory_grace_s),
            jobs_per_gpu=(per_gpu := _checked(_jobs_per_gpu, env, "GPUDECK_JOBS_PER_GPU")),
            max_jobs_per_gpu=_max_jobs_per_gpu(env, per_gpu),
            mps=_switch(env, "GPUDECK_MPS", False),
            idle_gpu=_choice(env, "GPUDECK_IDLE_GPU", ("off", "warn", "stop")),
            idle_gpu_window_s=_seconds(env, "GPUDECK_IDLE_GPU_WINDOW", cls.idle_gpu_window_s),
            warm=_switch(env, "GPUDECK_WARM", cls.warm),
            warm_max_age_s=_seconds(env, "GPUDECK_WARM_MAX_AGE", cls.warm_max_age_s),
            webhooks=_webhooks(env),
            admin_notify=_admin_notify(env),
            webhook_retry_s=_seconds(env, "GPUDECK_WEBHOOK_RETRY", cls.webhook_retry_s),
            env_max_bytes=_size(env, "GPUDECK_ENV_MAX_BYTES", cls.env_max_bytes),
            env_max_age_s=_seconds(env, "GPUDECK_ENV_MAX_AGE", cls.env_max_age_s),
            session_idle_min_s=_seconds(env, "GPUDECK_SESSION_IDLE_MIN", cls.session_idle_min_s),
            session_idle_max_s=_seconds(env, "GPUDECK_SESSION_IDLE_MAX", cls.session_idle_max_s),
            public_url=(env.get("GPUDECK_PUBLIC_URL") or "").strip().rstrip("/") or None,
            session_max_s=_seconds(env, "GPUDECK_SESSION_MAX", cls.session_max_s),
            job_user=(env.get("GPUDECK_JOB_USER") or "").strip() or None,
            pass_env=_checked(_names, env, "GPUDECK_PASS_ENV"),
            artifacts=_artifacts(env),
            mlflow_uri=(env.get("GPUDECK_MLFLOW_URI") or "").strip() or None,
            mlflow_experiment=(env.get("GPUDECK_MLFLOW_EXPERIMENT") or "").strip() or cls.mlflow_experiment,
            backend=_choice(env, "GPUDECK_BACKEND", tuple(IMPLEMENTATIONS)),
            slurm_partition=(env.get("GPUDECK_SLURM_PARTITION") or "").strip() or None,
            slurm_account=(env.get("GPUDECK_SLURM_ACCOUNT") or "").strip() or None,
            slurm_qos=_checked(_slurm_qos, env, "GPUDECK_SLURM_QOS"),
            slurm_grace_s=_seconds(env, "GPUDECK_SLURM_GRACE", cls.slurm_grace_s),
            slurm_poll_s=max(1, _seconds(env, "GPUDECK_SLURM_POLL", cls.slurm_poll_s)),
        )

    def webhook(self, name: str) -> Webhook | None:
        return next((w for w in self.webhooks if w.name == name), None)

    def env_python(self, name: str | None) -> Path | None:
        """The bin folder of a registered environment (None: unknown name, or no name and so the worker's own)."""
        return next((path / "bin" for n, path in self.envs if n == name), None)

    @property
    def sources_dir(self) -> Path:
        """Source snapshots of command jobs, by content: `$GPUDECK_HOME/sources/<sha256>/`."""
        return self.home / "sources"

    @property
    def datasets_dir(self) -> Path:
        """Parent of every uploaded dataset: `$GPUDECK_HOME/datasets/<name>/<version>/`."""
        return self.home / "datasets"

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

        if not self.redis_url:
            raise ConfigError("REDIS_URL is not set and no embedded Redis was started")
        return Redis.from_url(self.redis_url)
