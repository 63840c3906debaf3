"""How a field of the job spec (models/jobspec.py) is declared: the markers its annotation carries (its words for
a wrong value, for a kind it does not belong to, for its absence; its command-line option; a check written out with
the JSON Schema that says the same), and the small checks several fields share (durations, integers)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic
from pydantic import BaseModel
from pydantic_core import PydanticCustomError, core_schema

from models.common import parse_age, parse_size, size_text  # noqa: F401 (size_text: the spec's words)

# -- how a field is declared -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Says:
    """A field's own words for a value of the wrong shape (instead of pydantic's): `{v!r}` is the value given."""

    text: str


@dataclass(frozen=True)
class Required:
    """What a required field's absence is told (default: "is required")."""

    text: str


@dataclass(frozen=True)
class Elsewhere:
    """What a field given to a kind of job it does not belong to is told: `text`, or the kind's own words."""

    text: str
    model: str | None = None
    command: str | None = None
    session: str | None = None

    def to(self, kind: str) -> str:
        return getattr(self, kind) or self.text


@dataclass(frozen=True)
class Cli:
    """The field mirrored by an option of `gpudeck submit`/`run`/`session` (tui/cli/base.py makes it): its flag,
    help (default: the field's description) and how it reads — `multiple`: repeatable, a list; `flag_value`: a
    switch that sets the field to it; `reads`: "duration" (3600, 90m), "natural" (a whole number), "count_or_age"
    (200 or 90s); else as the field's type says (an integer, one of a Literal's values, text)."""

    flag: str
    help: str = ""
    metavar: str | None = None
    multiple: bool = False
    flag_value: Any = None
    reads: str | None = None


@dataclass(frozen=True)
class Form:
    """The field as a field of the TUI's submit form (tui/screens/submit.py makes it): its place, its placeholder
    (default: the field's description, and its default where it has one) and how the form reads what is typed —
    `text` (as typed), `whole` (a whole number), `words` (a list: spaces or commas), `duration` (90s, 30m, 1h30m:
    seconds), `pairs` (KEY=VALUE …), `json_pairs` (KEY=VALUE …, each value JSON where it parses), `choice` (one of
    the field's Literal values)."""

    order: int = 100
    placeholder: str = ""
    reads: str = "text"


Problem = Callable[[Any], "str | dict[str, str] | None"]


@dataclass(frozen=True, eq=False)
class Check:
    """A field's check written out (what is wrong, or None) and the JSON Schema that says the same, side by side.
    A check may answer several problems at once as {field path: problem}."""

    problem: Problem
    schema: dict[str, Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: pydantic.GetCoreSchemaHandler) -> Any:
        return core_schema.with_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: pydantic.GetJsonSchemaHandler) -> dict[str, Any]:
        return dict(self.schema)

    def _check(self, value: Any, info: core_schema.ValidationInfo) -> Any:
        problem: Any = self.problem
        found = problem(value, info.context or {}) if getattr(problem, "needs_context", False) else problem(value)
        if isinstance(found, dict) and found:
            raise PydanticCustomError("gpudeck_many", "{fields}", {"fields": found})
        if isinstance(found, str):
            raise PydanticCustomError("gpudeck", "{problem}", {"problem": found})
        return value


def with_context(fn: Callable[[Any, dict[str, Any]], str | None]) -> Problem:
    fn.needs_context = True  # type: ignore[attr-defined]
    return fn  # type: ignore[return-value]


AGE_PATTERN = "^([0-9]+[smhdw])+$"
INT, STR, BOOL = {"type": "integer"}, {"type": "string"}, {"type": "boolean"}


def seconds_of(value: Any, lo: int, hi: int) -> tuple[int | None, str | None]:
    """(seconds, problem) of a duration given as seconds or as an age such as 30m or 8h."""
    if isinstance(value, str):
        try:
            value = parse_age(value)
        except ValueError as exc:
            return None, str(exc)
    problem = int_in(value, lo, hi)
    if problem:
        return None, f"{problem} (seconds, or an age such as 30m or 8h)"
    return value, None


SIZE_PATTERN = r"^[0-9]+(\.[0-9]+)? ?([KkMmGgTt](i?[Bb])?)?$"
"""A size as people write it: bytes, or a number and a unit (512M, 10G, 1.5GiB, 10GB: binary units all)."""


def bytes_of(value: Any, lo: int, hi: int) -> tuple[int | None, str | None]:
    """(bytes, problem) of a size given as bytes or as 512M, 10G, 1.5GiB (K, M, G, T are powers of 1024)."""
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(SIZE_PATTERN, text):
            return None, f"must be a size such as 512M, 10G or 1.5GiB (or bytes), got {value!r}"
        try:
            value = parse_size(re.sub(r"(?i)i?b$", "", text).replace(" ", ""))
        except ValueError:
            return None, f"must be a size such as 512M, 10G or 1.5GiB (or bytes), got {value!r}"
    if not isinstance(value, int) or isinstance(value, bool):
        return None, f"must be a size such as 512M, 10G or 1.5GiB (or bytes), got {type(value).__name__} {value!r}"
    if not lo <= value <= hi:
        return None, f"must be between {size_text(lo)} and {size_text(hi)}, got {size_text(value)}"
    return value, None


def int_in(value: Any, lo: int, hi: int) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"must be an integer, got {type(value).__name__} {value!r}"
    if not lo <= value <= hi:
        return f"must be between {lo} and {hi}, got {value}"
    return None


def whole(value: Any) -> Any:
    """An integral float as the int it is (in JSON, and JSON Schema's `integer`, 4.0 is 4); anything else as is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def shown_default(info: Any) -> Any:
    """A field's declared default as help texts say it (`(default 1)`), or None: a field with none, or whose
    default is nothing to say (an empty list, false)."""
    if info.is_required():
        return None
    value = info.get_default(call_default_factory=True)
    return None if value is None or value is False or value in ([], {}, ()) else value


def marker(cls: type[BaseModel], field: str, kind: type) -> Any:
    """The declaration's `kind` marker (Says, Elsewhere, Cli, Required) on `field` of `cls`, or None."""
    info = cls.model_fields.get(field)
    return next((m for m in info.metadata if isinstance(m, kind)), None) if info else None
