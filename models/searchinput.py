"""What a search (a sweep whose trials are sampled: random, TPE) is asked with, declared once: the API checks a body
against it (jobs.searchspace, after its own checks that say more than a type can: a key's meaning for the base, a
range's order, each value applied to the base) and the OpenAPI document's SearchSweepInput is made from it, so the
document never refuses what the server takes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from models.specfields import AGE_PATTERN

SEARCHES = ("grid", "random", "tpe")
STOPPINGS = ("asha", "median")
DISTRIBUTIONS = ("loguniform", "uniform", "int", "choice")
ZOO_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy", "test_accuracy", "test_loss", "test_top5")
"""What a model job reports: its points' fields and its result's."""
MAX_TRIALS = 500
DEFAULT_TRIALS = 20
DEFAULT_CONCURRENT = 4

OMITTED: Any = None
"""The default of a field a body may leave out (it is not null when it is there)."""

JobSpecInput = Annotated[dict[str, Any], WithJsonSchema({"$ref": "#/components/schemas/JobSpecInput"})]
"""A job spec of any kind (the OpenAPI document's JobSpecInput, made from models.jobspec)."""


class Input(BaseModel):
    """A request body: a field it does not declare is refused."""

    model_config = ConfigDict(extra="forbid")


class Distribution(Input):
    """[low, high] with low < high (loguniform: low > 0), or a list of choices"""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})
    loguniform: tuple[float, float] = OMITTED
    uniform: tuple[float, float] = OMITTED
    int_: tuple[int, int] = Field(OMITTED, alias="int")
    choice: list[float | str | bool | None] = Field(OMITTED, min_length=1)


class Stopping(Input):
    kind: Literal["asha", "median"]
    min_steps: int = Field(OMITTED, description="the first rung (asha), the warm-up (median)", ge=1)
    reduction_factor: int = Field(OMITTED, description="asha: 1 in this many goes on at a rung", ge=2)


class SearchSweepInput(Input):
    base: JobSpecInput
    search: Literal["random", "tpe"] = Field(description="random sampling, or Bayesian (TPE)")
    space: dict[str, Distribution] = Field(
        description=(
            "params.<name> (a model job), env.<NAME> or args.<NAME> (a {NAME} in a command job's command), or a spec "
            "field -> how its values are sampled"
        ),
        json_schema_extra={"minProperties": 1},
    )
    stopping: Stopping | None = None
    metric: str = Field(
        OMITTED,
        description=f"a scalar the jobs report (a model job: {', '.join(ZOO_METRICS)}); needed for a command job",
    )
    mode: Literal["min", "max"] = Field(OMITTED, description="default: min for a loss or error, else max")
    max_trials: int = Field(DEFAULT_TRIALS, ge=1, le=MAX_TRIALS)
    max_concurrent: int = Field(DEFAULT_CONCURRENT, ge=1)
    time_budget: Annotated[int, Field(ge=1)] | Annotated[str, Field(pattern=AGE_PATTERN)] | None = Field(
        None,
        description="seconds, or an age (30m, 2h): after it no trial is launched and running ones are stopped early",
    )
    seed: int = Field(OMITTED, description="the same seed, the same trials", ge=0, le=2**31 - 1)


def problems(body: dict[str, Any]) -> dict[str, str]:
    """What SearchSweepInput refuses in `body`: field (dotted) -> why; none for a body it takes."""
    from pydantic import ValidationError

    try:
        SearchSweepInput.model_validate(body)
    except ValidationError as exc:
        return {".".join(str(p) for p in e["loc"]) or "body": e["msg"] for e in exc.errors()}
    return {}
