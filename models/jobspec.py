"""The job spec, declared once: the pydantic models below are each field's type, bounds, default, the kinds of job
it belongs to and its doc (with its words for a wrong value and its command-line option). The service validates
with them (jobs/spec.py), the OpenAPI document's components are their JSON Schema (api/openapi) and `gpudeck
submit`'s options are made from them (tui/cli/base.py). A new field is one declaration here."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter

from models import params as params_mod
from models import sourcetree
from models.catalog import ALIASES, MODELS, NAME, model_info, parse_dataset
from models.common import did_you_mean, notify_problem, parse_age
from models.specfields import (
    AGE_PATTERN,
    INT,
    STR,
    Check,
    Cli,
    Elsewhere,
    Problem,
    Required,
    Says,
    seconds_of,
    whole,
    with_context,
)
from models.states import PRIORITIES

MAX_GPUS = 16
"""Most GPUs one job (one worker) may ask for."""
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


def _duration(lo: int, hi: int | None, description: str, check: Problem | None = None) -> Any:
    """Seconds or an age (30m): the check and its schema; `hi` None: the service's setting bounds it (`check`, which
    then replaces the plain bounds check)."""
    schema = {
        "description": description,
        "anyOf": [{**INT, "minimum": lo, **({"maximum": hi} if hi else {})}, {**STR, "pattern": AGE_PATTERN}],
    }
    return Check(check or (lambda v: seconds_of(v, lo, hi or MAX_TIMEOUT_S)[1]), schema)


def integral(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with the integral floats of its integer fields and integer params as ints."""
    ints = {name for name, kind in _FIELD_TYPES.items() if kind is int}
    out = {k: whole(v) if k in ints else v for k, v in body.items()}
    if isinstance(out.get("params"), dict):
        int_params = {k for k, p in params_mod.PARAMS.items() if p.kind is int}
        out["params"] = {k: whole(v) if k in int_params else v for k, v in out["params"].items()}
    return out


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


def _dataset(value: Any) -> str | None:
    try:
        parse_dataset(value)
    except ValueError as exc:
        return str(exc)
    return None


def _folder_dataset(value: Any) -> str | None:
    problem = _dataset(value)
    if problem is None and parse_dataset(value).kind == "synthetic":
        return "a command job's dataset is an uploaded NAME[:VERSION] or a server folder (its DATA_DIR)"
    return problem


def _model(value: Any) -> str | None:
    if isinstance(value, str) and model_info(value):
        return None
    return f"unknown model {value!r}; {did_you_mean(value, [*MODELS, *ALIASES])}known: {', '.join(MODELS)}"


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


def _secret_env_rule(body: dict[str, Any]) -> str | None:
    """`secret_env`: variables like `env` whose values are never shown or written to the job dir — never both."""
    both = sorted(set(body["secret_env"]) & set(body.get("env") or {}))
    return f"{both[0]} is in env too: give each variable once" if both else None


def _source(value: Any) -> str | None:
    """A command job's source, its shape: a src:<sha256> ref or an absolute server folder (`_source_found`)."""
    if not isinstance(value, str) or not value:
        return f"must be a src:<sha256> ref from POST /api/v1/sources or an absolute server folder, got {value!r}"
    if value.startswith(sourcetree.REF_PREFIX):
        return None if sourcetree.parse_ref(value) else f"{value!r} is not a src:<sha256> ref (64 lowercase hex digits)"
    return None if value.startswith("/") else f"must be a src:<sha256> ref or an absolute server folder, got {value!r}"


def _requirements(value: Any) -> str | None:
    """`requirements`: a relative path inside the job's source (its environment is built from it)."""
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


def _params(value: Any) -> dict[str, str]:
    return params_mod.validate(value)


def _session_idle(value: Any, context: dict[str, Any]) -> str | None:
    lo, hi = context.get("idle_range", (60, SESSION_MAX_S))
    problem = seconds_of(value, lo, hi)[1]
    return problem + " (GPUDECK_SESSION_IDLE_MAX)" if problem and "between" in problem else problem


def _session_max(value: Any, context: dict[str, Any]) -> str | None:
    top = session_top(context.get("session_max", MAX_TIMEOUT_S))
    problem = seconds_of(value, 60, top)[1]
    return problem + " (GPUDECK_SESSION_MAX: an admin may ask for more)" if problem and top < MAX_TIMEOUT_S else problem


def session_top(session_max: int) -> int:
    return max(60, min(MAX_TIMEOUT_S, session_max))


def _notify(value: Any, context: dict[str, Any]) -> str | None:
    return notify_problem(value, context.get("webhooks"))


ENV_SCHEMA = {
    "type": "object",
    "propertyNames": {"pattern": f"^{ENV_NAME.pattern}$"},
    "additionalProperties": STR,
    "maxProperties": 200,
}
COMMAND_ELSEWHERE = Elsewhere("belongs to command jobs (give command)", session="belongs to command jobs")
CODE_ELSEWHERE = Elsewhere("belongs to command jobs (give command)")
SESSION_ELSEWHERE = Elsewhere(f"belongs to sessions (kind: {SESSION})")
Priority = Literal["high", "normal", "low"]
assert PRIORITIES == Priority.__args__  # type: ignore[attr-defined]


# -- the job spec ---------------------------------------------------------------------------------------------------


class Common(BaseModel):
    """What every job may say: GPUs, name, line, limits, dependencies. A null is the field's default."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    kind_name: ClassVar[str] = ""

    gpus: Annotated[
        int | None,
        Cli("--gpus"),
    ] = Field(None, ge=0, le=MAX_GPUS, description="GPUs per task (default: 1 when a GPU worker is live, else 0)")
    workers: Annotated[
        int | None,
        Cli("--workers", "tasks of a multi-worker (TF_CONFIG) job, each on its own worker"),
    ] = Field(None, ge=1, le=MAX_WORKERS, description="tasks of a multi-worker job (default 1)")
    chief: Annotated[
        bool | None, Cli("--chief", "task 0 of a multi-worker job runs as a `chief` task", flag_value=True)
    ] = Field(None, description="task 0 runs as TF_CONFIG type chief (needs workers >= 2)")
    priority: Annotated[
        Priority | None,
        Says(f"must be one of {', '.join(PRIORITIES)}, got {{v!r}}"),
        Cli("--priority", "which line it waits in (default normal)"),
    ] = Field(None, description="which line it waits in (default normal)")
    name: Annotated[
        str | None,
        Says(f"must be a string of 1 to {NAME_MAX} characters, got {{v!r}}"),
        Cli("--name", "its name (default: the model, the command's first words, or shell/notebook)"),
    ] = Field(None, min_length=1, max_length=NAME_MAX, description="default: the model, or the command's first words")
    tags: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=64)]] | None,
        Says("must be a list of at most 50 strings of 1 to 64 characters"),
        Cli("--tag", "a tag (repeatable)", multiple=True),
    ] = Field(None, max_length=50)
    timeout: Annotated[
        int | None,
        Cli("--timeout", "stop the job after this: 3600, 90m, 12h", metavar="S|AGE", reads="duration"),
    ] = Field(None, ge=1, le=MAX_TIMEOUT_S, description="seconds: the job fails (reason timeout) after this long")
    expected_duration: Annotated[
        Annotated[
            Any,
            _duration(
                1,
                MAX_TIMEOUT_S,
                "how long the job is expected to run, seconds or an age (20m): the scheduler lets it start early in "
                "a gap another job's reservation leaves when it ends in time (backfill); it is never stopped for "
                "running longer (timeout does that)",
            ),
        ]
        | None,
        Cli(
            "--expected",
            "how long it should run (20m): lets it start early in a gap (backfill); never stops it",
            metavar="S|AGE",
            reads="duration",
        ),
    ] = None
    max_retries: Annotated[int | None, Cli("--max-retries", "automatic retries after worker_lost (1)")] = Field(
        None, ge=0, le=10, description="automatic retries after worker_lost (default 1)"
    )
    preemptible: Annotated[
        bool | None,
        Cli(
            "--not-preemptible",
            "never stopped to make room for a higher-priority job (admins only, where there are tokens)",
            flag_value=False,
        ),
    ] = Field(
        None,
        description="false: never stopped to make room for a higher-priority job (only an admin may say so when "
        "tokens are configured); default true",
    )
    after: Annotated[
        Annotated[
            Any,
            Check(
                _after,
                {
                    "type": "array",
                    "maxItems": MAX_AFTER,
                    "items": {**INT, "minimum": 1},
                    "description": "job ids this job waits for: it starts once all succeeded, and is canceled "
                    "(dependency_failed) when one fails or is canceled",
                },
            ),
        ]
        | None,
        Cli(
            "--after",
            "start only once job ID has succeeded (repeatable); canceled if it fails",
            "ID",
            multiple=True,
            reads="natural",
        ),
    ] = None
    notify: Annotated[
        Annotated[
            Any,
            Check(
                with_context(_notify),
                {
                    "type": "array",
                    "maxItems": 10,
                    "items": {**STR, "pattern": "^[A-Za-z0-9_-]{1,40}(:[a-z_]+(,[a-z_]+)*)?$"},
                    "description": "the operator's endpoints (GPUDECK_WEBHOOKS) told when the job ends: `lab`, or "
                    "`lab:failed,canceled` (events: succeeded, failed, canceled, stopped_early, any)",
                },
            ),
        ]
        | None,
        Cli(
            "--notify",
            "tell the operator's endpoint NAME when the job ends (repeatable; lab:failed,canceled; lab:any)",
            "NAME[:EVENTS]",
            multiple=True,
        ),
    ] = None

    @classmethod
    def rules(cls, body: dict[str, Any], errors: dict[str, str]) -> None:
        """What one field says about another, on the body as given (problems into `errors`)."""
        if body.get("chief") is True and not (isinstance(body.get("workers"), int) and body["workers"] > 1):
            errors.setdefault("chief", "needs workers of 2 or more (the chief is task 0 of a multi-worker job)")


class ModelJobSpec(Common):
    """A job that trains a model of the zoo."""

    kind_name: ClassVar[str] = "model"
    model: Annotated[
        Annotated[
            Any,
            Check(
                _model,
                {
                    **STR,
                    "enum": [*MODELS, *sorted(ALIASES)],
                    "description": "a model name or alias (GET /api/v1/models)",
                },
            ),
        ],
        Required("is required (or give command to run your own code)"),
        Elsewhere("a job has either model (a zoo model) or command (your own code), not both"),
    ]
    dataset: Annotated[Any, Check(_dataset, {**STR, "pattern": DATASET_PATTERN, "description": DATASET_DOC})]
    params: Annotated[
        Annotated[
            Any,
            Check(
                _params,
                {
                    "type": "object",
                    "properties": {k: param_schema(k) for k in params_mod.PARAMS},
                    "additionalProperties": False,
                    "not": {"required": ["epochs", "steps"]},  # one or the other
                },
            ),
        ]
        | None,
        Elsewhere("belongs to model jobs; pass your script's options in its command"),
    ] = None
    checkpoint_every: Annotated[
        Annotated[
            Any,
            Check(
                lambda v: _checkpoint_every(v)[1],
                {
                    "description": "a model job also checkpoints every N steps, or every duration (90s, 5m): a "
                    "preempted job loses at most that much",
                    "anyOf": [{**INT, "minimum": 1}, {**STR, "pattern": AGE_PATTERN}],
                },
            ),
        ]
        | None,
        Elsewhere("belongs to model jobs (a command checkpoints itself)"),
        Cli(
            "--checkpoint-every",
            "also checkpoint every N steps or every AGE (90s, 5m): a preempted job loses at most that much",
            "N|AGE",
            reads="count_or_age",
        ),
    ] = None


class Code(Common):
    """What a job running the user's own code has (a command job, a session)."""

    source: Annotated[
        Annotated[
            Any,
            Check(
                _source,
                {
                    **STR,
                    "pattern": f"^({sourcetree.REF.pattern}|/.+)$",
                    "description": "src:<sha256> from POST /api/v1/sources, or a server folder under "
                    "GPUDECK_DATA_ROOTS (snapshotted at submission)",
                },
            ),
        ]
        | None,
        CODE_ELSEWHERE,
    ] = None
    dataset: (
        Annotated[
            Any,
            Check(
                _folder_dataset,
                {
                    **STR,
                    "pattern": DATASET_PATTERN,
                    **NOT_SYNTHETIC,
                    "description": "its DATA_DIR: an uploaded NAME[:VERSION] or a server folder (never synthetic)",
                },
            ),
        ]
        | None
    ) = None
    env: Annotated[
        Annotated[
            Any,
            Check(_env, {**ENV_SCHEMA, "description": f"variables for the command; not one of {', '.join(INJECTED)}"}),
        ]
        | None,
        CODE_ELSEWHERE,
    ] = None
    secret_env: Annotated[
        Annotated[
            Any,
            Check(
                _env,
                {
                    **ENV_SCHEMA,
                    "description": "variables like env whose values are never shown (names only, values ***) nor "
                    "written to the job dir",
                },
            ),
        ]
        | None,
        CODE_ELSEWHERE,
    ] = None
    env_name: Annotated[
        str | None, CODE_ELSEWHERE, Cli("--env-name", "a Python environment the operator registered (GPUDECK_ENVS)")
    ] = Field(None, description="an environment registered with GPUDECK_ENVS")
    requirements: Annotated[
        Annotated[
            Any,
            Check(
                _requirements,
                {
                    **STR,
                    "description": "a requirements file in the source to build the job's environment from (default: "
                    "the source's uv.lock with pyproject.toml, else its requirements.txt)",
                },
            ),
        ]
        | None,
        CODE_ELSEWHERE,
        Cli("--requirements", "build the environment from this file of the source", "PATH"),
    ] = None
    isolated_env: Annotated[
        bool | None,
        CODE_ELSEWHERE,
        Cli("--isolated-env", "its built environment sees none of the worker's packages", flag_value=True),
    ] = Field(None, description="its built environment does not see the worker's packages")

    @classmethod
    def rules(cls, body: dict[str, Any], errors: dict[str, str]) -> None:
        super().rules(body, errors)
        if body.get("requirements") is not None and body.get("env_name") is not None:
            errors["requirements"] = (
                "a job runs with a registered environment (env_name) or one built from its requirements, not both"
            )
        if (
            isinstance(body.get("secret_env"), dict)
            and isinstance(body.get("env"), dict)
            and "secret_env" not in errors
        ):
            problem = _secret_env_rule(body)
            if problem:
                errors["secret_env"] = problem


class CommandJobSpec(Code):
    """A job that runs your own command (needs GPUDECK_TOKENS or GPUDECK_COMMAND_JOBS=1)."""

    kind_name: ClassVar[str] = "command"
    command: Annotated[
        Annotated[
            Any,
            Check(
                _command,
                {
                    "description": "your own code instead of a model: a shell string (/bin/sh -c) or a list of "
                    "arguments; needs GPUDECK_TOKENS or GPUDECK_COMMAND_JOBS=1 on the API (else 403)",
                    "anyOf": [
                        {**STR, "minLength": 1, "maxLength": MAX_COMMAND},
                        {"type": "array", "minItems": 1, "prefixItems": [{**STR, "minLength": 1}], "items": STR},
                    ],
                },
            ),
        ],
        Elsewhere(
            f"a session runs a shell (or a notebook: jupyter true), not a command; without kind {SESSION} it is a "
            "command job"
        ),
    ]
    total_steps: Annotated[
        int | None, COMMAND_ELSEWHERE, Cli("--total-steps", "the steps your script will log, for progress and ETA")
    ] = Field(None, ge=1, le=MAX_TOTAL_STEPS, description="for progress and ETA of a command job")


class SessionSpec(Code):
    """An interactive session: a shell (gpudeck session attach) or a notebook (jupyter) on a worker's GPUs,
    allowed where command jobs are."""

    kind_name: ClassVar[str] = SESSION
    kind: Annotated[
        Literal["session"],
        Elsewhere(f"must be {SESSION!r} (a model job has model, a command job command), got {{v!r}}"),
    ] = Field(
        description="session: an interactive shell (or a notebook: jupyter) on a worker, released when idle",
    )
    jupyter: Annotated[
        bool | None,
        SESSION_ELSEWHERE,
        Cli("--jupyter", "run Jupyter (Lab, else Server) instead of a shell", flag_value=True),
    ] = Field(None, description="a session runs Jupyter (Lab, else Server) instead of a shell")
    idle: Annotated[
        Annotated[
            Any,
            _duration(
                1,
                None,
                "a session ends (reason idle) after this long with nobody attached and its GPUs under 5% (default "
                "30m, at most GPUDECK_SESSION_IDLE_MAX): seconds or an age (30m)",
                with_context(_session_idle),
            ),
        ]
        | None,
        SESSION_ELSEWHERE,
        Cli("--idle", "released after this long unused (default 30m)", "AGE", reads="duration"),
    ] = None
    max: Annotated[
        Annotated[
            Any,
            _duration(
                60,
                None,
                "a session ends (reason timeout) after this long (default 8h): seconds or an age (8h)",
                with_context(_session_max),
            ),
        ]
        | None,
        SESSION_ELSEWHERE,
        Cli("--max", "ended after this long (default 8h)", "AGE", reads="duration"),
    ] = None
    # What every job may say but a session may not (or only as the default):
    timeout: Annotated[None, Says("a session's limit is max (default 8h)")] = None
    workers: Annotated[Literal[1] | None, Says("a session runs on one worker")] = None
    after: Annotated[list[int] | None, Says("a session starts when it can (it waits for no job)")] = Field(
        None, max_length=0
    )


KINDS: dict[str, type[Common]] = {"model": ModelJobSpec, "command": CommandJobSpec, SESSION: SessionSpec}
"""Each kind of job by the name its tag has."""


def kind_of(body: Any) -> str:
    """Which kind of job a body is: a session (kind: session), a command job (command), else a model job."""
    if isinstance(body, dict):
        if body.get("kind") == SESSION:
            return SESSION
        if "command" in body:
            return "command"
    return "model"


JobSpecInput = Annotated[
    Annotated[ModelJobSpec, Tag("model")]
    | Annotated[CommandJobSpec, Tag("command")]
    | Annotated[SessionSpec, Tag(SESSION)],
    Discriminator(kind_of),
]
"""What a client submits: one of the kinds, told apart by kind_of."""
INPUT = TypeAdapter(JobSpecInput)


def _fields() -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for cls in (ModelJobSpec, CommandJobSpec, SessionSpec):
        seen.update(dict.fromkeys(cls.model_fields))
    return tuple(seen)


FIELDS = _fields()
"""Every field a job spec may have, of any kind."""
COMMAND_ONLY = tuple(f for f in CommandJobSpec.model_fields if f not in ModelJobSpec.model_fields and f != "command")
"""Spec fields only a command job (or a session: its code) has, besides `command` itself."""
_FIELD_TYPES = {
    name: int
    for cls in KINDS.values()
    for name, f in cls.model_fields.items()
    if f.annotation is int or int in getattr(f.annotation, "__args__", ())
}


def bounds_of(cls: type[BaseModel], field: str) -> tuple[Any, Any]:
    info = cls.model_fields[field]
    lo = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
    hi = next((m.le for m in info.metadata if hasattr(m, "le")), None)
    return lo, hi
