"""The API's bodies as pydantic models: what each route answers, and the small request bodies beside a job's spec
(whose kinds are models.jobspec's). The OpenAPI document's component schemas are made from these
(api/openapi/__init__.py: `components`), so what it says of an answer is what is declared here, once;
tests/api/test_openapi.py checks real answers against them. An answer may carry fields it does not declare (a
client keeps what it does not know); a request body may not."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from pydantic import BaseModel, RootModel
from pydantic.json_schema import GenerateJsonSchema, JsonRef, JsonSchemaValue, models_json_schema

from api.schemas import data, jobs, schedules, service, sweeps
from api.schemas.base import GridSweepInput
from models import scheduleinput, searchinput
from models.searchinput import SearchSweepInput

PARTS: tuple[ModuleType, ...] = (jobs, sweeps, schedules, data, service, searchinput, scheduleinput)
"""Where the bodies are declared: one module a resource, and the search and schedule bodies models.searchinput and
models.scheduleinput declare (what jobs.searchspace and jobs.cronjobs check them with)."""


class SweepInput(RootModel[GridSweepInput | SearchSweepInput]):
    """a grid (one job per combination) or a search (trials sampled and stopped early)"""


class _Components(GenerateJsonSchema):
    """pydantic's JSON Schema, where a reference to a schema made elsewhere (made_elsewhere) is left as it is."""

    def handle_ref_overrides(self, json_schema: JsonSchemaValue) -> JsonSchemaValue:
        if "$ref" in json_schema and JsonRef(json_schema["$ref"]) not in self.json_to_defs_refs:
            return json_schema
        return super().handle_ref_overrides(json_schema)


def _plain(node: Any) -> Any:
    """A pydantic JSON Schema without what it makes up: the titles it takes from names (a generator names types by
    them), a default of null on a field that is only left out, and the line breaks of a docstring wrapped to be
    read here."""
    if isinstance(node, dict):
        return {
            k: " ".join(v.split()) if k == "description" and isinstance(v, str) else _plain(v)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str)) and not (k == "default" and v is None)
        }
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def models() -> list[type[BaseModel]]:
    """Every body declared in PARTS, and SweepInput here."""
    return [SweepInput] + [
        v
        for part in PARTS
        for k, v in vars(part).items()
        if isinstance(v, type)
        and issubclass(v, BaseModel)
        and v.__module__ == part.__name__
        and v is not searchinput.Input
        and k.isidentifier()  # (not the parametrized generics pydantic names there: RootModel[...])
    ]


def components() -> dict[str, Any]:
    """The OpenAPI document's component schemas of these models (each under its class's name)."""
    _, top = models_json_schema(
        [(m, "validation") for m in models()],
        ref_template="#/components/schemas/{model}",
        schema_generator=_Components,
    )
    return _plain(top["$defs"])
