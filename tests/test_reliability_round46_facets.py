"""Round 46 sweep of aspire.jsonsafe, aspire.data.facets and aspire.index.texts: jsonsafe output read by a parser that
refuses NaN / Infinity, with its non-finite report checked against a brute-force walk; facet labels and selections by
facet against a hand computation on a tiny labelled paper; an index's papers file written and read back identical
(memory and disk), and a damaged or truncated one refused naming it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from aspire.data.facets import FACETS, facet_of, resolve_selection, selection_facet
from aspire.index import IndexFormatError
from aspire.index.corpus import write_index_papers
from aspire.index.texts import read_index_papers
from aspire.jsonsafe import dumps, finite_json


def _strict(text: str):
    def refuse(constant):
        raise AssertionError(f"bare {constant} in {text!r}")

    return json.loads(text, parse_constant=refuse)


def _non_finite_paths(obj, path=()):
    """Brute force: {path tuple: repr} of every non-finite float (numpy converted), keys as JSON names."""
    if hasattr(obj, "tolist") and type(obj).__module__ == "numpy":
        obj = obj.tolist()
    if isinstance(obj, float):
        return {} if math.isfinite(obj) else {path: repr(obj)}
    out = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            key = key.tolist() if hasattr(key, "tolist") else key
            name = key if isinstance(key, str) else json.dumps(key)
            out.update(_non_finite_paths(value, path + (name,)))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            out.update(_non_finite_paths(value, path + (str(i),)))
    return out


def test_empty_top_key_is_reported_as_its_own_path_not_the_root():
    # the empty key "" was reported as "$" (the document itself), which is not a dict key of it
    text = dumps({"": float("nan"), "ok": 1.0})
    doc = _strict(text)
    assert doc == {"": None, "ok": 1.0, "non_finite": {"": "nan"}}
    assert finite_json(float("inf")) == (None, {"$": "inf"})  # the document itself is still "$"
    assert _strict(dumps({"a": {"": float("-inf")}}))["non_finite"] == {"a.": "-inf"}


def test_dumps_is_strict_json_with_numpy_values_and_paths_as_brute_force():
    obj = {
        "loss": np.float32("nan"),
        "scores": np.array([[1.5, np.inf], [-np.inf, 2.0]]),
        "n": np.int64(7),
        "flag": np.bool_(True),
        "by_k": {np.int32(3): np.float64("nan"), True: [1, (2.5, float("-inf"))]},
        "half": np.float16(0.5),
    }
    doc = _strict(dumps(obj))
    assert doc["n"] == 7 and doc["flag"] is True and doc["half"] == 0.5 and doc["loss"] is None
    assert doc["scores"] == [[1.5, None], [None, 2.0]]
    assert doc["by_k"] == {"3": None, "true": [1, [2.5, None]]}
    expected = {".".join(p): r for p, r in _non_finite_paths(obj).items()}
    assert doc["non_finite"] == expected == {"loss": "nan", "scores.0.1": "inf", "scores.1.0": "-inf",
                                             "by_k.3": "nan", "by_k.true.1.1": "-inf"}
    assert _strict(dumps([np.nan, 1])) == [None, 1]  # not an object: nowhere to record, still valid JSON
    with pytest.raises(ValueError, match="non_finite"):
        dumps({"non_finite": "x", "a": math.inf})


def test_facet_of_reads_any_case_and_gives_none_for_labels_of_no_facet():
    for facet, names in FACETS.items():
        for name in names:
            assert facet_of(name) == facet == facet_of(name.upper()) == facet_of(name.title())
    for other in ("other_label", "title", "", None, "method label"):
        assert facet_of(other) is None  # documented: no facet, not an error (the title sentence has label "title")


LABELS = ["background_label", "Objective_Label", "method_label", "METHOD_LABEL", "result_label", "other_label"]


def test_selection_by_facet_equals_a_hand_computation():
    hand = {f: [i for i, lab in enumerate(LABELS) if lab.lower() in FACETS[f]] for f in FACETS}
    assert hand == {"background": [0, 1], "method": [2, 3], "result": [4]}
    for facet, positions in hand.items():
        assert resolve_selection(facet, LABELS, "p1") == positions
        assert resolve_selection(facet.upper(), LABELS, "p1") == positions
    assert resolve_selection("result,method,5,2", LABELS, "p1") == [4, 2, 3, 5]  # order of the items, deduplicated
    assert resolve_selection("objective_label", LABELS) == [1]  # a stored label by name selects that label only
    assert resolve_selection(["Other_Label", np.int64(0)], LABELS) == [5, 0]
    assert selection_facet("objective") == "background" and selection_facet("method,0") is None


def test_an_empty_selection_is_refused_naming_the_paper_and_the_facet():
    with pytest.raises(ValueError, match=r"paper 'p7' has no 'result' sentence.*method_label"):
        resolve_selection("result", ["method_label", "background_label"], "p7")
    with pytest.raises(ValueError, match=r"paper 'p7' has no facet labels.*'method'"):
        resolve_selection("method", None, "p7")
    with pytest.raises(ValueError, match=r"paper 'p7'.*empty"):
        resolve_selection("", LABELS, "p7")
    with pytest.raises(ValueError, match=r"paper 'p7'"):
        resolve_selection([2.0], LABELS, "p7")


IDS = ["a", "bé", "c😀"]
TITLES = ["T\u2028x", "", "\U0001F600 title"]
SENTS = [["s\ud800 lone", "\x0c form feed", "\x85 next line"], ["\u2029 ¶", 'q " \\ b'], ["only"]]
LABS = [["method_label", "Result", "x"], None, ["background_label"]]


@pytest.mark.parametrize("texts", ["memory", "disk"])
def test_papers_file_round_trips_unicode_identically(tmp_path, texts):
    path = tmp_path / "papers.jsonl"
    write_index_papers(path, IDS, TITLES, SENTS, LABS)
    ids, titles, sentences, labels = read_index_papers(path, texts)
    assert ids == IDS and titles == TITLES and labels == LABS
    assert [sentences[i] for i in range(len(IDS))] == SENTS and list(sentences) == SENTS


@pytest.mark.parametrize("damage", ["truncated", "bad_utf8", "not_a_record", "labels_count", "repeated_id"])
def test_a_damaged_or_truncated_papers_file_is_refused_naming_it(tmp_path, damage):
    path = tmp_path / "papers.jsonl"
    write_index_papers(path, IDS, TITLES, SENTS, LABS)
    raw = path.read_bytes()
    lines = raw.splitlines(keepends=True)
    damaged = {
        "truncated": raw[:-7],
        "bad_utf8": raw.replace(b"only", b"\xffnly"),
        "not_a_record": lines[0] + b"[1, 2]\n",
        "labels_count": raw.replace(b'"labels": ["background_label"]', b'"labels": []'),
        "repeated_id": lines[0] + lines[0],
    }[damage]
    assert damaged != raw
    path.write_bytes(damaged)
    for texts in ("memory", "disk"):
        with pytest.raises(IndexFormatError, match="papers.jsonl:[0-9]+: not an index paper record"):
            read_index_papers(path, texts)


def test_disk_texts_refuse_a_file_truncated_after_the_load_naming_it(tmp_path):
    path = tmp_path / "papers.jsonl"
    write_index_papers(path, IDS, TITLES, SENTS, LABS)
    _, _, sentences, _ = read_index_papers(path, "disk")
    assert sentences[0] == SENTS[0]
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(IndexFormatError, match="papers.jsonl.*truncated"):
        sentences[2]
    assert sentences[0] == SENTS[0]
