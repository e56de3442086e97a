"""Round 22: the negative samplers (`aspire.data.negatives`) against brute-force references, and the inputs
that once ran silently wrong or crashed."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from aspire.data.negatives import (
    HardNegativesConfig,
    check_config,
    citation_negatives,
    cocitation_matrix,
    cocitation_partners,
    coverage_negatives,
    mine_hard_negatives,
    nearest_negatives,
    random_negatives,
    svd_vectors,
)


def _random_groups(rng: random.Random, n_papers: int, n_sets: int, n_citing: int = 3):
    ids = [f"P{i}" for i in range(n_papers)]
    groups = []
    for s in range(n_sets):
        pids = rng.sample(ids, rng.randint(2, min(3, n_papers)))
        contexts = [f"C{rng.randrange(n_citing)}#L{s}_{t}" for t in range(rng.randint(1, 2))]
        groups.append({"set_id": f"s{s}", "paper_ids": pids, "context_ids": contexts})
    return ids, groups


def _examples_dir(root, papers, groups):
    root.mkdir()
    (root / "abstracts.jsonl").write_text("".join(
        json.dumps({"paper_id": p, "title": f"t {p}", "abstract": [f"about {p}."]}) + "\n" for p in papers))
    (root / "groups.train.jsonl").write_text("".join(json.dumps(g) + "\n" for g in groups))
    return root


# ---- fixes -------------------------------------------------------------------------------------------------

def test_a_nan_margin_built_in_python_is_refused_not_a_guard_switched_off(tmp_path):
    """`load_config` refused margin=nan, but a `HardNegativesConfig` built in Python reached the miner: every
    `sims > ref - nan` is False, so the guard dropped nothing while the report counted guarded anchors."""
    papers = list("ABCD")
    root = _examples_dir(tmp_path / "ex", papers, [{"set_id": "A|B", "paper_ids": ["A", "B"], "context_ids": ["X#1"]}])
    vecs = np.eye(4, dtype=np.float32)
    with pytest.raises(ValueError, match="margin: must be a finite number, got nan"):
        mine_hard_negatives(root, tmp_path / "o", HardNegativesConfig(method="nearest", margin=float("nan")),
                            lambda ps: vecs[: len(ps)])
    assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match="margin: must be a finite number, got inf"):
        check_config(HardNegativesConfig(method="svd", margin=float("inf")))
    with pytest.raises(ValueError, match="k: must be an integer, got 2.5"):
        check_config(HardNegativesConfig(k=2.5))
    check_config(HardNegativesConfig(method="nearest", margin=0.05))  # a finite margin is fine


def test_nearest_negatives_refuses_a_nan_margin():
    vecs = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]], dtype=np.float32)
    partners = {"A": {"A", "B"}, "B": {"A", "B"}}
    with pytest.raises(ValueError, match="margin must be a number or None, got nan"):
        nearest_negatives(vecs, partners, ["A", "B", "C"], k=1, margin=float("nan"))
    # infinite margins stay meaningful: +inf guards every candidate of an anchor with a partner
    mined = nearest_negatives(vecs, partners, ["A", "B", "C"], k=1, margin=float("inf"))
    assert mined.negatives["A"] == [] and mined.dropped["margin"] == 2


def test_an_examples_dir_without_papers_is_named_not_a_zero_division(tmp_path):
    root = _examples_dir(tmp_path / "ex", [], [{"set_id": "", "paper_ids": [], "context_ids": ["X#1"]}])
    with pytest.raises(ValueError, match=r"abstracts.jsonl: no papers"):
        mine_hard_negatives(root, tmp_path / "o", HardNegativesConfig(method="citation"))


# ---- references (these held before the fixes; they guard the samplers) ---------------------------------------

def _brute_citation(groups, ids, k):
    """For each anchor of `ids`: the papers of `ids` that a paper citing the anchor also cites, never in one set with
    it, neither citing it nor cited by it, most shared citing papers first (ties by id); and what was so left out, over
    all anchors: {"partner": the partners of `ids`, "citation": the other papers citing the anchor or cited by it}.
    (Round 24 restricted it to `ids`, for `citation_negatives` on a subset; with every paper given, as here, it is
    the reference it was.)"""
    def citing(ctx):
        return ctx.rsplit("#", 1)[0]

    out, dropped = {}, {"partner": 0, "citation": 0}
    for a in ids:
        cocited = {p for g in groups if a in g["paper_ids"] for p in g["paper_ids"]} | {a}
        citers = {citing(c) for g in groups if a in g["paper_ids"] for c in g["context_ids"]}
        cites = {p for g in groups for c in g["context_ids"] if citing(c) == a for p in g["paper_ids"]}
        linked = (citers | cites) - cocited
        counts, cited_all = {}, set()
        for c in citers:
            cited = {p for g in groups for cc in g["context_ids"] if citing(cc) == c for p in g["paper_ids"]}
            cited &= set(ids)
            cited_all |= cited
            for p in cited - cocited - linked:
                counts[p] = counts.get(p, 0) + 1
        dropped["partner"] += len((cited_all & cocited) - {a})
        dropped["citation"] += len(cited_all & linked)
        out[a] = sorted(counts, key=lambda p: (-counts[p], p))[:k]
    return out, dropped


def test_citation_negatives_match_a_brute_force_over_random_graphs():
    rng = random.Random(0)
    for _ in range(120):
        ids, groups = _random_groups(rng, rng.randint(3, 9), rng.randint(1, 7))
        k = rng.randint(1, 5)
        expected, dropped = _brute_citation(groups, ids, k)
        mined = citation_negatives(groups, ids, k)
        assert mined.negatives == expected and mined.dropped == dropped


def _brute_nearest(vecs, partners, ids, k, skip, margin, reference):
    vecs = vecs.astype(np.float64)
    norms = np.linalg.norm(vecs, axis=1)
    out, d_partner, d_margin = {}, 0, 0
    for i, a in enumerate(ids):
        if norms[i] == 0:
            out[a] = []
            continue

        def sim(j, i=i):
            return float(vecs[i] @ vecs[j] / norms[i] / norms[j])

        mine = partners.get(a, set()) | {a}
        part = [j for j in range(len(ids)) if ids[j] in mine and j != i and norms[j] > 0]
        cands = [j for j in range(len(ids)) if ids[j] not in mine and norms[j] > 0]
        close = set()
        if margin is not None and part:
            ref = (min if reference == "min" else max)(sim(j) for j in part)
            close = {j for j in cands if sim(j) > ref - margin}
        kept = sorted((j for j in cands if j not in close), key=lambda j: (-sim(j), j))[skip : skip + k]
        out[a] = [ids[j] for j in kept]
        floor = sim(kept[-1]) if len(kept) == k else -np.inf
        d_partner += sum(sim(j) > floor for j in part)
        d_margin += len(close)
    return out, d_partner, d_margin


def test_nearest_negatives_match_a_brute_force_with_skip_margin_and_zero_vectors():
    rng = random.Random(1)
    for t in range(120):
        ids, groups = _random_groups(rng, rng.randint(3, 9), rng.randint(1, 6))
        partners = cocitation_partners(groups)
        vecs = np.random.default_rng(t).standard_normal((len(ids), 3)).astype(np.float32)
        if t % 4 == 0:
            vecs[rng.randrange(len(ids))] = 0.0
        k, skip = rng.randint(1, 4), rng.randint(0, 2)
        margin, reference = rng.choice([None, 0.0, 0.1, -0.1]), rng.choice(["min", "max"])
        mined = nearest_negatives(vecs, partners, ids, k, skip, margin, reference, chunk=rng.choice([1, 2, 1024]))
        expected, d_partner, d_margin = _brute_nearest(vecs, partners, ids, k, skip, margin, reference)
        assert mined.negatives == expected
        assert mined.dropped == {"partner": d_partner, **({"margin": d_margin} if margin is not None else {})}


def test_svd_vectors_span_the_exact_truncated_svd():
    """U·Σ of the randomized solver against numpy's exact SVD of a brute-force co-citation matrix (compared by
    Gram matrix, which a sign or a rotation within a repeated singular value leaves alone), where the kept
    spectrum is separated from the rest."""
    rng = random.Random(2)
    compared = 0
    for _ in range(40):
        ids, groups = _random_groups(rng, rng.randint(3, 10), rng.randint(1, 8))
        brute = np.zeros((len(ids), len(ids)))
        for g in groups:
            for a in set(g["paper_ids"]):
                for b in set(g["paper_ids"]) - {a}:
                    brute[ids.index(a), ids.index(b)] += 1
        matrix = cocitation_matrix(groups, ids)
        assert (matrix.toarray() == brute).all()
        dim = rng.randint(1, len(ids))
        vectors, notes = svd_vectors(matrix, dim, seed=0)
        d = min(dim, len(ids) - 1)
        assert vectors.shape == (len(ids), d) and notes["dim"] == d
        u, s, _ = np.linalg.svd(brute)
        if s[d - 1] - s[d] > 1e-3:
            exact = u[:, :d] * s[:d]
            assert np.abs(vectors @ vectors.T - exact @ exact.T).max() < 1e-3
            compared += 1
    assert compared > 10


def test_sampled_negatives_on_fewer_candidates_than_asked():
    ids = list("ABCDE")
    partners = {"A": {"A", "B"}, "B": {"A", "B"}}
    mined = random_negatives(partners, ids, k=10, seed=0)
    assert sorted(mined.negatives["A"]) == ["C", "D", "E"] and sorted(mined.negatives["C"]) == ["A", "B", "D", "E"]
    assert mined.dropped == {"partner": 2}  # A drew B and B drew A; every paper was drawn
    assert random_negatives({}, ["A"], k=3, seed=0).negatives == {"A": []}
    covered = coverage_negatives(np.array([0, 0, 1, 1, 2]), partners, ids, k=5, seed=0)
    for i, (pid, negs) in enumerate(covered.negatives.items()):
        own = [0, 0, 1, 1, 2][i]
        clusters = sorted([0, 0, 1, 1, 2][ids.index(n)] for n in negs)
        assert clusters == sorted({0, 1, 2} - {own}) and not set(negs) & partners.get(pid, {pid})
    assert coverage_negatives(np.zeros(5, dtype=int), partners, ids, k=5, seed=0).negatives == {p: [] for p in ids}
