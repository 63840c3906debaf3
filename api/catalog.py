"""/api/v1/models: the model zoo with input sizes, parameter counts and accepted params (no TensorFlow here)."""

from __future__ import annotations

from flask import Blueprint

from models.catalog import MODELS
from models.params import RECIPES

bp = Blueprint("catalog", __name__)


@bp.get("/models")
def models():
    return {"models": [info.describe() for info in MODELS.values()], "recipes": RECIPES, "next_cursor": None}
