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


def _numpy_to_python(obj: Any) -> Any:
    """A numpy scalar or array as the Python value or list it holds; anything else as is."""
    if type(obj).__module__ == "numpy" and hasattr(obj, "tolist"):  # np.float32(nan), an array: no numpy import
        return obj.tolist()
    return obj


def key_name(key: Any) -> str | None:
    """The name `json.dumps` writes for the dict key `key` (True as "true", 1.5 as "1.5"); None for a key it
    refuses (its TypeError, or `skipkeys`, decides)."""
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None:
        return json.dumps(key)
    if isinstance(key, float):
        return float.__repr__(key)
    if isinstance(key, int):
        return int.__repr__(key)
    return None


def finite_json(obj: Any, path: str = "") -> tuple[Any, dict[str, str]]:
    """A copy of `obj` (dicts, lists, tuples, scalars; numpy scalars and arrays, values and dict keys, as the Python
    values and lists they hold) with every non-finite float replaced by None, and `{dotted path: "nan" | "inf" |
    "-inf"}` of what was replaced; a path names a dict key as JSON writes it (`True` as "true"), and "$" names `obj`
    itself (the empty key `""` of the top dict is the path "", not "$").

    A non-finite float as a dict key (JSON has no name for it), and two keys that JSON writes as one name (`1` and
    `"1"`: a reader keeps one value), are a ValueError naming the path."""
    return _finite_json(obj, path or None)


def _finite_json(obj: Any, path: str | None) -> tuple[Any, dict[str, str]]:
    """`finite_json` with `path` None for the top (a top key `""` once made the path "", reported as "$")."""
    obj = _numpy_to_python(obj)
    if isinstance(obj, float):
        return (obj, {}) if math.isfinite(obj) else (None, {"$" if path is None else path: repr(obj)})
    if isinstance(obj, dict):
        out, replaced, names = {}, {}, {}
        for key, value in obj.items():
            key = _numpy_to_python(key)
            name = key_name(key)
            if isinstance(key, float) and not math.isfinite(key):
                raise ValueError(f"{path or '$'}: a non-finite dict key {key!r} has no JSON name")
            if name is not None and name in names:
                raise ValueError(f"{path or '$'}: keys {names[name]!r} and {key!r} are both written as JSON name "
                                 f"{name!r} (a reader keeps one of the two values)")
            if name is not None:
                names[name] = key
            key_path = str(key) if name is None else name
            out[key], inner = _finite_json(value, key_path if path is None else f"{path}.{key_path}")
            replaced.update(inner)
        return out, replaced
    if isinstance(obj, (list, tuple)):
        items, replaced = [], {}
        for i, value in enumerate(obj):
            item, inner = _finite_json(value, str(i) if path is None else f"{path}.{i}")
            items.append(item)
            replaced.update(inner)
        return items, replaced
    return obj, {}


def dumps(obj: Any, **kwargs) -> str:
    """`json.dumps` that writes non-finite floats as null (their paths under "non_finite" when `obj`
    is a dict, added to the reasons an object there already holds) and can never emit NaN or Infinity
    (`allow_nan=False`). A dict whose "non_finite" holds anything but an object, when there is a path to record, is a
    ValueError naming it (replacing it lost the value unsaid)."""
    clean, replaced = finite_json(obj)
    if replaced and isinstance(clean, dict):
        previous = clean.get("non_finite", {})
        if not isinstance(previous, dict):
            raise ValueError(f"its key 'non_finite' holds {previous!r:.60}, not an object to record the non-finite "
                             f"values at {', '.join(sorted(replaced))} in")
        clean["non_finite"] = {**previous, **replaced}
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
