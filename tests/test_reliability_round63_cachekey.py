"""Round 63: an option spelt at its default is the option left out, in the vector cache and in an ensemble.

The cache key (`aspire.evaluate.encode.cache_entry_key`) took the encode options as written, so `{pooling: mean}`
and `{}` made two entries and the second run encoded the same vectors again; options at their default are now
dropped from the key (not filled in: an entry written without options keeps its name). An ensemble member with the
hybrid's default weights spelt out was another member than one with `weights: null`, fused twice."""

from __future__ import annotations

import pytest

from aspire.evaluate.cache import cache_path
from aspire.evaluate.encode import cache_entry_key, encode_papers
from aspire.evaluate.ensemble import load_ensemble
from tests.test_reliability_round18_evalrun import PAPERS
from tests.test_reliability_round33_indexbuild import StubEncoder
from tests.test_reliability_round57_ensemble import _write
from tests.test_reliability_round62_member import SAME


def _encode_twice(tmp_path, first: dict, second: dict) -> tuple[StubEncoder, list[dict]]:
    encoder, record = StubEncoder(), []
    for options in (first, second):
        encode_papers(encoder, PAPERS, "abstract", tmp_path, 2, options, record)
    return encoder, record


@pytest.mark.parametrize("spelt", [{"pooling": "mean"}, {"max_length": 0, "joiner": None},
                                   {"normalize": False, "pooling": "mean", "max_length": 0, "joiner": None}])
def test_options_at_their_default_read_the_entry_encoded_without_them(tmp_path, spelt):
    encoder, record = _encode_twice(tmp_path, {}, spelt)
    assert len(encoder.calls) == 1  # the second run a cache hit: encoded once
    assert [r["from_cache"] for r in record] == [False, True]
    assert record[0]["cache_entry"] == record[1]["cache_entry"] == cache_path(tmp_path, "stub-v1", "abstract", {},
                                                                               PAPERS).name  # the key it always had
    assert [p.name for p in tmp_path.glob("*.pt")] == [record[0]["cache_entry"]]


def test_the_entry_spelt_at_its_default_is_read_by_a_run_that_leaves_the_option_out(tmp_path):
    encoder, record = _encode_twice(tmp_path, {"pooling": "mean", "normalize": False}, {})
    assert len(encoder.calls) == 1 and record[1]["from_cache"] is True


@pytest.mark.parametrize("other", [{"pooling": "cls"}, {"normalize": True}, {"max_length": 128}, {"joiner": " "},
                                   {"pooling": "mean", "normalize": True}])
def test_an_option_off_its_default_still_gets_its_own_entry(tmp_path, other):
    encoder, record = _encode_twice(tmp_path, {}, other)
    assert len(encoder.calls) == 2 and encoder.calls[1][2] == other  # encoded again, with the options as given
    assert [r["from_cache"] for r in record] == [False, False]
    assert record[0]["cache_entry"] != record[1]["cache_entry"]


@pytest.mark.parametrize("encoding, options, key", [
    ("abstract", {"pooling": "mean", "joiner": " "}, {"joiner": " "}),
    ("independent", {"normalize": False, "max_length": 64}, {"max_length": 64}),
    ("independent", {"joiner": None}, {"joiner": None}),  # not an independent option: kept, for its call to refuse
    ("abstract", {"max_length": False, "normalize": 0}, {"max_length": False, "normalize": 0}),  # not the defaults
    ("pass", {}, {}),
])
def test_the_key_drops_only_the_encodings_options_at_their_default_and_type(encoding, options, key):
    assert cache_entry_key(encoding, options) == ("contextual" if encoding == "pass" else encoding, key)


def test_the_hybrids_default_weights_spelt_out_are_weights_null(tmp_path):
    for spelt in ("{weights: {whole: 1.0, facet: 1.0}}", "{weights: {facet: 1, whole: 1}, tau: 1.0}"):
        path = _write(tmp_path, ["{name: a, model: minilm, scorer: hybrid}",
                                 f"{{name: b, model: minilm, scorer: hybrid, scorer_options: {spelt}}}"])
        with pytest.raises(ValueError, match=SAME):
            load_ensemble(path)
    path = _write(tmp_path, ["{name: a, model: minilm, scorer: hybrid, scorer_options: {weights: null}}",
                             "{name: b, model: minilm, scorer: hybrid, scorer_options: {weights: {whole: 1, facet: 0.5}}}"])
    assert [m.name for m in load_ensemble(path).members] == ["a", "b"]
