"""Job specs: every field validated before anything is queued; unknown fields refused by name."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs.errors import Forbidden, ReferenceForbidden, ReferenceNotFound, ValidationError
from jobs.keys import PRIORITIES
from models import params as params_mod
from models import sourcetree
from models.catalog import MODELS, model_info, parse_dataset
from models.common import NOTIFY_ENTRY, NOTIFY_EVENTS, notify_problem, parse_age  # noqa: F401 (re-exported)

MAX_GPUS = 16
"""Most GPUs one job (one worker) may ask for."""
MAX_WORKERS = 64
"""Most tasks (workers) of one multi-worker job."""

FIELDS = (
    "model",
    "dataset",
    "params",
    "gpus",
    "name",
    "tags",
    "priority",
    "timeout",
    "max_retries",
    "workers",
    "chief",
    "command",
    "source",
    "env",
    "secret_env",
    "env_name",
    "total_steps",
    "after",
    "preemptible",
    "checkpoint_every",
    "notify",
    "requirements",
    "isolated_env",
    "kind",
    "jupyter",
    "idle",
    "max",
    "expected_duration",
)

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
COMMAND_ONLY = ("source", "env", "secret_env", "env_name", "total_steps", "requirements", "isolated_env")
"""Spec fields only a command job has (besides `command` itself)."""
SESSION = "session"
"""The `kind` of an interactive session (a shell or a notebook on a worker, jobs.sessionrun)."""
SESSION_ONLY = ("jupyter", "idle", "max")
"""Spec fields only a session has."""
SESSION_IDLE_S = 30 * 60
"""A session's default `idle`: released after this long with nobody attached and its GPUs idle."""
SESSION_MAX_S = 8 * 3600
"""A session's default `max`: ended (reason timeout) after this long whatever it does."""

COMMANDS_OFF = (
    "command jobs are turned off: they run any code as the gpudeck service. Turn on tokens (GPUDECK_TOKENS=...) "
    "on the API, or on a single-user machine set GPUDECK_COMMAND_JOBS=1, and restart it"
)


SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
"""A job env variable whose name holds one of these is shown as *** wherever a client can read it."""


def masked(env: dict[str, str], names_only: bool = False) -> dict[str, str]:
    """A job's env as clients see it: the values of names that look like secrets hidden (`names_only`: every
    value, for a user who does not own the job)."""
    return {k: "***" if names_only or any(w in k.upper() for w in SECRET_WORDS) else v for k, v in env.items()}


def shown(spec: dict[str, Any], names_only: bool = False) -> dict[str, Any]:
    """A spec as a client (or a file of the job dir) may show it: `secret_env` values never, `env` values masked
    by name (`names_only`: all of them, for a user who is not the job's owner)."""
    out = dict(spec)
    if out.get("env"):
        out["env"] = masked(out["env"], names_only)
    if out.get("secret_env"):
        out["secret_env"] = dict.fromkeys(out["secret_env"], "***")
    return out


def _secret_env(body: dict[str, Any]) -> str | None:
    """`secret_env`: variables like `env` whose values are never shown or written to the job dir."""
    problem = _env(body["secret_env"])
    if problem:
        return problem
    both = sorted(set(body["secret_env"]) & set(body.get("env") or {}))
    return f"{both[0]} is in env too: give each variable once" if both else None


def is_command(spec: dict[str, Any]) -> bool:
    """Whether a spec runs the user's own code (a command, or a session's shell or notebook) rather than a model of
    the zoo: what only the users allowed to run commands may submit."""
    return spec.get("command") is not None or is_session(spec)


def is_session(spec: dict[str, Any]) -> bool:
    """Whether a spec is an interactive session (`kind: session`)."""
    return spec.get("kind") == SESSION


def _seconds(value: Any, lo: int, hi: int) -> tuple[int | None, str | None]:
    """(seconds, problem) of a duration given as seconds or as an age such as 30m or 8h."""
    if isinstance(value, str):
        try:
            value = parse_age(value)
        except ValueError as exc:
            return None, str(exc)
    problem = _int_in(value, lo, hi)
    if problem:
        return None, f"{problem} (seconds, or an age such as 30m or 8h)"
    return value, None


def command_words(spec: dict[str, Any], n: int = 3) -> str:
    """The first words of a command job's command, for tables (a model job: its model)."""
    cmd = spec.get("command")
    if is_session(spec):
        return "notebook" if spec.get("jupyter") else "shell"
    if cmd is None:
        return str(spec.get("model"))
    words = cmd.split() if isinstance(cmd, str) else list(cmd)
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


def is_multi_worker(spec: dict[str, Any]) -> bool:
    """Whether a spec runs as several tasks (gang-scheduled, see jobs.gang)."""
    return int(spec.get("workers") or 1) > 1


INT_FIELDS = ("gpus", "timeout", "max_retries", "workers", "total_steps")
"""Spec fields that hold integers."""


def whole(value: Any) -> Any:
    """An integral float as the int it is (in JSON, and JSON Schema's `integer`, 4.0 is 4); anything else as is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _integral(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with the integral floats of its integer fields and integer params as ints."""
    out = {k: whole(v) if k in INT_FIELDS else v for k, v in body.items()}
    if isinstance(out.get("params"), dict):
        ints = {k for k, p in params_mod.PARAMS.items() if p.kind is int}
        out["params"] = {k: whole(v) if k in ints else v for k, v in out["params"].items()}
    return out


def _int_in(value: Any, lo: int, hi: int) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"must be an integer, got {type(value).__name__} {value!r}"
    if not lo <= value <= hi:
        return f"must be between {lo} and {hi}, got {value}"
    return None


def check_data_path(path: str, roots: tuple[Path, ...]) -> str | None:
    """None when `path` (symlinks and .. resolved) lies under one of `roots`, else what is wrong."""
    if not roots:
        return f"server path {path!r} refused: no GPUDECK_DATA_ROOTS are configured"
    real = Path(os.path.realpath(path))
    if not any(real == root or root in real.parents for root in roots):
        return f"server path {path!r} is not under GPUDECK_DATA_ROOTS ({', '.join(map(str, roots))})"
    return None


Pin = Callable[[str, "str | None"], "tuple[str | None, str | None]"]
"""Looks up an uploaded dataset: (name, version or None) -> (`name:version`, None) or (None, problem)."""


SourceKnown = Callable[[str], bool]
"""Whether a source snapshot (its sha256) is stored."""


def _command(value: Any) -> str | None:
    if isinstance(value, str):
        if not value.strip():
            return "must not be empty"
        return None if len(value) <= MAX_COMMAND else f"must be at most {MAX_COMMAND} characters"
    if isinstance(value, list):
        if not value or not all(isinstance(a, str) for a in value) or not value[0]:
            return "as a list, must hold strings, the first (the program) not empty"
        return None if sum(map(len, value)) <= MAX_COMMAND else f"must be at most {MAX_COMMAND} characters"
    return f"must be a shell string or a list of arguments, got {type(value).__name__}"


def _env(value: Any) -> str | None:
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


def _session(
    body: dict[str, Any], idle_range: tuple[int, int], errors: dict[str, str], session_max: int = MAX_TIMEOUT_S
) -> dict[str, Any]:
    """A session's own fields (jupyter, idle, max) with their defaults; problems into `errors`."""
    if "command" in body:
        errors["command"] = (
            f"a session runs a shell (or a notebook: jupyter true), not a command; without kind {SESSION} it is a "
            "command job"
        )
    for key, allowed, problem in (
        ("timeout", (None,), "a session's limit is max (default 8h)"),
        ("workers", (None, 1), "a session runs on one worker"),
        ("total_steps", (None,), "belongs to command jobs"),
        ("after", (None, []), "a session starts when it can (it waits for no job)"),
    ):
        if key in body and body[key] not in allowed:
            errors[key] = problem
    jupyter = body.get("jupyter", False)
    if not isinstance(jupyter, bool):
        errors["jupyter"] = f"must be true or false, got {jupyter!r}"
    lo, hi = idle_range
    idle, problem = _seconds(body["idle"], lo, hi) if body.get("idle") is not None else (min(SESSION_IDLE_S, hi), None)
    if problem:
        errors["idle"] = problem + (" (GPUDECK_SESSION_IDLE_MAX)" if "between" in problem else "")
    top = max(60, min(MAX_TIMEOUT_S, session_max))
    given = body.get("max")
    most, problem = _seconds(given, 60, top) if given is not None else (min(SESSION_MAX_S, top), None)
    if problem:
        errors["max"] = problem + (" (GPUDECK_SESSION_MAX: an admin may ask for more)" if top < MAX_TIMEOUT_S else "")
    return {"jupyter": jupyter is True, "idle": idle, "max": most}


def _source(value: Any, data_roots: tuple[Path, ...], known: SourceKnown | None) -> tuple[str | None, type]:
    """(what is wrong with a command job's source or None, the error a spec whose one problem it is raises)."""
    if not isinstance(value, str) or not value:
        bad = f"must be a src:<sha256> ref from POST /api/v1/sources or an absolute server folder, got {value!r}"
        return bad, ValidationError
    if value.startswith(sourcetree.REF_PREFIX):
        sha = sourcetree.parse_ref(value)
        if sha is None:
            return f"{value!r} is not a src:<sha256> ref (64 lowercase hex digits)", ValidationError
        if known is None or not known(sha):
            return f"unknown source {value}; upload it first with POST /api/v1/sources", ReferenceNotFound
        return None, ValidationError
    if not value.startswith("/"):
        return f"must be a src:<sha256> ref or an absolute server folder, got {value!r}", ValidationError
    problem = check_data_path(value, data_roots)
    if problem:
        return problem, ReferenceForbidden
    if not os.path.isdir(value):
        return f"server folder {value!r} does not exist or is not a folder", ReferenceNotFound
    return None, ValidationError


MAX_AFTER = 100
"""Most jobs one job may depend on."""


def _requirements(value: Any, env_name: Any) -> str | None:
    """`requirements`: a relative path inside the job's source (its environment is built from it)."""
    if value is None:
        return None
    if env_name is not None:
        return "a job runs with a registered environment (env_name) or one built from its requirements, not both"
    if not isinstance(value, str) or not value or value.startswith("/") or ".." in value.split("/"):
        return f"must be a relative path inside the job's source, e.g. requirements/train.txt; got {value!r}"
    return None


def _after(value: Any) -> str | None:
    if not isinstance(value, list) or len(value) > MAX_AFTER:
        return f"must be a list of at most {MAX_AFTER} job ids, got {value!r}"
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return f"must be job ids (positive whole numbers), got {value!r}"
    return None


def _checkpoint_every(value: Any) -> tuple[dict[str, int] | None, str | None]:
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


def validate(
    body: Any,
    *,
    default_gpus: int,
    data_roots: tuple[Path, ...] = (),
    pin: Pin | None = None,
    commands_allowed: bool = False,
    source_known: SourceKnown | None = None,
    envs: tuple[str, ...] = (),
    webhooks: tuple[str, ...] | None = None,
    idle_range: tuple[int, int] = (60, SESSION_MAX_S),
    session_max: int = MAX_TIMEOUT_S,
) -> dict[str, Any]:
    """The normalized spec (defaults filled in, an uploaded dataset pinned to its version), or ValidationError
    naming every bad field; a command job where they are not allowed is Forbidden."""
    if not isinstance(body, dict):
        raise ValidationError({"body": f"must be a JSON object, got {type(body).__name__}"})
    body = _integral(body)
    session = is_session(body)
    command = "command" in body or session
    if command and not commands_allowed:
        raise Forbidden(COMMANDS_OFF, {"field": "command"})
    errors: dict[str, str] = {}
    for key in body:
        if key not in FIELDS:
            errors[key] = f"unknown field; accepted: {', '.join(FIELDS)}"
    if "kind" in body and not session:
        errors["kind"] = f"must be {SESSION!r} (a model job has model, a command job command), got {body['kind']!r}"
    session_fields = _session(body, idle_range, errors, session_max) if session else {}
    for key in SESSION_ONLY:
        if key in body and not session:
            errors[key] = f"belongs to sessions (kind: {SESSION})"
    if command and "model" in body:
        errors["model"] = "a job has either model (a zoo model) or command (your own code), not both"
    elif not command and "model" not in body:
        errors["model"] = "is required (or give command to run your own code)"
    if not command and "dataset" not in body:
        errors["dataset"] = "is required"
    for key in COMMAND_ONLY:
        if key in body and not command:
            errors[key] = "belongs to command jobs (give command)"
    if command and "params" in body:
        errors["params"] = "belongs to model jobs; pass your script's options in its command"
    model = body.get("model")
    if "model" in body and not command and (not isinstance(model, str) or model_info(model) is None):
        errors["model"] = f"unknown model {model!r}; known: {', '.join(MODELS)}"
    dataset = body.get("dataset")
    ref_errors: dict[str, Any] = {}  # field -> what a spec whose only problems are references raises
    if dataset is not None or (not command and "dataset" in body):
        try:
            ref = parse_dataset(body["dataset"])
            problem = check_data_path(ref.path, data_roots) if ref.kind == "path" else None
            if problem:
                ref_errors["dataset"] = ReferenceForbidden
            if ref.kind == "stored":
                dataset, problem = pin(ref.name, ref.version) if pin else (None, "uploaded datasets are not available")
                ref_errors["dataset"] = ReferenceNotFound if pin else ValidationError
            elif ref.kind == "synthetic" and command:
                problem = "a command job's dataset is an uploaded NAME[:VERSION] or a server folder (its DATA_DIR)"
            if problem:
                errors["dataset"] = problem
        except ValueError as exc:
            errors["dataset"] = str(exc)
    if command:
        ref_errors["env_name"] = ReferenceNotFound  # a name no environment is registered under
        source_problem, ref_errors["source"] = (
            _source(body["source"], data_roots, source_known) if body.get("source") is not None else (None, None)
        )
        for key, problem in (
            ("command", _command(body["command"]) if not session else None),
            ("env", _env(body["env"]) if body.get("env") is not None else None),
            ("secret_env", _secret_env(body) if body.get("secret_env") is not None else None),
            ("source", source_problem),
            (
                "env_name",
                None
                if body.get("env_name") is None or body["env_name"] in envs
                else f"unknown environment {body['env_name']!r}; registered (GPUDECK_ENVS): "
                f"{', '.join(envs) or 'none'}",
            ),
            (
                "total_steps",
                _int_in(body["total_steps"], 1, MAX_TOTAL_STEPS) if body.get("total_steps") is not None else None,
            ),
            ("requirements", _requirements(body.get("requirements"), body.get("env_name"))),
            (
                "isolated_env",
                None
                if body.get("isolated_env") is None or isinstance(body["isolated_env"], bool)
                else f"must be true or false, got {body['isolated_env']!r}",
            ),
        ):
            if problem:
                errors[key] = problem
    else:
        errors.update(params_mod.validate(body.get("params", {})))
    checks = {
        "gpus": lambda v: _int_in(v, 0, MAX_GPUS),
        "timeout": lambda v: _int_in(v, 1, MAX_TIMEOUT_S),
        "expected_duration": lambda v: _seconds(v, 1, MAX_TIMEOUT_S)[1],
        "max_retries": lambda v: _int_in(v, 0, 10),
        "workers": lambda v: _int_in(v, 1, MAX_WORKERS),
        "chief": lambda v: (
            f"must be true or false, got {v!r}"
            if not isinstance(v, bool)
            else "needs workers of 2 or more (the chief is task 0 of a multi-worker job)"
            if v and not (isinstance(body.get("workers"), int) and body["workers"] > 1)
            else None
        ),
        "priority": lambda v: None if v in PRIORITIES else f"must be one of {', '.join(PRIORITIES)}, got {v!r}",
        "after": _after,
        "notify": lambda v: notify_problem(v, webhooks),
        "preemptible": lambda v: None if isinstance(v, bool) else f"must be true or false, got {v!r}",
        "checkpoint_every": lambda v: (
            "belongs to model jobs (a command checkpoints itself)" if command else _checkpoint_every(v)[1]
        ),
        "name": lambda v: (
            None
            if isinstance(v, str) and 0 < len(v) <= NAME_MAX
            else f"must be a string of 1 to {NAME_MAX} characters, got {v!r}"
        ),
        "tags": lambda v: (
            None
            if isinstance(v, list) and len(v) <= 50 and all(isinstance(t, str) and 0 < len(t) <= 64 for t in v)
            else "must be a list of at most 50 strings of 1 to 64 characters"
        ),
    }
    for key, check in checks.items():
        if key in body and body[key] is not None:
            problem = check(body[key])
            if problem:
                errors[key] = problem
    if errors:
        # A well-formed spec whose only problems are references: 404 for what does not exist, 403 for a server
        # path the operator has not allowed (both kinds at once: 403); any other problem makes it a 400.
        kinds = {ref_errors.get(field) or ValidationError for field in errors}
        for kind in (ValidationError, ReferenceForbidden, ReferenceNotFound):
            if kind in kinds:
                raise kind(errors)
    common = {
        "gpus": body["gpus"] if body.get("gpus") is not None else default_gpus,
        "tags": list(body.get("tags") or []),
        "priority": body.get("priority") or "normal",
        "timeout": body.get("timeout"),
        "max_retries": body.get("max_retries") if body.get("max_retries") is not None else 1,
        "workers": body.get("workers") or 1,
        "chief": bool(body.get("chief")),
        "after": list(body.get("after") or []),
        "preemptible": body.get("preemptible") is not False,
        **({"notify": list(body["notify"])} if body.get("notify") else {}),
        **(
            {"expected_duration": _seconds(body["expected_duration"], 1, MAX_TIMEOUT_S)[0]}
            if body.get("expected_duration") is not None
            else {}
        ),
    }
    if command:  # (the user's own code: a command, or a session's shell or notebook)
        code = {
            "source": body.get("source"),
            "dataset": dataset,
            "env": dict(body.get("env") or {}),
            **({"secret_env": dict(body["secret_env"])} if body.get("secret_env") else {}),
            "env_name": body.get("env_name"),
        }
        built = {
            **({"requirements": body["requirements"]} if body.get("requirements") else {}),
            **({"isolated_env": True} if body.get("isolated_env") else {}),
            "name": body.get("name") or command_words(body)[:NAME_MAX],
        }
        if session:
            return {
                "kind": SESSION,
                **session_fields,
                **code,
                **built,
                **common,
                "timeout": session_fields["max"],
                "max_retries": 0,  # (a lost session is not started again without its user)
                "preemptible": False,  # (never preempted: somebody is typing in it)
            }
        return {"command": body["command"], **code, "total_steps": body.get("total_steps"), **built, **common}
    return {
        "model": model,
        "dataset": dataset,
        "params": dict(body.get("params") or {}),
        **({"checkpoint_every": body["checkpoint_every"]} if body.get("checkpoint_every") else {}),
        "name": body.get("name") or model,
        **common,
    }
