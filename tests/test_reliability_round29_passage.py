"""Round 29: max-passage windows, the OT top-k and the index's BM25 checked against brute-force references.

- `aspire.scoring.passage`: every window of the documented size over the selected sentences, by a Python loop
  (a paper shorter than the window, window 1, a window as long as the paper and longer).
- `aspire.scoring.ot_topk`: the k nearest and their distances equal scoring every candidate with `OTScorer` and
  taking the k best (ties across the k-th place, k past the pool); a non-finite or missing k is refused by name;
  a float or infinite memory budget (documented: a number > 0) works; an empty pool of no columns is no crash.
- `aspire.index.lexical`: an index's BM25 scores equal BM25 over each paper's title + abstract and a hand-written
  Lucene BM25 loop, whether the encoder stored the title as sentence 0 or not (recorded or guessed).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.papers import Paper
from aspire.encoders.contextual import paper_sentences
from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.corpus import EncodedCorpus
from aspire.index.lexical import index_bm25
from aspire.scoring import cross_l2_cost
from aspire.scoring.lexical import BM25Index, paper_text
from aspire.scoring.ot_topk import ot_top_k_dist
from aspire.scoring.passage import MaxPassageScorer, maxpassage_match, pairwise_maxpassage_match
from aspire.scoring.scorers import OTScorer

OT = dict(tau=1.0, eps=0.05, tol=1e-4)


# ---------------------------------------------------------------- max passage


def brute_passage(q, qm, c, cm, window):
    """(1 - best cosine, its start among the selected sentences) by a loop over every window, in float64."""
    qv = q[qm].double().mean(0)
    sel = c[cm].double()
    w = min(window, len(sel))
    best, where = -math.inf, None
    for s in range(len(sel) - w + 1):
        p = sel[s : s + w].mean(0)
        cos = float(qv @ p / (qv.norm() * p.norm()))
        if cos > best:
            best, where = cos, s
    return 1.0 - best, where


@pytest.mark.parametrize("window", [1, 2, 3, 9, 40])
def test_maxpassage_equals_a_loop_over_every_window_of_the_selected_sentences(window):
    g = torch.Generator().manual_seed(window)
    Bq, Bc, S, T, D = 3, 6, 5, 9, 8
    q = torch.randn(Bq, S, D, generator=g)
    c = torch.randn(Bc, T, D, generator=g) + 2 * torch.randn(D, generator=g)  # a shared direction, as encoders give
    qm = torch.rand(Bq, S, generator=g) < 0.6
    qm[:, 1] = True
    cm = torch.rand(Bc, T, generator=g) < 0.5  # aspect-like selections, not a prefix
    cm[:, 4] = True
    cm[0] = False
    cm[0, 7] = True  # one selected sentence: shorter than any window but 1
    cm[1] = True  # all nine: window 9 is the whole paper, 40 past it
    m = maxpassage_match(q, qm, c, cm, window)
    for i in range(Bq):
        for j in range(Bc):
            dist, start = brute_passage(q[i], qm[i], c[j], cm[j], window)
            assert float(m.dist[i, j]) == pytest.approx(dist, abs=1e-5), (i, j)
            assert int(m.start[i, j]) == start, (i, j)
    pair = pairwise_maxpassage_match(q, qm, c[:Bq], cm[:Bq], window)
    for i in range(Bq):
        dist, start = brute_passage(q[i], qm[i], c[i], cm[i], window)
        assert float(pair.dist[i]) == pytest.approx(dist, abs=1e-5) and int(pair.start[i]) == start
    # the scorer's similarity is the best passage's cosine minus 1
    qb = DocBatch.from_list([q[i][qm[i]] for i in range(Bq)], [f"q{i}" for i in range(Bq)],
                            [[f"s{k}" for k in range(int(qm[i].sum()))] for i in range(Bq)])
    cb = DocBatch.from_list([c[j][cm[j]] for j in range(Bc)], [f"c{j}" for j in range(Bc)],
                            [[f"s{k}" for k in range(int(cm[j].sum()))] for j in range(Bc)])
    want = torch.tensor([[brute_passage(q[i], qm[i], c[j], cm[j], window)[0] for j in range(Bc)] for i in range(Bq)],
                        dtype=torch.float64)
    torch.testing.assert_close(MaxPassageScorer(window).score(qb, cb).double(), -want, rtol=0, atol=1e-5)


# ---------------------------------------------------------------- OT top-k


def _pool(P=40, S=4, T=6, D=8, seed=3):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(S, D, generator=g)
    c = torch.randn(P, T, D, generator=g)
    lengths = torch.randint(1, T + 1, (P,), generator=g)
    return q, c, lengths


def test_ot_top_k_equals_scoring_every_candidate_with_the_ot_scorer_then_taking_k():
    q, c, lengths = _pool()
    P, T = len(c), c.shape[1]
    near = (q[:1] + 0.05).expand(T, -1)  # three identical candidates, all near the query: a tie at the top
    for j in (5, 7, 9):
        c[j], lengths[j] = near, 3
    c_mask = torch.arange(T)[None] < lengths[:, None]
    cost = cross_l2_cost(q[None], c)[0]
    q_mask = torch.ones(P, len(q), dtype=torch.bool)
    qb = DocBatch.from_list([q], ["q"], [[f"s{i}" for i in range(len(q))]])
    cb = DocBatch.from_list([c[j, : lengths[j]] for j in range(P)], [f"c{j}" for j in range(P)],
                            [[f"s{i}" for i in range(int(lengths[j]))] for j in range(P)])
    full = OTScorer(**OT).dist(qb, cb)[0]  # (P,) every candidate solved
    assert full[5] == full[7] == full[9] and int(torch.argsort(full)[0]) in (5, 7, 9)
    for k in (1, 2, 3, 8, P, P + 25):  # 1 and 2 split the three tied candidates
        res = ot_top_k_dist(cost, q_mask, c_mask, k, **OT)
        top = torch.argsort(full, stable=True)[: min(k, P)]
        assert res.exact[top].all() and res.exact[[5, 7, 9]].all(), k
        torch.testing.assert_close(res.dist[res.solved], full[res.solved], rtol=1e-6, atol=1e-6)
        ours = torch.argsort(torch.where(res.exact, res.dist, torch.inf), stable=True)[: min(k, P)]
        torch.testing.assert_close(res.dist[ours], full[top], rtol=1e-6, atol=1e-6)  # the same k distances
        left = ~res.exact
        assert (res.dist[left] > full[top].max()).all() and (res.dist[left] <= full[left] + 1e-6).all()
        if k >= P:
            assert res.exact.all()


@pytest.mark.parametrize("k", [0, -1, 2.5, True, "3", None, float("nan"), float("inf")])
def test_ot_top_k_refuses_a_k_that_is_no_count_by_name(k):
    q, c, lengths = _pool(P=6)
    cost = cross_l2_cost(q[None], c)[0]
    masks = torch.ones(6, len(q), dtype=torch.bool), torch.arange(c.shape[1])[None] < lengths[:, None]
    with pytest.raises(ValueError, match="OT top-k needs an integer k >= 1"):  # NaN / inf / None: another error
        ot_top_k_dist(cost, *masks, k, **OT)


@pytest.mark.parametrize("budget", [float(1 << 28), 5000.0, float("inf")])
def test_ot_top_k_takes_a_float_or_infinite_memory_budget(budget):
    q, c, lengths = _pool(P=60)
    cost = cross_l2_cost(q[None], c)[0]
    q_mask, c_mask = torch.ones(60, len(q), dtype=torch.bool), torch.arange(c.shape[1])[None] < lengths[:, None]
    want = ot_top_k_dist(cost, q_mask, c_mask, 2, budget_bytes=int(min(budget, 1 << 40)), **OT)
    got = ot_top_k_dist(cost, q_mask, c_mask, 2, budget_bytes=budget, **OT)  # a float step failed slicing
    assert torch.equal(got.exact, want.exact)
    torch.testing.assert_close(got.dist, want.dist, rtol=1e-6, atol=1e-6)


def test_ot_top_k_of_an_empty_pool_without_columns_is_empty():
    for T in (0, 5):  # what `shortlist_cost` gives for no paper has T = 0 (an IndexError from amin)
        res = ot_top_k_dist(torch.zeros(0, 3, T), torch.ones(0, 3, dtype=torch.bool), torch.ones(0, T, dtype=torch.bool),
                            4, **OT)
        assert res.dist.shape == (0,) and res.solved.shape == (0,) and res.plan.shape == (0, 3, T)
        assert res.exact.shape == (0,) and res.solved.dtype == torch.long


# ---------------------------------------------------------------- the index's BM25


def hand_bm25(docs: list[str], query: str, k1: float = 1.25, b: float = 0.75) -> np.ndarray:
    """Lucene BM25 (bm25s' default, as `aspire.scoring.lexical` documents it) with lower-cased words of 2+
    characters; the texts below hold no English stop word."""
    words = lambda t: re.findall(r"(?u)\b\w\w+\b", t.lower())  # noqa: E731
    toks = [words(d) for d in docs]
    avg = sum(map(len, toks)) / len(toks)
    out = np.zeros(len(docs))
    for w in set(words(query)) & {x for t in toks for x in t}:
        df = sum(w in t for t in toks)
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for i, t in enumerate(toks):
            tf = t.count(w)
            out[i] += idf * tf / (tf + k1 * (1 - b + b * len(t) / avg))
    return out


PAPERS = [
    Paper("a", "Graph Neural Networks", ["Graph networks learn.", "Message passing layers."]),
    Paper("b", "  ", ["Blank title paper about graphs.", "Café résumé naïve."]),
    Paper("c", "CAFÉ Study", ["CAFÉ study", "Transformers attention heads."]),  # opens with its own title
    Paper("d", "Sparse Retrieval", ["Lexical matching BM25 scoring.", "Inverted lists."]),
    Paper("e", "Ünïcode Words", ["Straße σίσυφος words."]),
]
QUERIES = ["graph networks", "café study", "CAFÉ", "bm25 lexical scoring", "straße words", "unknownword"]


@pytest.mark.parametrize("include_title, recorded", [(True, True), (True, None), (False, False), (False, None)])
def test_index_bm25_reads_each_paper_as_its_title_and_abstract(include_title, recorded):
    sents = [paper_sentences(p, include_title) for p in PAPERS]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sents])]).astype(np.int64)
    corpus = EncodedCorpus(np.random.default_rng(0).standard_normal((int(offsets[-1]), 4)).astype(np.float32), offsets,
                           [p.paper_id for p in PAPERS], [p.title for p in PAPERS], sents)
    index = SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp", "m",
                                include_title=recorded)
    got = index_bm25(index).scores(QUERIES)
    texts = [paper_text(p) for p in PAPERS]
    np.testing.assert_allclose(got, BM25Index(texts, list("abcde")).scores(QUERIES), rtol=1e-6)
    np.testing.assert_allclose(got, np.stack([hand_bm25(texts, q) for q in QUERIES]), rtol=1e-5, atol=1e-6)
    assert got[2, 2] > 0 and got[5].tolist() == [0.0] * 5  # case folded; a word no paper holds scores 0
