"""Round 69, the two walks of one JSON tree: `aspire.jsonsafe.finite_json` (every non-finite float, numpy values and
keys read as the Python values they hold, a copy with each one None) and `aspire.io._unwritable` (the first value or
key `json.dumps` cannot write, numpy ones included). These tests pin the paths and messages of both, as they were
when the two were compared: dotted keys, list positions as numbers, keys that are not strings as JSON names them."""

import json

import numpy as np
import pytest

from aspire.io import _unwritable, finite_dumps
from aspire.jsonsafe import dumps, finite_json

NAN, INF = float("nan"), float("inf")


# ---- finite_json: every non-finite float, by its dotted path ---------------------------------------------------------
@pytest.mark.parametrize("obj, clean, replaced", [
    ({"a": {"b": [1.0, NAN]}}, {"a": {"b": [1.0, None]}}, {"a.b.1": "nan"}),
    (INF, None, {"$": "inf"}),
    (((1.0, -INF),), [[1.0, None]], {"0.1": "-inf"}),  # tuples come back as lists
    ({"x": np.float32("nan"), "y": np.float64(INF)}, {"x": None, "y": None}, {"x": "nan", "y": "inf"}),
    ({"v": np.array([1.0, np.nan])}, {"v": [1.0, None]}, {"v.1": "nan"}),
    ({True: NAN, 1.5: INF, None: NAN, 2: -INF}, {True: None, 1.5: None, None: None, 2: None},
     {"true": "nan", "1.5": "inf", "null": "nan", "2": "-inf"}),
    ({(1, 2): NAN}, {(1, 2): None}, {"(1, 2)": "nan"}),  # a key JSON has no name for: its str
    ({"": NAN, "s": {1, 2}, "o": None}, {"": None, "s": {1, 2}, "o": None}, {"": "nan"}),  # a set is left as it is
    ({"": {"k": NAN}}, {"": {"k": None}}, {".k": "nan"}),
])
def test_finite_json_pins_each_path_and_the_copy(obj, clean, replaced):
    out, found = finite_json(obj)
    assert found == replaced
    assert out == clean  # a list is never equal to a tuple: the tuples came back as lists


def test_finite_json_reads_numpy_keys_as_the_python_values_they_hold():
    out, found = finite_json({np.int64(3): NAN, "a": [np.float32(0.5)]})
    assert found == {"3": "nan"}
    assert list(out) == [3, "a"] and type(next(iter(out))) is int
    assert out["a"] == [0.5] and type(out["a"][0]) is float


def test_finite_json_starts_its_paths_at_the_path_given():
    assert finite_json({"a": [NAN]}, "root")[1] == {"root.a.0": "nan"}
    assert finite_json(NAN, "root")[1] == {"root": "nan"}


@pytest.mark.parametrize("obj, message", [
    ({"m": {NAN: 1}}, "m: a non-finite dict key nan has no JSON name"),
    ({np.float32("-inf"): 1}, "$: a non-finite dict key -inf has no JSON name"),
    ({"m": [0, {1: 0, "1": 1}]}, "m.1: keys 1 and '1' are both written as JSON name '1' (a reader keeps one of the "
                                 "two values)"),
    ({np.int64(1): 0, "1": 1}, "$: keys 1 and '1' are both written as JSON name '1'"),
    ({True: 0, "true": 1}, "$: keys True and 'true' are both written as JSON name 'true'"),
])
def test_finite_json_names_the_path_of_a_key_it_refuses(obj, message):
    with pytest.raises(ValueError) as err:
        finite_json(obj)
    assert str(err.value).startswith(message)


def test_dumps_records_every_path_under_non_finite():
    text = dumps({"a": [NAN, {"b": np.float32("inf")}], 1: -INF})
    assert json.loads(text) == {"a": [None, {"b": None}], "1": None,
                                "non_finite": {"a.0": "nan", "a.1.b": "inf", "1": "-inf"}}


# ---- _unwritable: the first value or key json.dumps cannot write ----------------------------------------------------
@pytest.mark.parametrize("obj, found", [
    ({"model": {"tau": np.float32(0.5)}}, "model.tau, a value of type float32"),
    ({"v": np.array([1.0])}, "v, a value of type ndarray"),
    ({"t": (1, [2, {3}])}, "t.1.1, a value of type set"),
    ([object()], "0, a value of type object"),
    (np.int64(3), "$, a value of type int64"),
    ({"ok": np.bool_(True)}, "ok, a value of type bool_"),
    ({"m": {(1, 2): "a"}}, "the key (1, 2) of m, of type tuple"),
    ({(1, 2): "a"}, "the key (1, 2) of $, of type tuple"),
    ({np.int64(1): 0}, f"the key {np.int64(1)!r} of $, of type int64"),  # json.dumps refuses a numpy key
    ({True: {None: {1.5: [0, np.float32(1)]}}}, "true.null.1.5.1, a value of type float32"),
    ({"a": {1}, "b": {2}}, "a, a value of type set"),  # the first only
    ({"a": [1, 2], "b": {"c": frozenset()}}, "b.c, a value of type frozenset"),
    ({"": {"k": {1}}}, ".k, a value of type set"),
])
def test_unwritable_pins_the_first_value_or_key_and_its_path(obj, found):
    assert _unwritable(obj) == found


@pytest.mark.parametrize("obj", [
    {"x": NAN, "y": [INF, -INF]},  # json.dumps writes these (allow_nan decides), not this walk's to report
    {"f": np.float64(0.5), True: None, 1.5: "s", None: (1, "a"), 2: False},  # float64 is a float
    [],
    "s",
])
def test_unwritable_is_none_for_what_json_dumps_can_write(obj):
    assert _unwritable(obj) is None


# ---- finite_dumps: the two walks together ---------------------------------------------------------------------------
@pytest.mark.parametrize("obj, message", [
    ({"a": np.float32("nan")}, "x records a nan, which JSON has no number for"),  # finite_json's walk first
    ({"a": [1, {"b": np.float32(1)}]}, "x records a.1.b, a value of type float32, which JSON cannot write"),
    ({"a": {(1,): 1}}, "x records the key (1,) of a, of type tuple, which JSON cannot write"),
    ({"a": {1: 0, "1": 1}}, "x a: keys 1 and '1' are both written as JSON name '1'"),
])
def test_finite_dumps_messages(obj, message):
    with pytest.raises(ValueError) as err:
        finite_dumps(obj, "x")
    assert str(err.value).startswith(message)


def test_finite_dumps_keeps_a_sort_keys_type_error():
    with pytest.raises(TypeError, match=r"^x '<' not supported"):
        finite_dumps({1: 0, "a": 1}, "x", sort_keys=True)  # no value at fault: json's own TypeError, named
