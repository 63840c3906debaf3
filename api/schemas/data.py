"""The bodies of models, datasets, sources and environments."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from api.schemas.base import (
    OMITTED,
    Answer,
    Time,
    UnixS,
)


class Source(Answer):
    ref: str
    sha256: str
    files: int
    size_bytes: int
    created_at: Time
    git_commit: str = OMITTED
    git_dirty: bool = OMITTED
    path: str = OMITTED


class DeletedDataset(Answer):
    name: str
    version: str
    deleted: bool
    bytes_freed: int


class ZooModel(Answer):
    name: str
    family: str
    input_shape: list[int]
    parameters: int
    aliases: list[str] = OMITTED
    params: dict[str, Any]


class ModelList(Answer):
    models: list[ZooModel]
    recipes: dict[str, Any]
    next_cursor: None = OMITTED


class DatasetVersion(Answer):
    name: str
    version: str
    ref: str
    format: str
    files: int
    size_bytes: int
    created_at: Time
    owner: str | None = Field(None, description="the name of the token that made it (null: no named tokens then)")


class Dataset(Answer):
    name: str
    latest: str
    versions: list[DatasetVersion]


class DatasetList(Answer):
    datasets: list[Dataset]
    next_cursor: None


class Env(Answer):
    digest: str = OMITTED
    path: str = OMITTED
    size_bytes: int = OMITTED
    kind: Literal["requirements", "uv.lock"] = OMITTED
    packages: int = OMITTED
    isolated: bool = OMITTED
    python: str = OMITTED
    built_at: UnixS = OMITTED
    built_by: int = OMITTED
    last_used: float | None = Field(
        None, description="unix time, seconds (a sample's clock, for arithmetic, not a date)"
    )
    jobs: list[int] = Field(OMITTED, description="the newest 20 that used it")


class EnvList(Answer):
    envs: list[Env]
