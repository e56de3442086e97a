"""Round 58: a defect sweep of aspire.retrieval.lexical, .rerank and .crossencoder. `best_positions` (the ranking of
the BM25 and 'whole' stages and of `Searcher.exhaustive`) returned no paper at all, without a word, when the n-th
place fell on a NaN score; `pair_scores` handed a query or document text that is not a string to the model, whose
error named neither."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aspire.retrieval.crossencoder import pair_scores
from aspire.retrieval.lexical import best_positions
from aspire.scoring.crossencoder import CrossEncoderReranker
from aspire.search import Searcher
from tests.test_cross_stage import text_index, text_query


@pytest.mark.parametrize("n", [1, 2, 3, 10])
def test_a_nan_score_is_refused_naming_its_position_not_every_paper_dropped(n):
    scores = np.array([1.0, np.nan, 2.0], dtype=np.float32)
    with pytest.raises(ValueError, match=r"1 candidate\(s\) score NaN \(positions \[1\]\)"):
        best_positions(scores, np.arange(3), n)  # n=3 once returned [] (the 3rd best was NaN, equal to nothing)
    np.testing.assert_array_equal(best_positions(scores, np.array([0, 2]), n), [2, 0][:n])  # NaN left out: ranked


def test_exhaustive_search_with_a_nan_distance_says_so_instead_of_returning_nothing(monkeypatch):
    searcher = Searcher(text_index())  # five papers
    distances = torch.tensor([0.0, float("nan"), 0.2, 0.3, 0.4])
    monkeypatch.setattr(Searcher, "_scan_min_l2", lambda self, query, rows: distances)
    with pytest.raises(ValueError, match=r"positions \[1\]"):
        searcher.exhaustive(text_query(), "minl2", k=5)  # once ([], []): no hit and no warning
    distances[1] = 0.1
    papers, scores = searcher.exhaustive(text_query(), "minl2", k=5)
    assert papers.tolist() == [0, 1, 2, 3, 4] and np.allclose(scores, -distances.numpy())


@pytest.mark.parametrize("queries,texts,message", [
    ({"q1": "neural text"}, {"d1": "a method", "d2": None}, "query q1: document d2 has no text for the cross-encoder "
                                                           r"\(a NoneType, not a string\)"),
    ({"q1": "neural text"}, {"d1": "a method", "d2": ["two", "sentences"]}, r"query q1: document d2 .*\(a list, "),
    ({"q1": None}, {"d1": "a method", "d2": "the task"}, "query q1: its text is a NoneType, not a string"),
    ({"q1": "neural text"}, {"d1": "a method"}, "query q1: document d2 has no text for the cross-encoder$"),
])
def test_pair_scores_names_the_query_or_document_whose_text_is_not_a_string(tiny_cross_encoder_dir, queries, texts,
                                                                            message):
    reranker = CrossEncoderReranker(str(tiny_cross_encoder_dir), max_length=64)
    first = {"q1": [("d1", 2.0), ("d2", 1.0)]}
    with pytest.raises(ValueError, match=message):  # once the model's "Unsupported input type: NoneType"
        pair_scores(queries, texts, first, reranker, 2)
    assert reranker.pairs_scored == 0  # refused before the model's pass
    scored = pair_scores({"q1": "neural text"}, {"d1": "a method", "d2": "the task"}, first, reranker, 2)
    assert list(scored) == ["q1"] and list(scored["q1"]) == ["d1", "d2"]
    assert all(np.isfinite(v) for v in scored["q1"].values()) and reranker.pairs_scored == 2
