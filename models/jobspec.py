"""The job spec, declared once: the pydantic models below are each field's type, bounds, default, the kinds of job
it belongs to and its doc (with its words for a wrong value and its command-line option). The service validates
with them (jobs/spec.py), the OpenAPI document's components are their JSON Schema (api/openapi) and `gpudeck
submit`'s options (tui/cli/base.py) and the TUI's submit form (models/specform.py) are made from them; how the
service reads a body against them is models/specinput.py. A new field is one declaration here."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from models import params as params_mod
from models import sourcetree
from models.catalog import ALIASES, MODELS
from models.specchecks import (  # noqa: F401 (re-exported: their old home)
    CODE_ELSEWHERE,
    COMMAND_ELSEWHERE,
    DATASET_DOC,
    DATASET_PATTERN,
    ENV_NAME,
    ENV_SCHEMA,
    EXPORT_TARGETS,
    GPU_MEMORY_MAX,
    GPU_MEMORY_MIN,
    INJECTED,
    MAX_AFTER,
    MAX_COMMAND,
    MAX_GPUS,
    MAX_TIMEOUT_S,
    MAX_TOTAL_STEPS,
    MAX_WORKERS,
    NAME_MAX,
    NOT_SYNTHETIC,
    RESERVED_ENV,
    RESERVED_PREFIX,
    SESSION,
    SESSION_ELSEWHERE,
    SESSION_IDLE_S,
    SESSION_MAX_S,
    check_after,
    check_begin,
    check_checkpoint_every,
    check_command,
    check_dataset,
    check_env,
    check_export,
    check_folder_dataset,
    check_model,
    check_notify,
    check_params,
    check_requirements,
    check_secret_env_rule,
    check_session_idle,
    check_session_max,
    check_source,
    duration_of,
    param_schema,
    session_top,
)
from models.specfields import (
    AGE_PATTERN,
    INT,
    SIZE_PATTERN,
    STR,
    Check,
    Cli,
    Elsewhere,
    Form,
    Required,
    Says,
    bytes_of,
    with_context,
)
from models.states import PRIORITIES

Priority = Literal["high", "normal", "low"]
assert PRIORITIES == Priority.__args__  # type: ignore[attr-defined]


# -- the job spec ---------------------------------------------------------------------------------------------------


PROJECT_NAME = r"^[a-z][a-z0-9_.-]{0,31}$"
"""A project's name (jobs.projects makes them): what a job's `project` may say."""


class Common(BaseModel):
    """What every job may say: GPUs, name, line, limits, dependencies. A null is the field's default."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True)
    kind_name: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        """A field given as null takes its declared default (`Field(1)`): the default is stated once, there."""
        if isinstance(data, dict):
            declared = {n for n, f in cls.model_fields.items() if f.default is not None and not f.is_required()}
            return {k: v for k, v in data.items() if not (v is None and k in declared)}
        return data

    gpus: Annotated[
        int | None,
        Cli("--gpus"),
        Form(7, "GPUs (empty: 1 if a GPU worker is live, else 0)", "whole"),
    ] = Field(None, ge=0, le=MAX_GPUS, description="GPUs per task (default: 1 when a GPU worker is live, else 0)")
    workers: Annotated[
        int | None,
        Cli("--workers", "tasks of a multi-worker (TF_CONFIG) job, each on its own worker"),
    ] = Field(1, ge=1, le=MAX_WORKERS, description="tasks of a multi-worker job")
    gpu_memory: Annotated[
        Annotated[
            Any,
            Check(
                lambda v: bytes_of(v, GPU_MEMORY_MIN, GPU_MEMORY_MAX)[1],
                {
                    "description": "part of one GPU: this much of its memory (10G, 512M, or bytes), capped for the "
                    "job; several such jobs share a GPU (needs gpus 1 and one worker). Default: whole GPUs",
                    "anyOf": [
                        {**INT, "minimum": GPU_MEMORY_MIN, "maximum": GPU_MEMORY_MAX},
                        {**STR, "pattern": SIZE_PATTERN},
                    ],
                },
            ),
        ]
        | None,
        Cli("--gpu-memory", "part of one GPU: this much of its memory (10G), shared with other such jobs", "SIZE"),
        Form(8, "part of one GPU, shared with other jobs: 10G (empty: whole GPUs)"),
    ] = None
    chief: Annotated[
        bool | None, Cli("--chief", "task 0 of a multi-worker job runs as a `chief` task", flag_value=True)
    ] = Field(False, description="task 0 runs as TF_CONFIG type chief (needs workers >= 2)")
    priority: Annotated[
        Priority | None,
        Says(f"must be one of {', '.join(PRIORITIES)}, got {{v!r}}"),
        Cli("--priority", "which line it waits in"),
        Form(12, reads="choice"),
    ] = Field("normal", description="which line it waits in")
    name: Annotated[
        str | None,
        Says(f"must be a string of 1 to {NAME_MAX} characters, got {{v!r}}"),
        Cli("--name", "its name (default: the model, the command's first words, or shell/notebook)"),
        Form(9, "a name (default: the model)"),
    ] = Field(None, min_length=1, max_length=NAME_MAX, description="default: the model, or the command's first words")
    tags: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=64)]] | None,
        Says("must be a list of at most 50 strings of 1 to 64 characters"),
        Cli("--tag", "a tag (repeatable)", multiple=True),
        Form(10, "tags, separated by spaces or commas: baseline cifar", "words"),
    ] = Field(default_factory=list, max_length=50)
    project: Annotated[
        str | None,
        Says("must be a project's name (gpudeck project ls), got {v!r}"),
        Cli("--project", "the project it belongs to (default: your token's default project)"),
    ] = Field(
        None,
        pattern=PROJECT_NAME,
        description="the project it belongs to and counts against (default: its owner's default project)",
    )
    timeout: Annotated[
        int | None,
        Cli("--timeout", "stop the job after this: 3600, 90m, 12h", metavar="S|AGE", reads="duration"),
        Form(11, "stop it after: 90s, 30m, 2h, 1h30m (empty: never)", "duration"),
    ] = Field(None, ge=1, le=MAX_TIMEOUT_S, description="seconds: the job fails (reason timeout) after this long")
    expected_duration: Annotated[
        Annotated[
            Any,
            duration_of(
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
    max_retries: Annotated[int | None, Cli("--max-retries", "automatic retries after worker_lost")] = Field(
        1, ge=0, le=10, description="automatic retries after worker_lost"
    )
    preemptible: Annotated[
        bool | None,
        Cli(
            "--not-preemptible",
            "never stopped to make room for a higher-priority job (admins only, where there are tokens)",
            flag_value=False,
        ),
    ] = Field(
        True,
        description="false: never stopped to make room for a higher-priority job (only an admin may say so when "
        "tokens are configured)",
    )
    idle_exempt: Annotated[
        bool | None,
        Cli(
            "--idle-exempt",
            "never warned or stopped for idle GPUs (GPUDECK_IDLE_GPU; admins only, where there are tokens)",
            flag_value=True,
        ),
    ] = Field(
        None,
        description="true: the operator's idle-GPU policy (GPUDECK_IDLE_GPU) never warns or stops it (only an admin "
        "may say so when tokens are configured)",
    )
    after: Annotated[
        Annotated[
            Any,
            Check(
                check_after,
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
    ] = Field(default_factory=list)
    begin: Annotated[
        Annotated[
            Any,
            Check(
                check_begin,
                {
                    "type": "string",
                    "description": "when it may start at the earliest: an ISO 8601 date-time with its zone "
                    "(2026-12-01T02:00Z), or +AGE from its submission (+2h); it waits out of line until then",
                },
            ),
        ]
        | None,
        Cli("--begin", "start no earlier than this: 2026-12-01T02:00Z, or +2h from now", "TIME"),
    ] = Field(None)
    notify: Annotated[
        Annotated[
            Any,
            Check(
                with_context(check_notify),
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
    export: Annotated[
        Annotated[
            Any,
            Check(
                with_context(check_export),
                {
                    "type": "array",
                    "maxItems": len(EXPORT_TARGETS),
                    "uniqueItems": True,
                    "items": {**STR, "enum": list(EXPORT_TARGETS)},
                    "description": "where the job is exported when it ends: `mlflow`, the operator's MLflow "
                    "(GPUDECK_MLFLOW_URI; a failed export never fails the job)",
                },
            ),
        ]
        | None,
        Cli(
            "--export",
            "export the job to the operator's MLflow when it ends (GPUDECK_MLFLOW_URI)",
            "mlflow",
            multiple=True,
        ),
    ] = None

    @classmethod
    def rules(cls, body: dict[str, Any], errors: dict[str, str]) -> None:
        """What one field says about another, on the body as given (problems into `errors`)."""
        share = body.get("gpu_memory")
        if share is not None and body.get("gpus") not in (None, 1):
            errors.setdefault("gpu_memory", f"is part of one GPU: it needs gpus 1, got gpus {body.get('gpus')!r}")
        elif share is not None and isinstance(body.get("workers"), int) and body["workers"] > 1:
            errors.setdefault("gpu_memory", "is part of one GPU: a multi-worker job holds whole GPUs (drop workers)")
        if body.get("chief") is True and not (isinstance(body.get("workers"), int) and body["workers"] > 1):
            errors.setdefault("chief", "needs workers of 2 or more (the chief is task 0 of a multi-worker job)")


class ModelJobSpec(Common):
    """A job that trains a model of the zoo."""

    kind_name: ClassVar[str] = "model"
    model: Annotated[
        Annotated[
            Any,
            Check(
                check_model,
                {
                    **STR,
                    "enum": [*MODELS, *sorted(ALIASES)],
                    "description": "a model name or alias (GET /api/v1/models)",
                },
            ),
        ],
        Required("is required (or give command to run your own code)"),
        Elsewhere("a job has either model (a zoo model) or command (your own code), not both"),
        Form(1, "resnet20, lenet, vgg_16 … (tab completes); empty for a command job"),
    ]
    dataset: Annotated[
        Any,
        Check(check_dataset, {**STR, "pattern": DATASET_PATTERN, "description": DATASET_DOC}),
        Form(2, "empty: synthetic; or cifar10, cifar10:1.0.0, /data/cifar-10-binary.tar.gz"),
    ]
    params: Annotated[
        Annotated[
            Any,
            Check(
                check_params,
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
        Form(3, "steps=100 batch_size=32 lr=0.1 recipe=resnet-paper", "json_pairs"),
    ] = None
    checkpoint_every: Annotated[
        Annotated[
            Any,
            Check(
                lambda v: check_checkpoint_every(v)[1],
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
                check_source,
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
        Form(5, "a command job's folder: src:<sha256> (gpudeck run uploads one) or a server folder"),
    ] = None
    dataset: (
        Annotated[
            Any,
            Check(
                check_folder_dataset,
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
            Check(
                check_env, {**ENV_SCHEMA, "description": f"variables for the command; not one of {', '.join(INJECTED)}"}
            ),
        ]
        | None,
        CODE_ELSEWHERE,
        Form(6, "a command job's variables: SEED=1 WANDB_MODE=offline", "pairs"),
    ] = None
    secret_env: Annotated[
        Annotated[
            Any,
            Check(
                check_env,
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
    caches: Annotated[
        list[Annotated[str, Field(pattern=f"^{ENV_NAME.pattern}$")]] | None,
        CODE_ELSEWHERE,
        Says('must be a list of the cache names the operator shares (GPUDECK_CACHES), e.g. ["KERAS_HOME"]'),
        Cli("--cache", "a host cache the operator shares (GPUDECK_CACHES): KERAS_HOME (repeatable)", multiple=True),
    ] = Field(
        None,
        max_length=20,
        description="host caches the operator shares (GPUDECK_CACHES) that the job's sandbox shows at their path, "
        "their variable set to it (KERAS_HOME, HF_HOME, …)",
    )
    requirements: Annotated[
        Annotated[
            Any,
            Check(
                check_requirements,
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
            problem = check_secret_env_rule(body)
            if problem:
                errors["secret_env"] = problem


class CommandJobSpec(Code):
    """A job that runs your own command (needs GPUDECK_TOKENS or GPUDECK_COMMAND_JOBS=1)."""

    kind_name: ClassVar[str] = "command"
    command: Annotated[
        Annotated[
            Any,
            Check(
                check_command,
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
        Form(4, "or your own: python train.py --data-dir $DATA_DIR (run by /bin/sh on the worker)"),
    ]
    total_steps: Annotated[
        int | None, COMMAND_ELSEWHERE, Cli("--total-steps", "the steps your script will log, for progress and ETA")
    ] = Field(None, ge=1, le=MAX_TOTAL_STEPS, description="for progress and ETA of a command job")
    classes: Annotated[
        int | None,
        COMMAND_ELSEWHERE,
        Cli("--classes", "the classes your script's accuracy is over: a result at chance gets a warning", "N"),
    ] = Field(
        None,
        ge=2,
        le=1_000_000,
        description="the number of classes the script's accuracy is over: a result whose accuracy is at chance (at "
        "most 1.5 / classes) gets a warning, as a zoo job's does",
    )
    warm_imports: Annotated[
        list[Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$", max_length=100)]] | None,
        COMMAND_ELSEWHERE,
        Says('must be a list of top-level module names, e.g. ["torch", "transformers"]'),
        Cli(
            "--warm-import",
            "a module a warm interpreter imports ahead for jobs like this one: torch (repeatable)",
            multiple=True,
        ),
    ] = Field(
        None,
        max_length=32,
        description="top-level modules that a warm interpreter of the job's environment imports ahead for the jobs "
        "after it, beside those this job imports (a `python script.py` or `python -m module` job on a worker with "
        "GPUDECK_WARM on)",
    )


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
            duration_of(
                1,
                None,
                "a session ends (reason idle) after this long with nobody attached and its GPUs under 5% (default "
                "30m, at most GPUDECK_SESSION_IDLE_MAX): seconds or an age (30m)",
                with_context(check_session_idle),
            ),
        ]
        | None,
        SESSION_ELSEWHERE,
        Cli("--idle", "released after this long unused (default 30m)", "AGE", reads="duration"),
    ] = None
    max: Annotated[
        Annotated[
            Any,
            duration_of(
                60,
                None,
                "a session ends (reason timeout) after this long (default 8h): seconds or an age (8h)",
                with_context(check_session_max),
            ),
        ]
        | None,
        SESSION_ELSEWHERE,
        Cli("--max", "ended after this long (default 8h)", "AGE", reads="duration"),
    ] = None
    # What every job may say but a session may not (or only as the default):
    timeout: Annotated[None, Says("a session's limit is max (default 8h)")] = None
    workers: Annotated[Literal[1] | None, Says("a session runs on one worker")] = 1
    after: Annotated[list[int] | None, Says("a session starts when it can (it waits for no job)")] = Field(
        default_factory=list, max_length=0
    )


KINDS: dict[str, type[Common]] = {"model": ModelJobSpec, "command": CommandJobSpec, SESSION: SessionSpec}
"""Each kind of job by the name its tag has."""
