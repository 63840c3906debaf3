"""Job specs as the service takes them: the shape checked against the models of models/jobspec.py (every bad field
named at once, in gpudeck's words), then what only the service knows — a dataset never uploaded, a source never
stored, an unregistered environment (404), a server path outside GPUDECK_DATA_ROOTS (403) — for a spec whose shape
is right; then the spec a job keeps, every default filled in."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic

from jobs.errors import Forbidden, ReferenceForbidden, ReferenceNotFound, ValidationError
from jobs.record import Kept
from models import sourcetree
from models.catalog import parse_dataset
from models.common import did_you_mean, iso
from models.jobspec import (  # noqa: F401 (the names jobs/ and api/ import them by)
    ENV_NAME,
    GPU_MEMORY_MAX,
    GPU_MEMORY_MIN,
    INJECTED,
    KINDS,
    MAX_AFTER,
    MAX_GPUS,
    MAX_TIMEOUT_S,
    MAX_WORKERS,
    NAME_MAX,
    NOT_SYNTHETIC,
    SESSION,
    SESSION_IDLE_S,
    SESSION_MAX_S,
    Code,
    CommandJobSpec,
    Common,
    ModelJobSpec,
    SessionSpec,
    param_schema,
    session_top,
)
from models.specchecks import begin_at
from models.specfields import Elsewhere, Required, Says, bytes_of, marker, seconds_of
from models.specinput import (  # noqa: F401 (the names jobs/ and api/ import them by)
    COMMAND_ONLY,
    FIELDS,
    INPUT,
    bounds_of,
    integral,
    kind_of,
)

COMMANDS_OFF = (
    "command jobs are turned off: they run any code as the gpudeck service. Turn on tokens (GPUDECK_TOKENS=...) "
    "on the API, or on a single-user machine set GPUDECK_COMMAND_JOBS=1, and restart it"
)

SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
"""A job env variable whose name holds one of these is shown as *** wherever a client can read it."""


def _problem(cls: type[Common], body: dict[str, Any], error: Any) -> dict[str, str]:
    """One pydantic error in gpudeck's words: {field path: what is wrong}."""
    loc = error["loc"][1:] if error["loc"] and error["loc"][0] in KINDS else error["loc"]
    if not loc:
        return {"body": error["msg"]}
    field, kind, ctx = str(loc[0]), error["type"], error.get("ctx") or {}
    value = body.get(field)
    if kind == "gpudeck_many":
        return dict(ctx["fields"])
    if kind == "gpudeck":
        return {field: ctx["problem"]}
    if kind == "extra_forbidden":
        away = next((m for other in KINDS.values() if other is not cls if (m := marker(other, field, Elsewhere))), None)
        text = (
            away.to(cls.kind_name).format(v=value)
            if away
            else f"unknown field; {did_you_mean(field, FIELDS)}accepted: {', '.join(FIELDS)}"
        )
        return {field: text}
    if kind == "missing":
        required = marker(cls, field, Required)
        return {field: required.text if required else "is required"}
    says = marker(cls, field, Says)
    if says:
        return {field: says.text.format(v=value)}
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return {field: f"must be an integer, got {type(value).__name__} {value!r}"}
    if kind == "bool_type":
        return {field: f"must be true or false, got {value!r}"}
    if kind in ("greater_than_equal", "less_than_equal"):
        lo, hi = bounds_of(cls, field)
        return {field: f"must be between {lo} and {hi}, got {value}"}
    if kind == "string_pattern_mismatch":
        return {field: f"must match {ctx['pattern']}, got {value!r}"}
    if kind == "string_type":
        return {field: f"must be a string, got {type(value).__name__} {value!r}"}
    return {field: error["msg"]}


def check_shape(body: Any, context: dict[str, Any] | None = None) -> Common:
    """The typed spec of `body` as given (no defaults filled in), or ValidationError naming every bad field."""
    if not isinstance(body, dict):
        raise ValidationError({"body": f"must be a JSON object, got {type(body).__name__}"})
    body = integral(body)
    cls = KINDS[kind_of(body)]
    errors: dict[str, str] = {}
    typed = None
    try:
        typed = INPUT.validate_python(body, context=context or {})
    except pydantic.ValidationError as exc:
        for error in exc.errors():
            for field, problem in _problem(cls, body, error).items():
                errors.setdefault(field, problem)
    cls.rules(body, errors)
    if errors or typed is None:
        raise ValidationError(errors)
    return typed


# -- what only the service knows ---------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Service:
    """What the second step checks a well-shaped spec's references against."""

    data_roots: tuple[Path, ...] = ()
    pin: Pin | None = None
    source_known: SourceKnown | None = None
    envs: tuple[str, ...] = ()
    caches: tuple[str, ...] = ()

    def problems(self, typed: Common) -> Iterator[tuple[str, type[ValidationError], str]]:
        """(field, the error it makes, what is wrong) for each reference that does not hold."""
        dataset = getattr(typed, "dataset", None)
        if dataset is not None:
            ref = parse_dataset(dataset)
            if ref.kind == "path" and (problem := check_data_path(ref.path, self.data_roots)):
                yield "dataset", ReferenceForbidden, problem
            elif ref.kind == "stored":
                if self.pin is None:
                    yield "dataset", ValidationError, "uploaded datasets are not available"
                elif (problem := self.pin(ref.name, ref.version)[1]) is not None:
                    yield "dataset", ReferenceNotFound, problem
        source = getattr(typed, "source", None)
        if source is not None:
            if source.startswith(sourcetree.REF_PREFIX):
                sha = sourcetree.parse_ref(source)
                if self.source_known is None or sha is None or not self.source_known(sha):
                    yield (
                        "source",
                        ReferenceNotFound,
                        f"unknown source {source}; upload it first with POST /api/v1/sources",
                    )
            elif problem := check_data_path(source, self.data_roots):
                yield "source", ReferenceForbidden, problem
            elif not os.path.isdir(source):
                yield "source", ReferenceNotFound, f"server folder {source!r} does not exist or is not a folder"
        unknown = [c for c in getattr(typed, "caches", None) or [] if c not in self.caches]
        if unknown:
            yield (
                "caches",
                ReferenceNotFound,
                f"unknown cache {', '.join(map(repr, unknown))}; shared (GPUDECK_CACHES): "
                f"{', '.join(self.caches) or 'none'}",
            )
        env_name = getattr(typed, "env_name", None)
        if env_name is not None and env_name not in self.envs:
            yield (
                "env_name",
                ReferenceNotFound,
                f"unknown environment {env_name!r}; registered (GPUDECK_ENVS): {', '.join(self.envs) or 'none'}",
            )

    def check(self, typed: Common) -> None:
        """Raise for the references that do not hold: 404 for what does not exist, 403 for a server path the
        operator has not allowed (both kinds at once: 403; a problem that is no reference's: 400)."""
        found = list(self.problems(typed))
        if found:
            errors = {field: problem for field, _, problem in found}
            kinds = {kind for _, kind, _ in found}
            for kind in (ValidationError, ReferenceForbidden, ReferenceNotFound):
                if kind in kinds:
                    raise kind(errors)

    def pinned(self, dataset: str | None) -> str | None:
        """An uploaded dataset as `name:version` (the version it has now when none was given)."""
        if dataset is None or self.pin is None:
            return dataset
        ref = parse_dataset(dataset)
        return self.pin(ref.name, ref.version)[0] if ref.kind == "stored" else dataset


# -- the spec a job keeps ------------------------------------------------------------------------------------------


def validate(
    body: Any,
    *,
    default_gpus: int,
    data_roots: tuple[Path, ...] = (),
    pin: Pin | None = None,
    commands_allowed: bool = False,
    source_known: SourceKnown | None = None,
    envs: tuple[str, ...] = (),
    caches: tuple[str, ...] = (),
    webhooks: tuple[str, ...] | None = None,
    idle_range: tuple[int, int] = (60, SESSION_MAX_S),
    session_max: int = MAX_TIMEOUT_S,
    mlflow: bool | None = None,
) -> dict[str, Any]:
    """The normalized spec (defaults filled in, an uploaded dataset pinned to its version): the shape first
    (ValidationError naming every bad field), then its references (Service.check); a command job where they are not
    allowed is Forbidden before either."""
    if isinstance(body, dict) and is_command(body) and not commands_allowed:
        raise Forbidden(COMMANDS_OFF, {"field": "command"})
    context = {"webhooks": webhooks, "idle_range": idle_range, "session_max": session_max, "mlflow": mlflow}
    typed = check_shape(body, context)
    service = Service(data_roots, pin, source_known, envs, caches)
    service.check(typed)
    return normalized(typed, default_gpus, service, idle_range, session_max)


def normalized(
    typed: Common,
    default_gpus: int,
    service: Service = Service(),
    idle_range: tuple[int, int] = (60, SESSION_MAX_S),
    session_max: int = MAX_TIMEOUT_S,
) -> dict[str, Any]:
    """The spec a job keeps: every default filled in (what the engine reads); a declared field with no rule of its
    own here is kept as given, when given."""
    out = _normalized(typed, default_gpus, service, idle_range, session_max)
    for name, value in typed:
        if value is not None and value is not False and value != {} and value != []:
            out.setdefault(name, value)
    return out


def _normalized(
    typed: Common, default_gpus: int, service: Service, idle_range: tuple[int, int], session_max: int
) -> dict[str, Any]:
    """The fields whose kept form is not as given."""
    common = {
        "gpus": typed.gpus if typed.gpus is not None else (1 if typed.gpu_memory is not None else default_gpus),
        **(
            {"gpu_memory": bytes_of(typed.gpu_memory, GPU_MEMORY_MIN, GPU_MEMORY_MAX)[0]}
            if typed.gpu_memory is not None
            else {}
        ),
        "tags": list(typed.tags or ()),  # (its declared default: an empty list)
        "priority": typed.priority,
        "timeout": typed.timeout,
        "max_retries": typed.max_retries,
        "workers": typed.workers,
        "chief": typed.chief,
        "after": list(typed.after or ()),
        "preemptible": typed.preemptible,
        **({"notify": list(typed.notify)} if typed.notify else {}),
        **({"export": list(typed.export)} if typed.export else {}),
        **(
            {"expected_duration": seconds_of(typed.expected_duration, 1, MAX_TIMEOUT_S)[0]}
            if typed.expected_duration is not None
            else {}
        ),
        **({"begin": iso(begin_at(typed.begin, time.time()))} if typed.begin else {}),  # (+2h: from now)
    }
    if isinstance(typed, ModelJobSpec):
        return {
            "model": typed.model,
            "dataset": service.pinned(typed.dataset),
            "params": dict(typed.params or {}),
            **({"checkpoint_every": typed.checkpoint_every} if typed.checkpoint_every else {}),
            "name": typed.name or typed.model,
            **common,
        }
    assert isinstance(typed, Code)
    code = {
        "source": typed.source,
        "dataset": service.pinned(typed.dataset),
        "env": dict(typed.env or {}),
        **({"secret_env": dict(typed.secret_env)} if typed.secret_env else {}),
        "env_name": typed.env_name,
        **({"caches": list(dict.fromkeys(typed.caches))} if typed.caches else {}),
        **({"requirements": typed.requirements} if typed.requirements else {}),
        **({"isolated_env": True} if typed.isolated_env else {}),
    }
    if isinstance(typed, SessionSpec):
        lo, hi = idle_range
        idle = seconds_of(typed.idle, lo, hi)[0] if typed.idle is not None else min(SESSION_IDLE_S, hi)
        top = session_top(session_max)
        most = seconds_of(typed.max, 60, top)[0] if typed.max is not None else min(SESSION_MAX_S, top)
        return {
            "kind": SESSION,
            "jupyter": typed.jupyter is True,
            "idle": idle,
            "max": most,
            **code,
            "name": typed.name or ("notebook" if typed.jupyter else "shell"),
            **common,
            "timeout": most,
            "max_retries": 0,  # (a lost session is not started again without its user)
            "preemptible": False,  # (never preempted: somebody is typing in it)
        }
    assert isinstance(typed, CommandJobSpec)
    return {
        "command": typed.command,
        **code,
        "total_steps": typed.total_steps,
        **({"warm_imports": list(dict.fromkeys(typed.warm_imports))} if typed.warm_imports else {}),
        "name": typed.name or command_words({"command": typed.command})[:NAME_MAX],
        **common,
    }


# -- reading a spec ---------------------------------------------------------------------------------------------


def masked(env: Mapping[str, str], names_only: bool = False) -> dict[str, str]:
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


def is_command(spec: dict[str, Any]) -> bool:
    """Whether a spec runs the user's own code (a command, or a session's shell or notebook) rather than a model of
    the zoo: what only the users allowed to run commands may submit (a body's `command`, even null, counts)."""
    return "command" in spec or Kept(spec).runs_code


def is_session(spec: dict[str, Any]) -> bool:
    """Whether a spec is an interactive session (`kind: session`)."""
    return Kept(spec).is_session


def command_words(spec: dict[str, Any], n: int = 3) -> str:
    """The first words of a command job's command, for tables (a model job: its model)."""
    cmd = spec.get("command")
    if is_session(spec):
        return "notebook" if spec.get("jupyter") else "shell"
    if cmd is None:
        return str(spec.get("model"))
    words = cmd.split() if isinstance(cmd, str) else list(cmd)
    return " ".join(words[:n]) + (" …" if len(words) > n else "")
