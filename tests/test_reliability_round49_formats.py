"""Round 49: same-author, venue and year formats checked against brute force, scipy/sklearn and the real ACL file."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import pytest

from aspire.benchmarks import same_author as sa
from aspire.benchmarks.acl_formats import SPLIT_FILE, load_split
from aspire.benchmarks.venue import load_venue_task, macro_f1, venue_class
from aspire.benchmarks.year import _year_label, kendall_tau, load_year_task, rmse

ACL = Path("/work/shared/data/acl-anthology/papers.jsonl.gz")


@functools.lru_cache(maxsize=1)
def _real_records() -> dict:
    from aspire.benchmarks.acl_formats import read_records

    return {r["paper_id"]: r for r in read_records(ACL)}


def _brute_qrels(pool, records, cap=sa.MAX_AUTHOR_PAPERS, k=sa.MIN_SHARED):
    papers_of, names_of = {}, {}
    for r in records:
        for n in {" ".join(a.lower().split()) for a in r.get("authors") or [] if a.strip()}:
            papers_of.setdefault(n, set()).add(r["paper_id"])
            names_of.setdefault(r["paper_id"], set()).add(n)
    keep = {n for n, ps in papers_of.items() if len(ps) <= cap}
    mine = {pid: names_of.get(pid, set()) & keep for pid in pool}  # the kept names whose papers hold pid
    out = {}
    for q in pool:
        judged = {c: int(len(mine[q] & mine[c]) >= k) for c in pool if c != q}
        if sum(judged.values()):
            out[q] = judged
    return out


def _hand_records():
    return [
        {"paper_id": "a", "authors": ["Ann Lee", "Bo  Chen", "Yang Liu"]},
        {"paper_id": "b", "authors": ["ann lee", "Bo Chen"]},
        {"paper_id": "c", "authors": ["Ann Lee", "Yang Liu"]},  # "yang liu" over the cap of 2 papers below
        {"paper_id": "d", "authors": ["Yang Liu", "Cy Dee"]},
        {"paper_id": "e", "authors": []},
        {"paper_id": "f", "authors": ["Cy Dee", "Ann Lee"]},
    ]


def test_hand_qrels_equal_brute_force_with_cap():
    recs = _hand_records()
    pool = [r["paper_id"] for r in recs]
    names = sa.counted_names(recs, max_papers=4)  # ann lee is on 4 papers (kept), yang liu on 3
    assert names["a"] == {"ann lee", "bo chen", "yang liu"} and names["e"] == frozenset()
    got = sa.qrels_of(pool, names)
    assert got == _brute_qrels(pool, recs, cap=4)
    assert set(got) == {"a", "b", "c"} and got["a"] == {"b": 1, "c": 1, "d": 0, "e": 0, "f": 0}
    capped = sa.counted_names(recs, max_papers=3)  # ann lee over the cap: no pair shares 2 counted names
    assert "ann lee" not in capped["a"] and sa.qrels_of(pool, capped) == _brute_qrels(pool, recs, cap=3) == {}
    assert all(q not in judged for q, judged in got.items())  # no paper is its own candidate


def test_build_pools_refuses_sizes_below_one():
    names = {p: frozenset({"x", "y"}) for p in "abcd"}
    with pytest.raises(ValueError, match="'dev': 0"):
        sa.build_pools(list(names), names, {"dev": 0, "test": 4})
    with pytest.raises(ValueError, match="at least 1"):
        sa.build_pools(list(names), names, {"test": -2})


def test_ndcg_refuses_k_below_one():
    with pytest.raises(ValueError, match="k >= 1"):
        sa.ndcg_at(np.array([1, 0, 1]), 0)


def test_ap_and_ndcg_equal_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        rel = (rng.random(rng.integers(1, 15)) < 0.3).astype(int)
        hits = [i for i, r in enumerate(rel) if r]
        ap = sum(sum(rel[: i + 1]) / (i + 1) for i in hits) / len(hits) if hits else 0.0
        assert sa.average_precision(rel) == pytest.approx(ap)
        dcg = sum(r / np.log2(i + 2) for i, r in enumerate(rel[:10]))
        idcg = sum(1 / np.log2(i + 2) for i in range(min(10, int(rel.sum()))))
        assert sa.ndcg_at(rel, 10) == pytest.approx(dcg / idcg if idcg else 0.0)


def test_author_key_nfc():
    assert sa.author_key("O\u0308zates\u0327") == sa.author_key("\u00d6zate\u015f") == "özateş"


def test_year_label_refuses_overflowing_years_naming_paper():
    with pytest.raises(ValueError, match="P9"):
        _year_label({"paper_id": "P9", "year": "9" * 400})  # was inf
    with pytest.raises(ValueError, match="P9"):
        _year_label({"paper_id": "P9", "year": 10 ** 400})  # was an OverflowError naming no paper
    assert _year_label({"paper_id": "P1", "year": "2019"}) == 2019.0
    for bad in ("", " 2019", "2019.0", None, True, 2019.5):
        with pytest.raises(ValueError, match="P1"):
            _year_label({"paper_id": "P1", "year": bad})


def test_rmse_refuses_column_predictions():
    with pytest.raises(ValueError, match="shapes"):  # was 7.07 (broadcast (2, 2)) for a perfect prediction
        rmse([2000, 2010], [[2000], [2010]])
    with pytest.raises(ValueError, match="shapes"):
        kendall_tau(np.array([2000, 2010, 2005]), np.array([[2000], [2010], [2001]]))
    assert rmse([2000, 2010], [2001, 2008]) == pytest.approx(np.sqrt(2.5))


def test_metrics_equal_scipy_sklearn():
    from scipy.stats import kendalltau
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(1)
    y, p = rng.integers(2000, 2010, 40), rng.integers(2000, 2010, 40)
    assert kendall_tau(y, p) == pytest.approx(kendalltau(y, p).statistic)
    yc, pc = rng.choice(list("abcd"), 40), rng.choice(list("abce"), 40)
    assert macro_f1(yc, pc) == pytest.approx(f1_score(yc, pc, average="macro", zero_division=0))


def test_venue_class_by_hand():
    assert venue_class(["lrec", "coling"]) == "lrec"
    assert venue_class(["acl", "ws"]) == "main" and venue_class(["ws"]) is None and venue_class(None) is None
    assert venue_class(["tacl", "cl", "acl"]) == "journal"
    assert venue_class(["semeval", "wmt"]) is None and venue_class(["acl", "foo"]) is None
    assert venue_class(["clinicalnlp", "bionlp", "ijcnlp"]) == "bionlp"


@pytest.mark.slow
@pytest.mark.skipif(not ACL.exists(), reason="no real ACL file")
def test_real_venue_year_labels_and_same_author_qrels():
    records = _real_records()
    splits, classes = load_venue_task(records)
    _, years = load_year_task(records)
    hand_main = {"acl", "emnlp", "naacl", "eacl", "coling", "findings", "aacl"}
    for pid in itertools.chain(*splits.values()):
        vs = [v for v in records[pid]["venues"] if v not in ("ws", "ijcnlp")]
        if all(v in hand_main for v in vs):
            assert classes[pid] == "main", pid
        assert years[pid] == int(records[pid]["year"]), pid
    body = load_split()
    for split in body["splits"]["same_author"]:
        pool, qrels = sa.load_same_author(records, split, SPLIT_FILE)
        assert qrels == _brute_qrels(pool, records.values()), split
