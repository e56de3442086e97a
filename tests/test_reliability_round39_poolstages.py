"""Round 39: the search pipeline's stages on judged pools (`aspire.evaluate.pool_stages`) and the pool ranking
(`aspire.evaluate.rank.rank_pools`), checked on tiny pools against hand computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.benchmarks.pools import PoolSet, ranked_path, write_ranked
from aspire.data.papers import Paper
from aspire.evaluate.options import Stages
from aspire.evaluate.pool_stages import bm25_rankings, read_scored_pool_set, run_stages
from aspire.evaluate.rank import get_eval_scorer, rank_pools
from aspire.retrieval.crossencoder import RerankOptions
from aspire.scoring.lexical import BM25Index, paper_text

TEXTS = {"q1": "graph citation networks", "q2": "optimal transport text", "a": "graph networks of papers",
         "b": "optimal transport plans", "c": "image classification", "d": "citation counts"}
PAPERS = {p: Paper(p, f"title {p}", [t]) for p, t in TEXTS.items()}
POOLS = PoolSet("toy", {"": {"q1": {"a": 1, "b": 0, "c": 0}, "q2": {"b": 1, "c": 0, "d": 0}}})


def _dense(folder, exp, ranked):
    write_ranked(ranked_path(folder, "toy", exp, ""), ranked)


def test_a_ranked_file_missing_a_pooled_query_is_refused_not_dropped(tmp_path):
    # a stale run's file ranking q1 alone: q2 was once dropped from the stage's rankings (and the rerank's) unsaid
    _dense(tmp_path, "m", {"q1": [("a", 0.9), ("b", 0.5), ("c", 0.1)]})
    with pytest.raises(ValueError, match=r"missing \['q2'\]"):
        read_scored_pool_set(POOLS, tmp_path, "m")
    rerank = Stages(rerank=RerankOptions(model=str(tmp_path / "no-such-cross-encoder")))
    with pytest.raises(ValueError, match=r"missing \['q2'\]"):  # refused before any cross-encoder is loaded
        run_stages(POOLS, PAPERS, {}, tmp_path, "m-ce", "m", rerank)


def test_a_ranked_file_of_other_pools_is_refused(tmp_path):
    # another pool set's file: q2 ranks a (not pooled) and lacks d; and a file with a query the set does not hold
    _dense(tmp_path, "m", {"q1": [("a", 0.9), ("b", 0.5), ("c", 0.1)], "q2": [("b", 0.9), ("a", 0.5), ("c", 0.1)]})
    with pytest.raises(ValueError, match=r"query q2: ranks other candidates than its pool: missing \['d'\], "
                                         r"not pooled \['a'\]"):
        read_scored_pool_set(POOLS, tmp_path, "m")
    _dense(tmp_path, "m", {"q1": [("a", 0.9), ("b", 0.5), ("c", 0.1)], "q2": [("b", 0.9), ("d", 0.5), ("c", 0.1)],
                           "q9": [("a", 1.0)]})
    with pytest.raises(ValueError, match=r"not pooled \['q9'\]"):
        read_scored_pool_set(POOLS, tmp_path, "m")


def test_a_complete_file_reads_back_as_written(tmp_path):
    ranked = {"q1": [("a", 0.9), ("b", 0.5), ("c", 0.1)], "q2": [("d", 0.7), ("b", 0.2), ("c", -1.0)]}
    _dense(tmp_path, "m", ranked)
    assert read_scored_pool_set(POOLS, tmp_path, "m") == {"": ranked}


def test_bm25_ranks_every_pool_candidate_once_with_the_index_scores_and_ties_in_pool_order():
    pools = PoolSet("toy", {"": {"q1": {"c": 0, "a": 1, "b": 0, "d": 0}, "q2": {"d": 0, "c": 0, "b": 1}}})
    ranked = bm25_rankings(pools, PAPERS, {})
    ids = sorted(pools.paper_ids())
    index = BM25Index([paper_text(PAPERS[p]) for p in ids], ids, 1.25, 0.75)
    for qid, pool in pools.pools[""].items():
        row = index.scores([paper_text(PAPERS[qid])])[0]
        want = sorted(pool, key=lambda c: (-row[ids.index(c)], list(pool).index(c)))  # best first, ties: pool order
        assert [c for c, _ in ranked[""][qid]] == want
        assert sorted(c for c, _ in ranked[""][qid]) == sorted(pool)  # none dropped, none added, the query not in
        np.testing.assert_allclose([s for _, s in ranked[""][qid]], [row[ids.index(c)] for c in want], rtol=1e-6)
    # q2's "d" and "c" share no word with it: a zero-score tie kept in pool order
    assert [c for c, _ in ranked[""]["q2"]][1:] == ["d", "c"]


def test_fusion_stage_equals_the_hand_computed_weighted_z_scores(tmp_path):
    dense = {"q1": [("c", 3.0), ("a", 2.0), ("b", -1.0)], "q2": [("b", 0.5), ("d", 0.25), ("c", 0.0)]}
    _dense(tmp_path, "m", dense)
    alpha = 0.7
    rankings, info = run_stages(POOLS, PAPERS, {}, tmp_path, "m-bm25-a0.7", "m", Stages(bm25=True, alpha=alpha))
    bm25 = bm25_rankings(POOLS, PAPERS, {})[""]
    fused = read_scored_pool_set(POOLS, tmp_path, "m-bm25-a0.7")[""]
    for qid, pool in POOLS.pools[""].items():
        z = lambda d: {c: (s - np.mean(list(d.values()))) / np.std(list(d.values())) for c, s in d.items()}  # noqa: E731
        zd, zb = z(dict(dense[qid])), z(dict(bm25[qid]))
        want = {c: alpha * zd[c] + (1 - alpha) * zb[c] for c in pool}
        got = dict(fused[qid])
        assert set(got) == set(pool)
        np.testing.assert_allclose([got[c] for c in pool], [want[c] for c in pool], rtol=1e-9, atol=1e-12)
        assert rankings[""][qid] == sorted(pool, key=lambda c: -want[c])
    assert info["fusion"] == {"method": "z", "alpha_dense": alpha, "runs": ["m", "bm25"]}


def test_rank_pools_equals_brute_force_min_l2_with_ties_in_pool_order():
    gen = torch.Generator().manual_seed(0)
    emb = torch.randn(5, 3, 4, generator=gen)
    mask = torch.ones(5, 3, dtype=torch.bool)
    mask[2, 2] = False
    emb[3] = emb[1]  # c ties a exactly
    batch = DocBatch(emb, mask, ["q", "a", "b", "c", "d"])
    pool = ["d", "c", "b", "a"]
    ranked = rank_pools(batch.index([0]), batch, {"q": pool}, get_eval_scorer("minl2"))["q"]
    brute = {}
    for i, pid in enumerate(batch.paper_ids[1:], 1):
        brute[pid] = -min(float(torch.dist(x, y)) for x in emb[0][mask[0]] for y in emb[i][mask[i]])
    want = sorted(pool, key=lambda c: (-round(brute[c], 5), pool.index(c)))
    assert [c for c, _ in ranked] == want
    assert want.index("c") < want.index("a")  # the tie, in pool order
    np.testing.assert_allclose([s for _, s in ranked], [brute[c] for c in want], rtol=1e-5)
