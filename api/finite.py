"""JSON answers hold only JSON (RFC 8259 has no NaN or Infinity): a float that is not finite — a diverged loss,
a result computed from one — is answered as `null`, and the object that held it says so in `nonfinite`
(`{"loss": null, "nonfinite": {"loss": "nan"}}`), so a strict parser reads every answer and a client can still tell
a NaN from a value that was never there. What is stored keeps the real value (the CSV of metrics shows `nan`)."""

from __future__ import annotations

import json
import math
from typing import Any

from flask.json.provider import DefaultJSONProvider

NONFINITE = "nonfinite"
"""The key of an object whose values were not finite: field -> "nan", "inf" or "-inf"."""


def finite(value: Any) -> Any:
    """`value` with every non-finite float replaced as the module says (new containers; the rest shared)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        flags: dict[str, str] = {}
        for k, v in value.items():
            if isinstance(v, float) and not math.isfinite(v):
                flags[k] = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
                out[k] = None
            else:
                out[k] = finite(v)
        if flags:
            out[NONFINITE] = flags
        return out
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


class FiniteJSONProvider(DefaultJSONProvider):
    """Flask's provider with `allow_nan=False`, after `finite()` where a value needs it (the common answer, with
    only finite numbers, is encoded once, unchanged)."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        kwargs.setdefault("default", self.default)
        kwargs.setdefault("ensure_ascii", self.ensure_ascii)
        kwargs.setdefault("sort_keys", self.sort_keys)
        try:
            return json.dumps(obj, allow_nan=False, **kwargs)
        except ValueError:  # "Out of range float values are not JSON compliant"
            return json.dumps(finite(obj), allow_nan=False, **kwargs)
