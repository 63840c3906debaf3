"""TF_CONFIG for multi-worker training: the cluster (chief, worker, ps, evaluator addresses) and this task."""

from __future__ import annotations

import json
import re
from typing import Any

TASK_TYPES = ("chief", "worker", "ps", "evaluator")
ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):(\d{1,5})$")


def parse_addresses(text: str, field: str) -> list[str]:
    """`host:port[,host:port…]` as a list; ValueError naming `field` and the bad entry otherwise."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        m = ADDRESS.match(item)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ValueError(f"--{field}: expected host:port (port 1-65535), got {item!r}")
        out.append(item)
    if len(set(out)) != len(out):
        raise ValueError(f"--{field}: an address is listed twice")
    return out


def cluster(
    workers: list[str], chief: str | None = None, ps: list[str] | None = None, evaluator: str | None = None
) -> dict[str, list[str]]:
    """The `cluster` part of TF_CONFIG; an address may belong to one task only."""
    spec: dict[str, list[str]] = {}
    if chief:
        spec["chief"] = [chief]
    spec["worker"] = list(workers)
    if ps:
        spec["ps"] = list(ps)
    if evaluator:
        spec["evaluator"] = [evaluator]
    every = [a for addresses in spec.values() for a in addresses]
    if len(set(every)) != len(every):
        raise ValueError("each host:port may be used by one task only")
    return spec


def tf_config(spec: dict[str, list[str]], task_type: str, index: int) -> dict[str, Any]:
    """The TF_CONFIG of one task of `spec`; ValueError when the cluster has no such task."""
    if task_type not in spec:
        raise ValueError(f"the cluster has no {task_type!r} task; it has {', '.join(spec)}")
    if not 0 <= index < len(spec[task_type]):
        raise ValueError(f"{task_type} index must be 0 to {len(spec[task_type]) - 1}, got {index}")
    return {"cluster": spec, "task": {"type": task_type, "index": index}}


def every_task(spec: dict[str, list[str]]) -> list[tuple[str, int, str]]:
    """(type, index, TF_CONFIG JSON) for each task, chief first."""
    return [
        (t, i, json.dumps(tf_config(spec, t, i), separators=(",", ":")))
        for t in TASK_TYPES
        for i in range(len(spec.get(t, [])))
    ]
