"""The submit form: a zoo model (model, dataset, key params) or your own command (command, source, env, where the
API allows command jobs), GPUs, name, tags, timeout, priority; every validation error the API returns appears in
full under its field."""

from __future__ import annotations

import json
import re
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Footer, Input, Label, Select

from models.common import parse_duration
from models.specform import form_fields

FORM = {f.name: f for f in form_fields()}
"""The form's fields, made from the job spec's declaration (models/jobspec.py: each field's `Form` marker)."""
FIELDS = tuple(name for name, f in FORM.items() if f.reads != "choice")
CHOICES = tuple(name for name, f in FORM.items() if f.reads == "choice")
COMMAND_FIELDS = ("command", "source", "env")
KIND_FIELDS = ("model", "dataset", "command", "source", "env")
"""The fields that say which kind of job it is (a zoo model, or your own command): read together (spec)."""


def seconds(text: str) -> int | None:
    """`90`, `90s`, `30m`, `2h`, `1h30m` as seconds (models.common.parse_duration); None when it is none of these."""
    try:
        return parse_duration(text) or None
    except ValueError:
        return None


class CompletingInput(Input):
    """An Input where tab takes the suggestion shown (as a shell completes), and moves on when there is none (the
    form's tab binding asks it: SubmitScreen.action_next_field)."""

    def complete(self) -> bool:
        """Take the suggestion shown; whether there was one to take."""
        if self._suggestion and len(self._suggestion) > len(self.value):
            self.value = self._suggestion
            self.cursor_position = len(self.value)
            return True
        return False


class SubmitScreen(ModalScreen[dict | None]):
    BINDINGS = [
        Binding("ctrl+s", "submit", "Submit", priority=True),
        Binding("escape", "dismiss_form", "Cancel"),
        # Priority: the app runs them as it reads the key, before it hands the next key to the focused field (a key
        # typed right after tab landed in the field tab left, 2 times in 9 under load: issue 67 #7)
        Binding("tab", "next_field", show=False, priority=True),
        Binding("shift+tab", "previous_field", show=False, priority=True),
    ]

    def action_next_field(self) -> None:
        focused = self.focused
        if not (isinstance(focused, CompletingInput) and focused.complete()):
            self.focus_next()

    def action_previous_field(self) -> None:
        self.focus_previous()

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog form"):
            yield Label("New training job", classes="title")
            for field in FIELDS:
                yield Label(field, id=f"l-{field}")
                # (the cursor goes to the end, the text unselected: after an error Backspace fixes a character, not
                # the whole field)
                kind = CompletingInput if field == "model" else Input
                yield kind(placeholder=FORM[field].placeholder, id=f"f-{field}", select_on_focus=False)
                yield Label("", id=f"e-{field}", classes="field-error")
            yield Label("", id="commands-off", classes="field-hint")
            for field in CHOICES:  # (choices from the field's Literal: priority)
                choices = FORM[field].choices
                yield Label(field)
                first = "normal" if "normal" in choices else choices[0]
                yield Select([(c, c) for c in choices], value=first, allow_blank=False, id=f"f-{field}")
            yield Label("", id="e-form", classes="field-error")
            with Horizontal(classes="buttons"):
                yield Button("Submit ^s", id="submit", variant="primary")
                yield Button("Cancel esc", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#f-model", Input).focus()  # (the dataset empty: `synthetic` its placeholder, not its text)
        self.query_one("#commands-off", Label).display = False
        self.app.call_api(lambda c: c.models(), self._models)
        self.app.call_api(lambda c: c.request("GET", "/healthz").json(), self._server)

    def _server(self, health: dict[str, Any]) -> None:
        """Command fields only where this API runs command jobs; elsewhere a line says how the operator allows
        them (they run any code as the service)."""
        if health.get("command_jobs", True):
            return
        for field in COMMAND_FIELDS:
            for part in ("l", "f", "e"):
                self.query_one(f"#{part}-{field}").display = False
        hint = self.query_one("#commands-off", Label)
        hint.update(
            "Command jobs are off on this server (they run any code as the gpudeck service): the operator turns "
            "on tokens (GPUDECK_TOKENS) or sets GPUDECK_COMMAND_JOBS=1 on a single-user machine."
        )
        hint.display = True

    def _models(self, body: dict[str, Any]) -> None:
        names = [m["name"] for m in body["models"]] + [a for m in body["models"] for a in m.get("aliases", [])]
        self.query_one("#f-model", Input).suggester = SuggestFromList(names, case_sensitive=False)

    def spec(self) -> dict[str, Any]:
        """The spec the form describes; a malformed params, env or gpus entry is reported at its field. With a
        command it is a command job (its dataset only where one is given; a model job's is `synthetic` where none
        is: typing into a pre-filled field appended — `syntheticsynthetic:16x16x3`, issue 67 #7)."""
        value = {f: self.query_one(f"#f-{f}", Input).value.strip() for f in FIELDS}
        spec: dict[str, Any] = {}
        if value["command"]:
            spec["command"] = value["command"]
            for key in ("model", "source"):
                if value[key]:
                    spec[key] = value[key]
            if value["dataset"]:
                spec["dataset"] = value["dataset"]
            if value["env"]:
                spec["env"] = dict(self._pairs("env", value["env"]))
        else:
            spec.update(model=value["model"], dataset=value["dataset"] or "synthetic", params={})
        for field in FIELDS:  # (the others, each as its declaration says it is read; a size or such: the API reads)
            if field not in KIND_FIELDS and value[field]:
                spec[field] = self._read(field, FORM[field].reads, value[field])
        for field in CHOICES:
            spec[field] = self.query_one(f"#f-{field}", Select).value
        return spec

    @classmethod
    def _read(cls, field: str, reads: str, text: str) -> Any:
        """What was typed in `field`, read as its declaration says (models.specfields.Form)."""
        if reads == "whole":
            if not text.isdigit():
                raise FieldError(field, f"must be a whole number, got {text!r}")
            return int(text)
        if reads == "words":
            return [t for t in re.split(r"[\s,]+", text) if t]
        if reads == "duration":
            if not (took := seconds(text)):
                raise FieldError(field, f"write a duration such as 90s, 30m, 2h or 1h30m, got {text!r}")
            return took
        if reads == "pairs":
            return dict(cls._pairs(field, text))
        if reads == "json_pairs":
            out: dict[str, Any] = {}
            for key, raw in cls._pairs(field, text):
                try:
                    out[key] = json.loads(raw)
                except ValueError:
                    out[key] = raw
            return out
        return text

    @staticmethod
    def _pairs(field: str, text: str) -> list[tuple[str, str]]:
        pairs = []
        for item in text.split():
            key, sep, raw = item.partition("=")
            if not sep or not key:
                raise FieldError(field, f"write key=value pairs separated by spaces, got {item!r}")
            pairs.append((key, raw))
        return pairs

    def show_errors(self, errors: dict[str, str]) -> None:
        """Every problem under its field, in full (several under one field each on a line of its own); a problem
        of no field of the form under the buttons."""
        for f in (*FIELDS, "form"):
            self.query_one(f"#e-{f}", Label).update("")
        under: dict[str, list[str]] = {}
        for key, problem in errors.items():
            top = key.split(".", 1)[0]
            target = top if top in FIELDS else "form"
            under.setdefault(target, []).append(problem if key == target else f"{key}: {problem}")
        for target, problems in under.items():
            self.query_one(f"#e-{target}", Label).update("\n".join(problems))
        first = next((f for f in FIELDS if f in under), None)
        if first:
            self.query_one(f"#f-{first}", Input).focus()
            self.query_one(f"#e-{first}", Label).scroll_visible()

    def action_submit(self) -> None:
        try:
            spec = self.spec()
        except FieldError as exc:
            self.show_errors({exc.field: exc.problem})
            return

        def refused(exc) -> None:
            fields = exc.details.get("fields") or {exc.details.get("field", "form"): exc.message}
            self.show_errors(fields)

        self.app.call_api(lambda c: c.submit(spec), self.dismiss, refused)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "submit":
            self.action_submit()
        else:
            self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_submit()

    def action_dismiss_form(self) -> None:
        self.dismiss(None)


class FieldError(Exception):
    def __init__(self, field: str, problem: str):
        super().__init__(problem)
        self.field, self.problem = field, problem
