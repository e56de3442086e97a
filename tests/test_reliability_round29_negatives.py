"""Round 29: negative mining (`aspire.data.negatives.graph`, `.sampled`) and the same-author benchmark.

Defects fixed:
- `coverage_negatives` shuffled a whole cluster for every anchor and cluster it visited: quadratic (51 s on a
  synthetic 60k papers in 16 clusters, k=10; 1.4 s now). Clusters and members are now drawn lazily (uniform draws,
  repeats skipped; a shuffle only of what is left past half). Same distribution, other draws for a seed.
- A negative `k` was accepted: `coverage_negatives(..., k=-1)` gave one negative from every other cluster,
  `citation_negatives(..., k=-1)` cut the last negative off; now ValueError.
- `kmeans_clusters` took a row holding NaN for a paper without a vector (cluster -1, unsaid) and failed inside
  scikit-learn on an infinite one; now ValueError naming the rows.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

import numpy as np
import pytest

from aspire.benchmarks.same_author import (
    average_precision,
    build_pools,
    counted_names,
    ndcg_at,
    qrels_of,
)
from aspire.data.negatives import (
    citation_negatives,
    cocitation_partners,
    coverage_negatives,
    kmeans_clusters,
    random_negatives,
)
from aspire.data.negatives.sampled import NO_VECTOR

# ---- coverage: near-linear draws ---------------------------------------------------------------------------------


class _CountingRng:
    """A numpy Generator that counts the random numbers it hands out (permutations count their length)."""

    def __init__(self, rng):
        self.rng, self.used = rng, 0

    def permutation(self, x):
        out = self.rng.permutation(x)
        self.used += len(out)
        return out

    def random(self, size=None):
        out = self.rng.random(size)
        self.used += int(np.size(out))
        return out

    def integers(self, *args, size=None, **kw):
        out = self.rng.integers(*args, size=size, **kw)
        self.used += int(np.size(out))
        return out


def test_coverage_draws_grow_with_the_papers_not_with_papers_times_cluster_size(monkeypatch):
    n, k = 20000, 5
    made = []
    real = np.random.default_rng

    def counting(seed=None):
        made.append(_CountingRng(real(seed)))
        return made[-1]

    ids = [f"P{i}" for i in range(n)]
    clusters = real(0).integers(0, 4, size=n)
    monkeypatch.setattr(np.random, "default_rng", counting)
    mined = coverage_negatives(clusters, {}, ids, k=k, seed=0)
    monkeypatch.setattr(np.random, "default_rng", real)
    assert all(len(v) == 3 for v in mined.negatives.values())
    # before: every anchor shuffled 3 clusters of ~5000 members: ~3e8 numbers; now a few per negative
    assert sum(r.used for r in made) < 20 * n * 3


# ---- coverage: the distribution of shuffling every cluster whole --------------------------------------------------


def _exact_coverage(clusters, partners, ids, anchor, k):
    """{(negatives tuple, dropped): probability} for `anchor` by enumerating every cluster order and every member
    order (the definition: each cluster shuffled whole)."""
    labels = sorted(set(clusters))
    own = clusters[ids.index(anchor)]
    others = [c for c in labels if c != own]
    mine = partners.get(anchor, set()) | {anchor}
    dist: Counter = Counter()
    cluster_orders = list(itertools.permutations(others))
    member_sets = {c: [p for p, x in zip(ids, clusters) if x == c] for c in others}
    member_orders = {c: list(itertools.permutations(m)) for c, m in member_sets.items()}
    for corder in cluster_orders:
        for combo in itertools.product(*(member_orders[c] for c in corder)):
            negs, dropped = [], 0
            for order in combo:
                if len(negs) == k:
                    break
                for p in order:
                    if p in mine:
                        dropped += p != anchor
                    else:
                        negs.append(p)
                        break
            prob = 1.0 / len(cluster_orders)
            for c in corder:
                prob /= len(member_orders[c])
            dist[(tuple(negs), dropped)] += prob
    return dist


def test_coverage_negatives_follow_the_exact_distribution_of_whole_shuffles():
    ids = ["A", "B", "C", "D", "E", "F", "G", "H"]
    clusters = [0, 1, 1, 1, 2, 2, 3, 3]
    partners = {"A": {"A", "B", "E"}}  # one partner in cluster 1, one in cluster 2
    k, seeds = 2, 3000
    exact = _exact_coverage(clusters, partners, ids, "A", k)
    seen: Counter = Counter()
    for s in range(seeds):
        mined = coverage_negatives(np.array(clusters), partners, ids, k, seed=s)
        # dropped is summed over anchors: only A has partners, so it is A's
        negs = mined.negatives["A"]
        a_dropped = mined.dropped["partner"]
        seen[(tuple(negs), a_dropped)] += 1
    assert set(seen) <= set(exact)  # nothing the definition cannot give (no partner, no own cluster, ...)
    assert set(seen) == set(exact)  # every outcome the definition gives is drawn
    for outcome, p in exact.items():
        assert abs(seen[outcome] / seeds - p) < 5 * (p * (1 - p) / seeds) ** 0.5 + 1e-9, outcome


def test_coverage_negatives_brute_force_invariants_and_seeds():
    rng = random.Random(29)
    for t in range(120):
        n = rng.randint(1, 40)
        ids = [f"P{i}" for i in range(n)]
        c = rng.randint(1, n)
        clusters = np.array([rng.randrange(c) for _ in range(n)])
        if n > 2 and rng.random() < 0.3:
            clusters[rng.sample(range(n), rng.randint(1, n - 1))] = NO_VECTOR
        sets = [{"paper_ids": rng.sample(ids, min(n, rng.randint(1, 6)))} for _ in range(rng.randint(0, n))]
        partners = dict(cocitation_partners(sets))
        k = rng.randint(0, c + 2)
        mined = coverage_negatives(clusters, partners, ids, k, seed=t)
        again = coverage_negatives(clusters, partners, ids, k, seed=t)
        assert (mined.negatives, mined.dropped, mined.notes) == (again.negatives, again.dropped, again.notes)
        cluster_of = dict(zip(ids, clusters.tolist()))
        for a in ids:
            negs = mined.negatives[a]
            mine = partners.get(a, set()) | {a}
            if cluster_of[a] == NO_VECTOR:
                assert negs == []
                continue
            open_ = {cluster_of[p] for p in ids
                     if p not in mine and cluster_of[p] not in (cluster_of[a], NO_VECTOR)}
            assert len(negs) == min(k, len(open_))
            assert not set(negs) & mine and len({cluster_of[p] for p in negs}) == len(negs)
            assert {cluster_of[p] for p in negs} <= open_
        present = sorted(set(clusters.tolist()) - {NO_VECTOR})
        assert mined.notes["clusters"] == len(present)
        assert mined.notes["cluster_sizes"] == [int((clusters == x).sum()) for x in present]
        without = [p for p in ids if cluster_of[p] == NO_VECTOR]
        assert mined.notes.get("papers_without_vector", []) == without


def test_coverage_every_eligible_member_is_drawn_and_dropped_counts_are_exact():
    ids = [f"P{i}" for i in range(12)]
    clusters = np.array([0] + [1] * 4 + [2] * 4 + [3] * 3)
    partners = {"P0": {"P0", "P1", "P2", "P3", "P4", "P5"}}  # cluster 1 all partners, cluster 2 one partner
    drawn: Counter = Counter()
    for s in range(400):
        negs = coverage_negatives(clusters, partners, ids, k=3, seed=s).negatives["P0"]
        assert sorted(clusters[ids.index(p)] for p in negs) == [2, 3]  # cluster 1 passed over
        drawn.update(negs)
    assert set(drawn) == {"P6", "P7", "P8", "P9", "P10", "P11"}  # every eligible member, never a partner
    # cluster 3 only: the anchor's partners fill cluster 1 and 2 whole -> all 8 counted once, one negative
    full = {"P0": {"P0", *ids[1:9]}}
    for s in range(20):
        mined = coverage_negatives(clusters, full, ids, k=5, seed=s)
        assert clusters[ids.index(mined.negatives["P0"][0])] == 3 and len(mined.negatives["P0"]) == 1
        assert mined.dropped == {"partner": 8}


def test_coverage_with_more_clusters_asked_than_exist():
    ids = [f"P{i}" for i in range(6)]
    vecs = np.array([[1, 0], [1, 0], [1, 0], [0, 1], [0, 1], [0, 1]], dtype=np.float32)  # 2 distinct vectors
    with pytest.warns(Warning):  # scikit-learn: fewer distinct points than clusters
        labels = kmeans_clusters(vecs, 4, seed=0)
    assert len(set(labels.tolist())) == 2
    mined = coverage_negatives(labels, {}, ids, k=10, seed=0)
    assert mined.notes == {"clusters": 2, "cluster_sizes": [3, 3]}
    assert all(len(v) == 1 and labels[ids.index(v[0])] != labels[i] for i, v in enumerate(mined.negatives.values()))


# ---- k and vectors refused ---------------------------------------------------------------------------------------

GROUPS = [{"set_id": x, "paper_ids": [x], "context_ids": [f"X#{x}"]} for x in "ABC"]


@pytest.mark.parametrize("k", [-1, 2.5, True])
@pytest.mark.parametrize("mine", [
    lambda k: coverage_negatives(np.array([0, 1, 2]), {}, list("ABC"), k, 0),
    lambda k: random_negatives({}, list("ABC"), k, 0),
    lambda k: citation_negatives(GROUPS, list("ABC"), k),
], ids=["coverage", "random", "citation"])
def test_a_k_that_is_not_a_count_is_refused(mine, k):
    # before: coverage k=-1 gave A ['C', 'B'] (every other cluster), citation k=-1 gave A ['B'] of ['B', 'C']
    with pytest.raises(ValueError, match=r"k \(negatives per paper\) must be a whole number >= 0"):
        mine(k)


def test_k_zero_still_gives_no_negatives():
    assert coverage_negatives(np.array([0, 1, 2]), {}, list("ABC"), 0, 0).negatives == {p: [] for p in "ABC"}
    assert citation_negatives(GROUPS, list("ABC"), np.int64(0)).negatives == {p: [] for p in "ABC"}


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_kmeans_refuses_non_finite_rows_by_row(bad):
    vecs = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
    vecs[2, 0] = bad
    # before: NaN -> row 2 silently in cluster -1 (a paper "without a vector"); inf -> scikit-learn's NaN error
    with pytest.raises(ValueError, match=r"1 row\(s\) of vectors hold NaN or infinity: rows \[2\]"):
        kmeans_clusters(vecs, 2, seed=0)


# ---- citation and random: brute force ----------------------------------------------------------------------------


def test_random_negatives_draw_every_non_partner_and_nothing_else():
    ids = list("ABCDEFG")
    partners = {"A": {"A", "B", "C"}, "B": {"A", "B"}, "C": {"A", "C"}}
    drawn: Counter = Counter()
    for s in range(300):
        mined = random_negatives(partners, ids, k=2, seed=s)
        assert mined == random_negatives(partners, ids, k=2, seed=s)
        negs = mined.negatives["A"]
        assert len(negs) == 2 == len(set(negs)) and not set(negs) & {"A", "B", "C"}
        drawn.update(negs)
    assert set(drawn) == set("DEFG") and min(drawn.values()) > 100  # 150 expected each


def test_citation_negatives_duplicate_ids_and_contexts_without_citing_paper():
    with pytest.raises(ValueError, match=r"more than once: \['A'\]"):
        citation_negatives(GROUPS, ["A", "B", "A"], 3)
    bad = [{"set_id": "s", "paper_ids": ["A"], "context_ids": ["#7"]}]
    with pytest.raises(ValueError, match="co-cited set s: context id '#7' does not name its citing paper"):
        citation_negatives(bad, ["A"], 3)


# ---- same author -------------------------------------------------------------------------------------------------


def _records(rng: random.Random, n: int):
    people = [f"Person {i}" for i in range(12)]
    return [{"paper_id": f"P{i}", "authors": [f"  {a.upper()} " for a in rng.sample(people, rng.randint(0, 4))]}
            for i in range(n)]


def test_counted_names_and_qrels_against_brute_force():
    rng = random.Random(3)
    for _ in range(20):
        recs = _records(rng, rng.randint(2, 30))
        cap = rng.randint(1, 8)
        names = counted_names(recs, max_papers=cap)
        raw = {r["paper_id"]: {" ".join(a.lower().split()) for a in r["authors"]} for r in recs}
        for pid, ns in names.items():
            assert ns == {a for a in raw[pid] if sum(a in v for v in raw.values()) <= cap}
        pool = [r["paper_id"] for r in recs]
        qrels = qrels_of(pool, names)
        for q in pool:
            judged = {c: int(len(names[q] & names[c]) >= 2) for c in pool if c != q}
            assert qrels.get(q) == (judged if any(judged.values()) else None)


def test_build_pools_are_disjoint_full_seeded_and_every_paper_has_a_related_one():
    rng = random.Random(8)
    recs = _records(rng, 80)
    names = counted_names(recs, max_papers=50)
    cands = sorted(names)
    pools = build_pools(cands, names, {"dev": 12, "test": 16}, seed=4)
    assert pools == build_pools(cands, names, {"dev": 12, "test": 16}, seed=4)
    assert [len(pools["dev"]), len(pools["test"])] == [12, 16] and not set(pools["dev"]) & set(pools["test"])
    for pool in pools.values():
        assert len(qrels_of(pool, names)) == len(pool)  # each paper came in a related group
    with pytest.raises(ValueError, match="same-author pool 'big': the candidates fill"):
        build_pools(cands, names, {"big": 1000}, seed=0)


def test_average_precision_and_ndcg_against_sklearn():
    from sklearn.metrics import average_precision_score, ndcg_score

    rng = np.random.default_rng(1)
    for _ in range(50):
        rel = (rng.random(rng.integers(2, 30)) < 0.3).astype(int)
        if not rel.any() or rel.all():
            continue
        scores = np.arange(len(rel), 0, -1, dtype=float)  # the ranking order given
        assert average_precision(rel) == pytest.approx(average_precision_score(rel, scores))
        assert ndcg_at(rel, 10) == pytest.approx(ndcg_score(rel[None], scores[None], k=10))
