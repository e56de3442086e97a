"""Round 49, `aspire.search` (correctness sweep).

Fixed: `Searcher.exhaustive` took a `chunk` below 1 silently: a negative one scanned nothing and returned papers
ranked by -inf ("minl2") or by the uninitialised memory of `torch.empty` (other scorers); 0 crashed in `range`.
Checked as they are: on a flat index the hits equal a brute-force ranking of every other paper by the chosen
scorer (min-L2, OT), the query paper left out, k honoured; papers tied on min-L2 come back lower position first;
a facet selection equals the selection of its labels' positions."""

from __future__ import annotations

import numpy as np
import pytest
from test_reliability_round11_search import FLAT, random_index

from aspire.index import EncodedCorpus, SentenceIndex
from aspire.index.config import SearchConfig
from aspire.search import Searcher


@pytest.fixture(scope="module")
def searcher() -> Searcher:
    return Searcher(random_index(P=25, D=6, seed=3), SearchConfig())


# ---- fixed: a chunk that is no positive integer is refused -----------------------------------------------------

@pytest.mark.parametrize("method", ["minl2", "ot"])
@pytest.mark.parametrize("chunk", [-1, 0, 2.5, True])
def test_exhaustive_refuses_a_chunk_that_is_no_positive_integer(searcher, method, chunk):
    # chunk=-1 gave papers [0, 2, 3] with scores -inf (minl2) or denormal garbage (ot)
    with pytest.raises(ValueError, match=r"chunk must be a positive integer, got"):
        searcher.exhaustive(searcher.query_from_index("p1"), method, k=3, chunk=chunk)


@pytest.mark.parametrize("method", ["minl2", "ot"])
def test_exhaustive_with_a_small_chunk_equals_one_paper_at_a_time(searcher, method):
    q = searcher.query_from_index("p4")
    brute = brute_force(searcher, q, method, "p4")[:5]
    papers, scores = searcher.exhaustive(q, method, k=5, chunk=1)
    assert [searcher.index.paper_ids[p] for p in papers] == [pid for pid, _ in brute]
    np.testing.assert_allclose(scores, [v for _, v in brute], atol=1e-5)


# ---- checked: hits equal a brute-force ranking ---------------------------------------------------------------

def brute_force(searcher: Searcher, query, method: str, excluded: str) -> list[tuple[str, float]]:
    index = searcher.index
    out = [(index.paper_ids[p], float(searcher.scorer(method, searcher.config).score(query, index.gather([p], texts=False))[0, 0]))
           for p in range(index.n_papers) if index.paper_ids[p] != excluded]
    return sorted(out, key=lambda kv: -kv[1])  # stable: ties keep index order


@pytest.mark.parametrize("rerank", ["none", "minl2", "ot"])
def test_flat_hits_equal_a_brute_force_ranking_without_the_query(searcher, rerank):
    q = searcher.query_from_index("p4")
    hits = searcher.search(q, k=7, rerank=rerank, shortlist=24 if rerank != "none" else None)
    brute = brute_force(searcher, q, "minl2" if rerank == "none" else rerank, "p4")[:7]
    assert len(hits) == 7 and "p4" not in [h.paper_id for h in hits]
    assert [h.paper_id for h in hits] == [pid for pid, _ in brute]
    np.testing.assert_allclose([h.score for h in hits], [v for _, v in brute], atol=1e-5)


def test_papers_tied_on_min_l2_come_back_lower_position_first():
    rng = np.random.default_rng(0)
    base = rng.standard_normal((3, 4)).astype(np.float32)
    vecs = [base[:2]] + [base[2:3]] * 4 + [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(3)]
    lengths = [len(v) for v in vecs]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    P = len(vecs)
    corpus = EncodedCorpus(np.concatenate(vecs), offsets, [f"p{i}" for i in range(P)], [f"t{i}" for i in range(P)],
                           [[f"s{j}" for j in range(n)] for n in lengths], labels=[["method_label"] * n for n in lengths])
    s = Searcher(SentenceIndex.build(corpus, FLAT, "fp"), SearchConfig())
    q = s.query_from_index("p0")
    tied = {"p1", "p2", "p3", "p4"}  # one identical sentence each
    for rerank in ["none", "minl2"]:
        ids = [h.paper_id for h in s.search(q, k=7, rerank=rerank, shortlist=7 if rerank != "none" else None)]
        assert [i for i in ids if i in tied] == ["p1", "p2", "p3", "p4"]
    papers, _ = s.exhaustive(q, "minl2", k=7)
    assert [s.index.paper_ids[p] for p in papers if s.index.paper_ids[p] in tied] == ["p1", "p2", "p3", "p4"]


def test_a_facet_selection_equals_its_labels_positions(searcher):
    for pid in ["p0", "p4", "p7"]:
        labels = searcher.index.labels[searcher.index.position(pid)]
        for facet in ["background", "method", "result"]:
            positions = [i for i, lab in enumerate(labels) if lab == f"{facet}_label"]
            if not positions:
                with pytest.raises(ValueError, match=f"no '{facet}' sentence"):
                    searcher.query_from_index(pid, facet)
                continue
            by_facet = searcher.query_from_index(pid, facet)
            by_position = searcher.query_from_index(pid, positions)
            assert by_facet.mask.tolist() == by_position.mask.tolist()
            assert by_facet.mask[0].nonzero()[:, 0].tolist() == positions
