"""Round 59: three small leftovers. `Searcher.exhaustive` passed on `best_positions`' NaN error, which names
positions alone, not the papers' ids nor the query; `rerank_texts` scored every pair of a run ranking a query
without a text and then failed with "queries have no cross-encoder scores", and `pair_scores` took any `top_n`;
`cached_encode_entry` said an entry was "removed by another run" when the cache folder itself had gone."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
import torch

from aspire.retrieval.crossencoder import RerankOptions, pair_scores, rerank_texts
from aspire.search import Searcher
from tests.test_cross_stage import text_index, text_query
from tests.test_reliability_round13_evalcache import PAPERS, _encode


def test_exhaustive_search_names_the_query_and_the_paper_ids_scoring_nan(monkeypatch):
    searcher = Searcher(text_index())  # five papers P0 .. P4
    distances = torch.tensor([0.0, float("nan"), 0.2, float("nan"), 0.4])
    monkeypatch.setattr(Searcher, "_scan_min_l2", lambda self, query, rows: distances)
    with pytest.raises(ValueError, match=r"exhaustive 'minl2' search for query 'q': 2 paper\(s\) score NaN "
                                         r"\(ids \['P1', 'P3'\], positions \[1, 3\]\)"):  # once positions alone
        searcher.exhaustive(text_query(), "minl2", k=5)
    with pytest.raises(ValueError, match=r"1 paper\(s\) score NaN \(ids \['P3'\], positions \[3\]\)"):
        searcher.exhaustive(text_query(), "minl2", k=5, exclude=["P1"])  # an excluded paper is not named
    papers, scores = searcher.exhaustive(text_query(), "minl2", k=3, exclude=["P1", "P3"])
    assert papers.tolist() == [0, 2, 4] and np.allclose(scores, [0.0, -0.2, -0.4])


class _CountingReranker:
    """A stand-in cross-encoder: each pair scores 0, and the pairs it was given are kept."""

    def __init__(self):
        self.pairs = []

    def score_pairs(self, pairs):
        self.pairs.extend(pairs)
        return np.zeros(len(pairs))


def test_rerank_texts_names_a_ranked_query_without_a_text_before_loading_the_model(tmp_path):
    run = {"q1": [("d1", 2.0), ("d2", 1.0)], "q2": [("d1", 1.0)]}
    options = RerankOptions(model=str(tmp_path / "no-model"), top_n=2)  # loading it would fail otherwise
    with pytest.raises(ValueError, match=r"query q2 is ranked in the run but has no query text to re-rank with "
                                         r"\(1 of 2 ranked queries have none, e\.g\. \['q2'\]\)"):
        rerank_texts({"q1": "neural text"}, {"d1": "a method", "d2": "the task"}, run, options)


@pytest.mark.parametrize("top_n", [0, -1, 2.0, True, "2", None])
def test_pair_scores_refuses_a_top_n_that_is_no_whole_number_of_one_or_more(top_n):
    reranker = _CountingReranker()
    first = {"q1": [("d1", 2.0), ("d2", 1.0)]}
    texts = {"d1": "a method", "d2": "the task"}
    with pytest.raises(ValueError, match=rf"pair_scores: top N must be a whole number >= 1, got {top_n!r}"):
        pair_scores({"q1": "neural text"}, texts, first, reranker, top_n)  # once scored 0, 1, 2 pairs or a TypeError
    assert reranker.pairs == []
    assert pair_scores({"q1": "neural text"}, texts, first, reranker, np.int64(1)) == {"q1": {"d1": 0.0}}


def test_a_cache_folder_removed_mid_write_is_said_so_not_blamed_on_another_run(tmp_path, monkeypatch, caplog):
    from aspire.evaluate import cache

    real = cache.write_record
    folder = tmp_path / "vectors"

    def gone(path, *args, **kwargs):  # the whole cache folder removed while the entry was written
        shutil.rmtree(path.parent)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(cache, "write_record", gone)
    with caplog.at_level(logging.WARNING, logger="aspire"):
        batch, hit, path = cache.cached_encode_entry(_encode, PAPERS, "fp", "contextual", {}, folder)
    assert (hit, path) == (False, None) and torch.equal(batch.emb, _encode(PAPERS).emb)  # the run carries on
    messages = [r.getMessage() for r in caplog.records if "not cached" in r.getMessage()]
    assert messages == [f"vectors not cached: the cache folder {folder} was removed while "
                        f"{cache.cache_path(folder, 'fp', 'contextual', {}, PAPERS).name} was written"]

    def raced(path, *args, **kwargs):  # another run removed the entry alone: that reason is kept
        cache.remove_cache_file(path)
        return real(path, *args, **kwargs)

    caplog.clear()
    monkeypatch.setattr(cache, "write_record", raced)
    with caplog.at_level(logging.WARNING, logger="aspire"):
        assert cache.cached_encode_entry(_encode, PAPERS, "fp", "contextual", {}, folder)[1:] == (False, None)
    assert any("was removed by another run before its checksum was recorded" in r.getMessage()
               for r in caplog.records)
