"""The limits of a job spec and the checks of its fields whose shape a type alone does not say (a dataset, a
command, env names, a source, …), each with the JSON Schema that says the same: what models/jobspec.py's
declarations call. Re-exported there, their old home."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

from models import params as params_mod
from models import sourcetree
from models.catalog import ALIASES, MODELS, NAME, model_info, parse_dataset
from models.common import did_you_mean, notify_problem, parse_age
from models.specfields import AGE_PATTERN, INT, STR, Check, Elsewhere, Problem, seconds_of

MAX_GPUS = 16
"""Most GPUs one job (one worker) may ask for."""
GPU_MEMORY_MIN = 64 << 20
"""Smallest part of a GPU a job may ask for (`gpu_memory`)."""
GPU_MEMORY_MAX = 1 << 40
"""Largest `gpu_memory` the spec's shape takes (a live GPU's own memory bounds it: jobs.queues.check_hosts)."""
MAX_WORKERS = 64
"""Most tasks (workers) of one multi-worker job."""
INJECTED = (
    "GPUDECK_JOB_ID",
    "BUILD_ID",
    "GPUDECK_ATTEMPT",
    "GPUDECK_RUN_ID",
    "JOB_DIR",
    "TRAINING_DIR",
    "TENSORBOARD_DIR",
    "DATA_DIR",
    "SRC_DIR",
    "GPU_COUNT",
    "CUDA_VISIBLE_DEVICES",
    "TF_CONFIG",
    "GPUDECK_TASK_TYPE",
    "GPUDECK_TASK_INDEX",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "NODE_RANK",
    "NNODES",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "PYTHONUNBUFFERED",
)
"""What the work-horse sets for a command job (README: "Your own training code"); a job's `env` cannot override
them."""
RESERVED_ENV = ("PATH", "VIRTUAL_ENV", "HOME", "REDIS_URL")
RESERVED_PREFIX = "GPUDECK_"
"""Also refused in a job's `env`: what gpudeck sets otherwise (PATH and VIRTUAL_ENV from `env_name`, HOME in the
sandbox), the service's own settings (REDIS_URL, GPUDECK_*). Everything else, LD_* and PYTHONPATH included, is
the job's: it reaches only the job's own processes, inside its sandbox."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NAME_MAX = 200
"""Longest job name."""
MAX_COMMAND = 16_384
"""Longest command (characters of the string, or of all its arguments)."""
MAX_TIMEOUT_S = 30 * 24 * 3600
"""Longest `timeout` a job may ask for (30 days)."""
MAX_TOTAL_STEPS = 10**12
"""Largest `total_steps` of a command job."""
MAX_AFTER = 100
"""Most jobs one job may depend on."""
SESSION = "session"
"""The `kind` of an interactive session (a shell or a notebook on a worker, jobs.run.sessionrun)."""
SESSION_IDLE_S = 30 * 60
"""A session's default `idle`: released after this long with nobody attached and its GPUs idle."""
SESSION_MAX_S = 8 * 3600
"""A session's default `max`: ended (reason timeout) after this long whatever it does."""

# -- durations ------------------------------------------------------------------------------------------------------


def duration_of(lo: int, hi: int | None, description: str, check: Problem | None = None) -> Any:
    """Seconds or an age (30m): the check and its schema; `hi` None: the service's setting bounds it (`check`, which
    then replaces the plain bounds check)."""
    schema = {
        "description": description,
        "anyOf": [{**INT, "minimum": lo, **({"maximum": hi} if hi else {})}, {**STR, "pattern": AGE_PATTERN}],
    }
    return Check(check or (lambda v: seconds_of(v, lo, hi or MAX_TIMEOUT_S)[1]), schema)


# -- the checks of fields whose shape a type alone does not say -----------------------------------------------------

_JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def param_schema(name: str) -> dict[str, Any]:
    p = params_mod.PARAMS[name]
    if p.kind is list:
        return {
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        }
    out = {"type": _JSON_TYPES[p.kind], "description": p.help, **p.bounds(choices="enum")}
    if name == "augment":
        part = "|".join(re.escape(a) for a in params_mod.AUGMENT_PARTS)
        out["pattern"] = rf"^({part})(\+({part}))*$"
    return out


_SIDE, _CLASSES = r"([1-9][0-9]{0,2}|10[01][0-9]|102[0-4])", r"([2-9]|[1-9][0-9]{1,3}|10000)"
DATASET_PATTERN = (
    rf"^(synthetic(:{_SIDE}x{_SIDE}x[13](:{_CLASSES})?)?"  # generated: H, W in 1..1024, C 1 or 3, K classes
    rf"|{NAME}(:{NAME})?"  # an uploaded NAME[:VERSION]
    r"|/.+)$"  # a server path (under GPUDECK_DATA_ROOTS, else 403)
)
"""The forms models.catalog.parse_dataset reads."""
NOT_SYNTHETIC = {"not": {"pattern": "^synthetic(:|$)"}}
"""A command job's dataset: its DATA_DIR is a folder, never generated data."""
DATASET_DOC = "synthetic[:HxWxC[:K]], an uploaded NAME[:VERSION], or a server path under GPUDECK_DATA_ROOTS"


def check_dataset(value: Any) -> str | None:
    try:
        parse_dataset(value)
    except ValueError as exc:
        return str(exc)
    return None


def check_folder_dataset(value: Any) -> str | None:
    problem = check_dataset(value)
    if problem is None and parse_dataset(value).kind == "synthetic":
        return "a command job's dataset is an uploaded NAME[:VERSION] or a server folder (its DATA_DIR)"
    return problem


def check_model(value: Any) -> str | None:
    if isinstance(value, str) and model_info(value):
        return None
    return f"unknown model {value!r}; {did_you_mean(value, [*MODELS, *ALIASES])}known: {', '.join(MODELS)}"


def check_command(value: Any) -> str | None:
    if isinstance(value, str):
        if not value.strip():
            return "must not be empty"
        return None if len(value) <= MAX_COMMAND else f"must be at most {MAX_COMMAND} characters"
    if isinstance(value, list):
        if not value or not all(isinstance(a, str) for a in value) or not value[0]:
            return "as a list, must hold strings, the first (the program) not empty"
        return None if sum(map(len, value)) <= MAX_COMMAND else f"must be at most {MAX_COMMAND} characters"
    return f"must be a shell string or a list of arguments, got {type(value).__name__}"


def check_env(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"must be an object of NAME: value strings, got {type(value).__name__}"
    if len(value) > 200:
        return "must hold at most 200 variables"
    for name, v in value.items():
        if not ENV_NAME.fullmatch(name):
            return f"{name!r} is not a valid variable name (letters, digits and _, not starting with a digit)"
        if name in INJECTED:
            return f"{name} is set by gpudeck for every command job and cannot be overridden"
        if name in RESERVED_ENV or name.startswith(RESERVED_PREFIX):
            return f"{name} is gpudeck's to set (PATH, VIRTUAL_ENV, HOME, REDIS_URL, GPUDECK_*): not in a job's env"
        if not isinstance(v, str):
            return f"{name}: values must be strings, got {type(v).__name__} {v!r}"
        if "\x00" in v or len(v) > 32_768:
            return f"{name}: values must be at most 32768 characters, without NUL"
    return None


def check_secret_env_rule(body: dict[str, Any]) -> str | None:
    """`secret_env`: variables like `env` whose values are never shown or written to the job dir — never both."""
    both = sorted(set(body["secret_env"]) & set(body.get("env") or {}))
    return f"{both[0]} is in env too: give each variable once" if both else None


def check_source(value: Any) -> str | None:
    """A command job's source, its shape: a src:<sha256> ref or an absolute server folder (`_source_found`)."""
    if not isinstance(value, str) or not value:
        return f"must be a src:<sha256> ref from POST /api/v1/sources or an absolute server folder, got {value!r}"
    if value.startswith(sourcetree.REF_PREFIX):
        return None if sourcetree.parse_ref(value) else f"{value!r} is not a src:<sha256> ref (64 lowercase hex digits)"
    return None if value.startswith("/") else f"must be a src:<sha256> ref or an absolute server folder, got {value!r}"


def check_requirements(value: Any) -> str | None:
    """`requirements`: a relative path inside the job's source (its environment is built from it)."""
    if not isinstance(value, str) or not value or value.startswith("/") or ".." in value.split("/"):
        return f"must be a relative path inside the job's source, e.g. requirements/train.txt; got {value!r}"
    return None


def check_after(value: Any) -> str | None:
    if not isinstance(value, list) or len(value) > MAX_AFTER:
        return f"must be a list of at most {MAX_AFTER} job ids, got {value!r}"
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return f"must be job ids (positive whole numbers), got {value!r}"
    return None


def check_checkpoint_every(value: Any) -> tuple[dict[str, int] | None, str | None]:
    """`checkpoint_every`: a number of steps (200) or a duration ("90s", "5m") -> ({steps: N} | {seconds: N})."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return {"steps": value}, None
    if isinstance(value, str):
        try:
            seconds = parse_age(value)
        except ValueError:
            seconds = 0
        if seconds >= 1:
            return {"seconds": seconds}, None
    return None, f"must be a number of steps (200) or a duration (90s, 5m), got {value!r}"


def check_params(value: Any) -> dict[str, str]:
    return params_mod.validate(value)


def check_session_idle(value: Any, context: dict[str, Any]) -> str | None:
    lo, hi = context.get("idle_range", (60, SESSION_MAX_S))
    problem = seconds_of(value, lo, hi)[1]
    return problem + " (GPUDECK_SESSION_IDLE_MAX)" if problem and "between" in problem else problem


def check_session_max(value: Any, context: dict[str, Any]) -> str | None:
    top = session_top(context.get("session_max", MAX_TIMEOUT_S))
    problem = seconds_of(value, 60, top)[1]
    return problem + " (GPUDECK_SESSION_MAX: an admin may ask for more)" if problem and top < MAX_TIMEOUT_S else problem


def session_top(session_max: int) -> int:
    return max(60, min(MAX_TIMEOUT_S, session_max))


def check_notify(value: Any, context: dict[str, Any]) -> str | None:
    return notify_problem(value, context.get("webhooks"))


EXPORT_TARGETS = ("mlflow",)
"""Where a job may be exported when it ends (jobs.export)."""


def check_export(value: Any, context: dict[str, Any]) -> str | None:
    """`["mlflow"]`, where the operator set GPUDECK_MLFLOW_URI (`mlflow` in the context: whether they did)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(set(value)) != len(value):
        return f'must be a list of targets such as ["mlflow"], got {value!r}'
    bad = [v for v in value if v not in EXPORT_TARGETS]
    if bad:
        return f"{bad[0]!r} is no export target; the targets: {', '.join(EXPORT_TARGETS)}"
    if "mlflow" in value and context.get("mlflow") is False:
        return (
            "mlflow needs the operator's GPUDECK_MLFLOW_URI, which is not set; export from your machine with "
            "`gpudeck export ID --mlflow URI` instead"
        )
    return None


ENV_SCHEMA = {
    "type": "object",
    "propertyNames": {"pattern": f"^{ENV_NAME.pattern}$"},
    "additionalProperties": STR,
    "maxProperties": 200,
}
COMMAND_ELSEWHERE = Elsewhere("belongs to command jobs (give command)", session="belongs to command jobs")
CODE_ELSEWHERE = Elsewhere("belongs to command jobs (give command)")
SESSION_ELSEWHERE = Elsewhere(f"belongs to sessions (kind: {SESSION})")


MAX_BEGIN_S = 366 * 86400
"""The latest a job may ask to begin: a year from now."""


def begin_at(value: str, now: float) -> float:
    """`begin` as a Unix time: an ISO 8601 date-time with its zone (2026-12-01T02:00Z, …+01:00), or `+AGE` from `now`
    (+2h, +1h30m); ValueError saying what was wrong."""
    text = value.strip()
    if text.startswith("+"):
        try:
            return now + parse_age(text[1:])
        except ValueError:
            raise ValueError(f"must be +AGE such as +2h or +1h30m, or a date-time, got {value!r}") from None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"must be a date-time such as 2026-12-01T02:00Z, or +AGE such as +2h, got {value!r}") from None
    if when.tzinfo is None:
        raise ValueError(f"must say its time zone (2026-12-01T02:00Z, 2026-12-01T03:00+01:00), got {value!r}")
    return when.timestamp()


def check_begin(value: Any) -> str | None:
    """`begin`: when the job may start at the earliest; no later than a year from now."""
    if not isinstance(value, str):
        return f"must be a date-time such as 2026-12-01T02:00Z, or +AGE such as +2h, got {value!r}"
    now = time.time()
    try:
        at = begin_at(value, now)
    except ValueError as exc:
        return str(exc)
    if at > now + MAX_BEGIN_S:
        return f"must be within a year from now, got {value!r}"
    return None
