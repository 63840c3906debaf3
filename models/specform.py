"""The TUI's submit form as the job spec declares it (models/jobspec.py: each field's `Form` marker): its fields in
order, each with its placeholder, how what is typed is read, and a choice field's choices."""

from __future__ import annotations

import typing
from dataclasses import dataclass

from models.jobspec import KINDS
from models.specfields import Form, marker, shown_default


@dataclass(frozen=True)
class FormField:
    """A field of the submit form, as its declaration says (its `Form` marker): the placeholder, how what is typed
    is read, the choices of a `choice` field."""

    name: str
    placeholder: str
    reads: str
    choices: tuple[str, ...] = ()


def form_fields() -> list[FormField]:
    """The submit form's fields, in their order, from the first kind that declares each with a `Form` marker: a
    field with a default and a Form marker is in the form, its placeholder its description and default where the
    marker gives none (the form is made from the declaration: issue 63)."""
    found: dict[str, tuple[int, FormField]] = {}
    for cls in KINDS.values():
        for name, info in cls.model_fields.items():
            form = marker(cls, name, Form)
            if form is None or name in found:
                continue
            text = form.placeholder or info.description or name
            if (default := shown_default(info)) is not None:
                text += f" (default {default})"
            literals = [a for t in typing.get_args(info.annotation) for a in (typing.get_args(t) or (t,))]
            choices = tuple(str(c) for c in literals if isinstance(c, str)) if form.reads == "choice" else ()
            found[name] = (form.order, FormField(name, text, form.reads, choices))
    return [field for _, field in sorted(found.values(), key=lambda f: f[0])]
