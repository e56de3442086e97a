"""Max-over-passage scoring (issue 26, item 3a): the scorer against a brute-force loop, its known
answers at the window's extremes, its sign, and the search re-ranker mixing it with the first stage."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aspire.batch import DocBatch
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.scoring import get_scorer
from aspire.scoring.passage import passage_vectors
from aspire.search import Searcher


def _brute(q_emb, q_mask, c_emb, c_mask, window: int) -> torch.Tensor:
    """(Bq, Bc) best passage cosine, by loops over the selected sentences."""
    out = torch.empty(len(q_emb), len(c_emb))
    for i in range(len(q_emb)):
        q = q_emb[i][q_mask[i]].mean(0)
        for j in range(len(c_emb)):
            sents = c_emb[j][c_mask[j]]
            n = len(sents)
            starts = range(max(n - window + 1, 1))
            out[i, j] = max(float(F.cosine_similarity(q, sents[t: t + window].mean(0), dim=0)) for t in starts)
    return out


@pytest.mark.parametrize("window", [1, 2, 3, 7])
def test_maxpassage_equals_brute_force_with_gapped_masks(window):
    g = torch.Generator().manual_seed(window)
    q_emb, c_emb = torch.randn(3, 4, 6, generator=g), torch.randn(5, 6, 6, generator=g)
    q_mask = torch.rand(3, 4, generator=g) > 0.4
    c_mask = torch.rand(5, 6, generator=g) > 0.3  # gaps inside: an aspect selection, not only padding
    q_mask[:, 0] = c_mask[:, 1] = True
    scorer = get_scorer("maxpassage", window=window)
    got = scorer.score(DocBatch(q_emb, q_mask), DocBatch(c_emb, c_mask))
    torch.testing.assert_close(got, _brute(q_emb, q_mask, c_emb, c_mask, window) - 1.0, rtol=1e-5, atol=1e-5)
    pair = scorer.pairwise_score(DocBatch(q_emb[[0, 1, 2, 0, 1]], q_mask[[0, 1, 2, 0, 1]]), DocBatch(c_emb, c_mask))
    torch.testing.assert_close(pair, got[[0, 1, 2, 0, 1], torch.arange(5)])


def test_window_extremes_are_best_sentence_and_whole_mean():
    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(1, 2, 5, generator=g), torch.randn(2, 4, 5, generator=g)
    qm, cm = torch.ones(1, 2, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool)
    qv = q[0].mean(0)
    best_sentence = torch.stack([F.cosine_similarity(qv[None], c[j]).max() for j in range(2)])
    whole = F.cosine_similarity(qv[None], c.mean(1))
    one = get_scorer("maxpassage", window=1).score(DocBatch(q, qm), DocBatch(c, cm))[0]
    all_ = get_scorer("maxpassage", window=50).score(DocBatch(q, qm), DocBatch(c, cm))[0]
    torch.testing.assert_close(one, best_sentence - 1)
    torch.testing.assert_close(all_, whole - 1)


def test_sign_candidate_holding_the_query_passage_ranks_first():
    q = torch.tensor([[[1.0, 0.0, 0.0]]])
    near = torch.tensor([[0.0, 1.0, 0.0], [0.9, 0.1, 0.0]])  # a passage close to the query
    far = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    scores = get_scorer("maxpassage", window=1).score(DocBatch(q, torch.ones(1, 1, dtype=torch.bool)),
                                                       DocBatch.from_list([far, near], ["far", "near"]))
    assert scores[0, 1] > scores[0, 0]


def test_passage_vectors_and_bad_windows():
    emb = torch.arange(8.0).reshape(1, 4, 2)
    mask = torch.tensor([[True, False, True, True]])
    passages, valid = passage_vectors(emb, mask, 2)  # selected rows 0, 2, 3 -> windows (0, 2), (2, 3)
    assert valid.tolist() == [[True, True, False, False]]
    torch.testing.assert_close(passages[0, :2], torch.tensor([[2.0, 3.0], [5.0, 6.0]]))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="window"):
            get_scorer("maxpassage", window=bad)


# ---- the search re-ranker ------------------------------------------------------------------------------
@pytest.fixture
def searcher() -> Searcher:
    # P0 has the single sentence nearest the query (ANN's first), P1 a two-sentence passage pointing the query's way
    vecs = {"P0": [[1.0, 0.05], [-1.0, 0.0]], "P1": [[1.0, 0.2], [0.9, -0.2]], "P2": [[0.0, 1.0], [0.1, 1.0]],
            "P3": [[-1.0, -1.0], [-0.9, -1.0]]}
    vectors = np.array([v for vs in vecs.values() for v in vs], dtype=np.float32)
    corpus = EncodedCorpus(vectors, np.array([0, 2, 4, 6, 8]), list(vecs), [f"t {p}" for p in vecs],
                           [[f"{p} s{j}" for j in range(2)] for p in vecs])
    return Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))


def test_maxpassage_rerank_mixes_first_stage_by_beta_and_reports_its_score(searcher):
    query = DocBatch.from_list([torch.tensor([[1.0, 0.0]])], ["q"], [["query"]])
    first = searcher.search(query, k=4, shortlist=4)
    passage_only = searcher.search(query, k=4, shortlist=4, rerank="maxpassage",
                                   passage_beta=0.0, passage_window=2)
    first_only = searcher.search(query, k=4, shortlist=4, rerank="maxpassage",
                                 passage_beta=1.0, passage_window=2)
    assert [h.paper_id for h in first_only] == [h.paper_id for h in first]
    assert passage_only[0].paper_id == "P1" != first[0].paper_id
    own = {h.paper_id: h.stages["maxpassage"] for h in passage_only}
    assert own["P1"] == pytest.approx(float(F.cosine_similarity(torch.tensor([1.0, 0.0]), torch.tensor([0.95, 0.0]), 0)) - 1)
    assert set(passage_only[0].stages) == {"ann", "maxpassage"}
    with pytest.raises(ValueError, match="passage_beta"):
        searcher.search(query, rerank="maxpassage", passage_beta=1.5)
