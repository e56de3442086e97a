"""Strict JSON out: what aspire writes is valid JSON (RFC 8259), never a bare `NaN` or `Infinity`.

Python's `json.dumps` writes non-finite floats as `NaN` / `Infinity`, which other JSON readers
refuse. `dumps` writes such a value as `null` and, when the document is an object, records why
under the key `"non_finite"`: `{"loss": null, "non_finite": {"loss": "nan"}}` (dotted paths, list
positions as numbers: `"summary.all.bpref"`, `"hits.3.score"`). Metrics that are undefined for a
known reason (e.g. bpref with no non-relevant candidate) are handled by their writers, which put
`null` with that reason; `dumps` is the safety net that keeps any other non-finite value valid.

A lone surrogate in a string (what a JSON `"\\ud800"` escape reads as) cannot be encoded as UTF-8: the writers
write it back as that escape (`escape_surrogates`), so a record that was read can always be written.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def finite_json(obj: Any, path: str = "") -> tuple[Any, dict[str, str]]:
    """A copy of `obj` (dicts, lists, tuples, scalars; numpy scalars and arrays as the Python values and
    lists they hold) with every non-finite float replaced by None, and `{dotted path: "nan" | "inf" |
    "-inf"}` of what was replaced."""
    if type(obj).__module__ == "numpy" and hasattr(obj, "tolist"):  # np.float32(nan), an array: no numpy import
        obj = obj.tolist()
    if isinstance(obj, float):
        return (obj, {}) if math.isfinite(obj) else (None, {path or "$": repr(obj)})
    if isinstance(obj, dict):
        out, replaced = {}, {}
        for key, value in obj.items():
            out[key], inner = finite_json(value, f"{path}.{key}" if path else str(key))
            replaced.update(inner)
        return out, replaced
    if isinstance(obj, (list, tuple)):
        items, replaced = [], {}
        for i, value in enumerate(obj):
            item, inner = finite_json(value, f"{path}.{i}" if path else str(i))
            items.append(item)
            replaced.update(inner)
        return items, replaced
    return obj, {}


def dumps(obj: Any, **kwargs) -> str:
    """`json.dumps` that writes non-finite floats as null (their paths under "non_finite" when `obj`
    is a dict) and can never emit NaN or Infinity (`allow_nan=False`)."""
    clean, replaced = finite_json(obj)
    if replaced and isinstance(clean, dict):
        previous = clean.get("non_finite")
        clean["non_finite"] = {**previous, **replaced} if isinstance(previous, dict) else replaced
    return json.dumps(clean, allow_nan=False, **kwargs)


def escape_surrogates(text: str) -> str:
    """JSON text (as `json.dumps(..., ensure_ascii=False)` writes it) with each lone surrogate, which only a string
    can hold, written as its `\\uXXXX` escape: the same JSON value, and text that UTF-8 can encode."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def strict_loads(text: str | bytes) -> Any:
    """`json.loads` that refuses `NaN`, `Infinity` and `-Infinity` (not JSON) with a ValueError."""

    def refuse(constant: str):
        raise ValueError(f"not valid JSON: bare {constant}")

    return json.loads(text, parse_constant=refuse)
