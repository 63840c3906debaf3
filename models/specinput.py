"""A job spec body as the service reads it, beside its declaration (models/jobspec.py): which kind a body is
(`kind_of`), the one adapter that validates any kind (`INPUT`), every field of any kind (`FIELDS`) and those only
code has (`COMMAND_ONLY`), a field's bounds, and a body's integral floats made ints (`integral`). jobs.spec
re-exports these names, where jobs/ and api/ import them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Discriminator, Tag, TypeAdapter

from models import params as params_mod
from models.jobspec import KINDS, SESSION, CommandJobSpec, ModelJobSpec, SessionSpec
from models.specfields import whole


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


def integral(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with the integral floats of its integer fields and integer params as ints."""
    ints = {name for name, kind in _FIELD_TYPES.items() if kind is int}
    out = {k: whole(v) if k in ints else v for k, v in body.items()}
    if isinstance(out.get("params"), dict):
        int_params = {k for k, p in params_mod.PARAMS.items() if p.kind is int}
        out["params"] = {k: whole(v) if k in int_params else v for k, v in out["params"].items()}
    return out
