"""Round 39: same-author proximity (`aspire.benchmarks.same_author`) and facet selection (`aspire.data.facets`)
checked against brute-force loops, sklearn and the real ACL file."""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, ndcg_score

from aspire.benchmarks.same_author import (
    MIN_SHARED,
    author_key,
    average_precision,
    build_pools,
    counted_names,
    load_same_author,
    ndcg_at,
    qrels_of,
)
from aspire.data.facets import FACETS, resolve_selection, selection_facet
from tests.conftest import SHARED_DATA

ACL = SHARED_DATA / "acl-anthology" / "papers.jsonl.gz"


def test_author_key_unicode_nfc_equals_precomposed():
    # the ACL file carries both "Şaziye Betül Özateş" precomposed and with combining marks; they are one name
    decomposed = "S\u0327aziye Betu\u0308l O\u0308zates\u0327"
    assert author_key(decomposed) == author_key("\u015eaziye Bet\u00fcl \u00d6zate\u015f") == "şaziye betül özateş"
    assert author_key("  Noah A.\u00a0 SMITH \n") == "noah a. smith"


def test_counted_names_merge_nfc_variants():
    recs = [{"paper_id": "a", "authors": ["Vera Cabarra\u0303o", "Ana Silva"]},
            {"paper_id": "b", "authors": ["Vera Cabarr\u00e3o", "ana  silva"]}]
    names = counted_names(recs)
    assert names["a"] == names["b"] and len(names["a"]) == 2
    assert qrels_of(["a", "b"], names) == {"a": {"b": 1}, "b": {"a": 1}}


def test_counted_names_drop_frequent_names_by_paper_count():
    recs = [{"paper_id": f"p{i}", "authors": ["Yang Liu", "yang  liu", f"X {i}"]} for i in range(3)]
    names = counted_names(recs, max_papers=3)  # duplicates within a paper count once: 3 papers, kept
    assert all("yang liu" in ns for ns in names.values())
    assert all("yang liu" not in ns for ns in counted_names(recs, max_papers=2).values())


def _random_names(n: int, seed: int) -> dict[str, frozenset[str]]:
    rng = random.Random(seed)
    people = [f"person {i}" for i in range(8)]
    return {f"p{i:02d}": frozenset(rng.sample(people, rng.randint(0, 4))) for i in range(n)}


def test_qrels_equal_brute_force_and_exclude_the_query():
    for seed in range(5):
        names = _random_names(25, seed)
        pool = sorted(names)
        qrels = qrels_of(pool, names)
        brute = {}
        for q in pool:
            row = {}
            for c in pool:
                if c == q:
                    continue
                shared = sum(1 for n in names[q] if n in names[c])
                row[c] = 1 if shared >= MIN_SHARED else 0
            if sum(row.values()):
                brute[q] = row
        assert qrels == brute
        assert all(q not in judged for q, judged in qrels.items())


def test_build_pools_disjoint_exact_size_and_seeded():
    names = _random_names(60, 7)
    cands = sorted(names)
    pools = build_pools(cands, names, {"dev": 10, "test": 12}, seed=3)
    assert [len(p) for p in pools.values()] == [10, 12]
    assert not set(pools["dev"]) & set(pools["test"])
    assert pools == build_pools(cands, names, {"dev": 10, "test": 12}, seed=3)
    with pytest.raises(ValueError, match="'huge'"):
        build_pools(cands, names, {"huge": 1000})


def test_metrics_equal_sklearn():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(2, 30))
        rel = (rng.random(n) < 0.3).astype(int)
        if not rel.any():
            rel[int(rng.integers(n))] = 1
        scores = np.arange(n, 0, -1, dtype=float)  # rank order = given order
        assert average_precision(rel) == pytest.approx(average_precision_score(rel, scores))
        assert ndcg_at(rel, 10) == pytest.approx(ndcg_score(rel[None], scores[None], k=10))
    assert average_precision(np.array([0, 1, 0, 1])) == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert ndcg_at(np.array([0, 1])) == pytest.approx((1 / np.log2(3)) / 1.0)
    assert average_precision(np.zeros(3)) == 0.0 and ndcg_at(np.zeros(3)) == 0.0


LABELS = ["background_label", "objective_label", "method_label", "method_label", "result_label", "other_label"]


def test_resolve_selection_exact_by_label_and_position():
    assert resolve_selection("background", LABELS) == [0, 1]
    assert resolve_selection("Method", LABELS) == [2, 3]
    assert resolve_selection("objective_label", LABELS) == [1]
    assert resolve_selection("result,0", LABELS) == [4, 0]
    assert resolve_selection("5, 2", None) == [5, 2]
    assert resolve_selection("method,method_label,2", LABELS) == [2, 3]
    for facet, stored in FACETS.items():
        brute = [i for i, lab in enumerate(LABELS) if lab in stored]
        if brute:
            assert resolve_selection(facet, LABELS) == brute


def test_resolve_selection_refusals():
    with pytest.raises(ValueError, match="background, method, result"):
        resolve_selection("methods", LABELS, "P1")
    with pytest.raises(ValueError, match="'P1' has no facet labels"):
        resolve_selection("method", None, "P1")
    with pytest.raises(ValueError, match="empty item"):
        resolve_selection("method,,1", LABELS)


def test_selection_facet():
    assert selection_facet("objective_label") == "background"
    assert selection_facet("METHOD,method_label") == "method"
    assert selection_facet("method,result") is None
    assert selection_facet("method,0") is None
    assert selection_facet(None) is None


@pytest.mark.slow
@pytest.mark.skipif(not ACL.exists(), reason=f"{ACL} absent")
def test_real_acl_pool_qrels_equal_brute_force():
    with gzip.open(ACL, "rt") as f:
        records = {r["paper_id"]: r for r in map(json.loads, f)}
    pool, qrels = load_same_author(records)
    assert len(pool) == len(set(pool)) and set(qrels) <= set(pool)
    counts: dict[str, int] = {}
    keys = {}
    for pid, r in records.items():
        keys[pid] = {author_key(a) for a in r.get("authors") or [] if a.strip()}
        for k in keys[pid]:
            counts[k] = counts.get(k, 0) + 1
    for q in pool:
        mine = {k for k in keys[q] if counts[k] <= 50}
        row = {c: int(len(mine & {k for k in keys[c] if counts[k] <= 50}) >= MIN_SHARED) for c in pool if c != q}
        assert qrels.get(q, row if not any(row.values()) else None) == row


def test_resolve_selection_facet_of_a_stored_label_in_any_case():
    labels = ["Background_Label", "OBJECTIVE_LABEL", "Method_Label", "Result"]
    assert resolve_selection("method_label", labels) == [2]  # by label: any case (already so)
    assert resolve_selection("method", labels) == [2]  # by facet: was "has no 'method' sentence"
    assert resolve_selection("background", labels) == [0, 1]
    assert resolve_selection("result", labels) == [3]


def test_facet_of_reads_a_stored_label_in_any_case():
    # the page showed facet None for "Method_Label" while a selection by "method" took it; both now read it alike
    from aspire.data.facets import facet_of

    assert facet_of("Method_Label") == facet_of("method_label") == "method"
    assert facet_of("OBJECTIVE_LABEL") == "background" and facet_of("Result") == "result"
    assert facet_of("conclusion_label") is None and facet_of(None) is None
