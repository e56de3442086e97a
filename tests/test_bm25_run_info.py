"""A run that scored with BM25 records every setting that moved its scores: k1 and b, and the stop words and Unicode
normal form its texts and queries were tokenised with (a run recorded before BM25 normalised with NFKC scored
otherwise, and its record did not say so)."""

from __future__ import annotations

import json

from aspire.evaluate.context2doc_run import run_context2doc
from aspire.evaluate.options import Stages
from aspire.evaluate.pool_stages import run_stages
from aspire.scoring.lexical import NORMALIZATION, STOPWORDS, BM25Index, default_settings
from tests.test_pool_stages import LABEL_TO_FACET, faceted  # noqa: F401  (the fixture)
from tests.test_reliability_round41_c2drun import tiny_text_bench

SETTINGS = {"k1": 1.25, "b": 0.75, "stopwords": "en", "normalization": "nfkc"}


def test_default_settings_are_an_index_s_own_settings():
    assert default_settings(1.25, 0.75) == SETTINGS
    assert BM25Index(["optimal transport", "citation graphs"], ["a", "b"], 0.9, 0.4).settings() == \
        default_settings(0.9, 0.4) == {**SETTINGS, "k1": 0.9, "b": 0.4}
    assert (STOPWORDS, NORMALIZATION) == ("en", "nfkc")


def test_a_pool_set_run_records_the_stop_words_and_normal_form(faceted, tmp_path):  # noqa: F811
    pool_set, papers = faceted
    _, info = run_stages(pool_set, papers, LABEL_TO_FACET, tmp_path, "b", None, Stages(bm25=True))
    assert {k: info["bm25"][k] for k in SETTINGS} == SETTINGS
    assert info["bm25"]["query_text"] == "the facet's sentences"


def test_a_context2doc_run_records_them_in_its_results(tmp_path):
    bench = tiny_text_bench()
    res = run_context2doc(bench, tmp_path, "bm25", stages=Stages(bm25=True), depth=len(bench.candidates))
    saved = json.loads((tmp_path / "results.json").read_text())
    assert res["bm25"] == saved["bm25"] == {**SETTINGS, "text": "title + abstract"}


def test_a_reviewer_run_records_them(tmp_path):
    from test_benchmarks import make_reviewer_set

    from aspire.benchmarks.reviewers import load_reviewer_set
    from aspire.evaluate.reviewer_run import run_reviewers

    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=2))
    res = run_reviewers(rset, None, [], tmp_path / "bm25", "bm25", stages=Stages(bm25=True))
    assert {k: res["bm25"][k] for k in SETTINGS} == SETTINGS
