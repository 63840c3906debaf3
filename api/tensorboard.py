"""/api/v1/tensorboard: start or reuse a TensorBoard over chosen jobs; list and stop them."""

from __future__ import annotations

from flask import Blueprint

from api import auth, deps
from jobs.errors import NotFound
from jobs.tensorboard import TensorBoards

bp = Blueprint("tensorboard", __name__)


def _boards() -> TensorBoards:
    return TensorBoards(deps.redis(), deps.settings())


@bp.post("/tensorboard")
def start():
    """201 with {url, port, ...} for a new TensorBoard, 200 when one over exactly these jobs already runs."""
    board = _boards().ensure(deps.json_body(), auth.owner_name())
    return board, 200 if board["reused"] else 201


@bp.get("/tensorboard")
def list_boards():
    boards = _boards()
    return {"tensorboards": [boards.view(r) for r in boards.records().values()], "next_cursor": None}


@bp.delete("/tensorboard/<int:port>")
def stop(port: int):
    if not _boards().stop_port(port, lambda owner: auth.may(owner, "stop", f"the TensorBoard on port {port}")):
        raise NotFound(f"no TensorBoard of this host listens on port {port}", {"port": port})
    return "", 204
