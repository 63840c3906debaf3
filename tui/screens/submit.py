"""The submit form: a zoo model (model, dataset, key params) or your own command (command, source, env), GPUs;
the API's validation errors appear at their field."""

from __future__ import annotations

import json
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Label, Select

FIELDS = ("model", "dataset", "params", "command", "source", "env", "gpus", "name")


class SubmitScreen(ModalScreen[dict | None]):
    BINDINGS = [Binding("escape", "dismiss_form", "Cancel"), Binding("ctrl+s", "submit", "Submit")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog form"):
            yield Label("New training job", classes="title")
            for field, placeholder in (
                ("model", "resnet20, lenet, vgg_16 … (tab completes); empty for a command job"),
                ("dataset", "synthetic, cifar10, cifar10:1.0.0, /data/cifar-10-binary.tar.gz"),
                ("params", "steps=100 batch_size=32 lr=0.1 recipe=resnet-paper"),
                ("command", "or your own: python train.py --data-dir $DATA_DIR (run by /bin/sh on the worker)"),
                ("source", "a command job's folder: src:<sha256> (gpudeck run uploads one) or a server folder"),
                ("env", "a command job's variables: SEED=1 WANDB_MODE=offline"),
                ("gpus", "GPUs (empty: 1 if a GPU worker is live, else 0)"),
                ("name", "a name (default: the model)"),
            ):
                yield Label(field)
                yield Input(placeholder=placeholder, id=f"f-{field}")
                yield Label("", id=f"e-{field}", classes="field-error")
            yield Label("priority")
            yield Select(
                [(p, p) for p in ("normal", "high", "low")], value="normal", allow_blank=False, id="f-priority"
            )
            yield Label("", id="e-form", classes="field-error")
            with Horizontal(classes="buttons"):
                yield Button("Submit (ctrl+s)", id="submit", variant="primary")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#f-dataset", Input).value = "synthetic"
        self.query_one("#f-model", Input).focus()
        self.app.call_api(lambda c: c.models(), self._models)

    def _models(self, body: dict[str, Any]) -> None:
        names = [m["name"] for m in body["models"]] + [a for m in body["models"] for a in m.get("aliases", [])]
        self.query_one("#f-model", Input).suggester = SuggestFromList(names, case_sensitive=False)

    def spec(self) -> dict[str, Any]:
        """The spec the form describes; a malformed params, env or gpus entry is reported at its field. With a
        command it is a command job (the untouched default dataset `synthetic` is then left out)."""
        value = {f: self.query_one(f"#f-{f}", Input).value.strip() for f in FIELDS}
        spec: dict[str, Any] = {}
        if value["command"]:
            spec["command"] = value["command"]
            for key in ("model", "source"):
                if value[key]:
                    spec[key] = value[key]
            if value["dataset"] and value["dataset"] != "synthetic":
                spec["dataset"] = value["dataset"]
            if value["env"]:
                spec["env"] = dict(self._pairs("env", value["env"]))
        else:
            spec.update(model=value["model"], dataset=value["dataset"], params={})
        if value["params"]:
            spec["params"] = {}
        for key, raw in self._pairs("params", value["params"]):
            try:
                spec["params"][key] = json.loads(raw)
            except ValueError:
                spec["params"][key] = raw
        if value["gpus"]:
            if not value["gpus"].isdigit():
                raise FieldError("gpus", f"must be a whole number, got {value['gpus']!r}")
            spec["gpus"] = int(value["gpus"])
        if value["name"]:
            spec["name"] = value["name"]
        spec["priority"] = self.query_one("#f-priority", Select).value
        return spec

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
        for f in (*FIELDS, "form"):
            self.query_one(f"#e-{f}", Label).update("")
        for key, problem in errors.items():
            top = key.split(".", 1)[0]
            target = top if top in FIELDS else "form"
            label = self.query_one(f"#e-{target}", Label)
            label.update(f"{key}: {problem}" if target in ("params", "form") else problem)
        first = next((k.split(".", 1)[0] for k in errors if k.split(".", 1)[0] in FIELDS), None)
        if first:
            self.query_one(f"#f-{first}", Input).focus()

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
