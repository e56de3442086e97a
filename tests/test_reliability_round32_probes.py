"""Round 32: the probe benchmarks (venue, year, same-author proximity) against independent references: sklearn's
macro-F1, logistic regression and ridge over a hand-standardised grid, a brute-force ranking loop, scipy's tau and
the committed split's labels recomputed from the real ACL file; a wrong --data and a misaligned results file
named."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from aspire.benchmarks.venue import macro_f1
from aspire.benchmarks.year import kendall_tau, rmse
from aspire.evaluate.probes import (
    ALPHA_GRID,
    C_GRID,
    acl_index,
    compare_probe_results,
    proximity_scores,
    run_format,
    venue_probe,
    year_probe,
)


@pytest.mark.parametrize("where", ["missing", "empty", "the file itself"])
def test_a_data_folder_without_the_acl_file_is_named_as_data(tmp_path, where):
    """`aspire evaluate year --data /nonexistent` said only "No such file or directory: /nonexistent/papers.jsonl.gz"."""
    data = {"missing": tmp_path / "nonexistent", "empty": tmp_path, "the file itself": tmp_path / "papers.jsonl.gz"}
    (tmp_path / "papers.jsonl.gz").write_bytes(b"")
    if where == "empty":
        (tmp_path / "papers.jsonl.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"--data .* should be the ACL folder holding papers\.jsonl\.gz"):
        acl_index(data[where])
    with pytest.raises(FileNotFoundError, match="--data"):  # before any model loads
        run_format("year", data[where], "no-such-model", tmp_path / "out")


def test_the_year_command_names_data_when_the_folder_is_wrong(tmp_path, capsys):
    from aspire.cli.evaluate import main

    code = main(["year", "--data", str(tmp_path / "nonexistent"), "--model", "minilm", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code != 0 and f"--data {tmp_path / 'nonexistent'}" in err and "papers.jsonl.gz" in err


def _results(path, ids, y, pred):
    path.write_text(json.dumps({"format": "venue", "representations": {
        "abstract": {"test_ids": ids, "y": y, "pred": pred, "metrics": {}, "ci95": {}}}}))
    return path


def test_compare_names_the_first_run_when_its_lists_do_not_align(tmp_path):
    """Run a's labels one short of its test papers was a bare StopIteration (empty message)."""
    ids, y = ["p1", "p2", "p3", "p4"], ["a", "b", "a", "b"]
    a = _results(tmp_path / "a.json", ids, y[:3], ["a", "b", "b", "b"])
    b = _results(tmp_path / "b.json", ids, y, ["a", "a", "a", "b"])
    with pytest.raises(ValueError, match=r"a\.json holds 4 test papers, 3 labels and 4 predictions \(abstract\)"):
        compare_probe_results(a, b, n_perm=5)
    c = _results(tmp_path / "c.json", ids, y, ["a", "b"])  # predictions short: once named neither run
    with pytest.raises(ValueError, match=r"c\.json holds 4 test papers, 4 labels and 2 predictions"):
        compare_probe_results(c, b, n_perm=5)
    with pytest.raises(ValueError, match=r"c\.json holds 4 test papers, 4 labels and 2 predictions"):
        compare_probe_results(b, c, n_perm=5)
    shuffled = _results(tmp_path / "s.json", ids[::-1], y[::-1], ["a", "a", "a", "b"][::-1])
    assert compare_probe_results(b, shuffled, n_perm=5)["abstract/macro-F1"]["delta"] == 0.0


def test_metrics_match_sklearn_and_scipy_on_random_labels():
    from scipy.stats import kendalltau
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    for _ in range(100):
        n, k = int(rng.integers(1, 30)), int(rng.integers(1, 5))
        y, pred = rng.integers(0, k, n).astype(str), rng.integers(0, k + 1, n).astype(str)
        labels = np.unique(np.concatenate([y, pred]))
        assert macro_f1(y, pred) == pytest.approx(f1_score(y, pred, labels=labels, average="macro", zero_division=0))
    years = rng.integers(2000, 2020, 50).astype(float)
    guess = years + rng.normal(size=50) * 5
    assert kendall_tau(years, guess) == pytest.approx(kendalltau(years, guess).statistic)
    assert rmse(years, guess) == pytest.approx(np.sqrt(np.mean((years - guess) ** 2)))


def test_probes_choose_and_predict_as_a_grid_loop_over_sklearn_does():
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    X = {s: rng.normal(size=(n, 5)) for s, n in (("train", 40), ("dev", 15), ("test", 12))}
    mu, sd = X["train"].mean(0), X["train"].std(0)
    Z = {s: (x - mu) / sd for s, x in X.items()}
    classes = {s: np.array(["abc"[i] for i in rng.integers(0, 3, len(x))]) for s, x in X.items()}
    best = None
    for c in C_GRID:  # first best in ascending C: ties go to the stronger regularisation
        fit = LogisticRegression(C=c, max_iter=3000, random_state=0).fit(Z["train"], classes["train"])
        score = f1_score(classes["dev"], fit.predict(Z["dev"]), average="macro", zero_division=0,
                         labels=np.unique(np.concatenate([classes["dev"], fit.predict(Z["dev"])])))
        if best is None or score > best[0] + 1e-12:
            best = (score, c, fit)
    probe = venue_probe(X, classes)
    assert probe["chosen"]["C"] == best[1] and list(probe["pred"]) == list(best[2].predict(Z["test"]))
    years = {s: 2015 + 5 * rng.normal(size=len(x)) for s, x in X.items()}
    best = None
    for a in sorted(ALPHA_GRID):  # last best in ascending alpha: ties go to the stronger regularisation
        fit = Ridge(alpha=a).fit(Z["train"], years["train"])
        err = np.sqrt(np.mean((fit.predict(Z["dev"]) - years["dev"]) ** 2))
        if best is None or err <= best[0]:
            best = (err, a, fit)
    probe = year_probe(X, years)
    assert probe["chosen"]["alpha"] == best[1]
    assert np.allclose(probe["pred"], best[2].predict(Z["test"]), atol=1e-5)


def test_proximity_scores_match_a_brute_force_ranking():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 4))
    pool = [f"q{i}" for i in range(12)]
    qrels = {pool[i]: {pool[j]: int(rng.random() < 0.3) for j in range(12) if j != i} for i in range(0, 12, 2)}
    out = proximity_scores(X, pool, qrels)
    for q, judged in qrels.items():
        i = pool.index(q)
        cos = {j: X[i] @ X[j] / np.linalg.norm(X[i]) / np.linalg.norm(X[j]) for j in range(12) if j != i}
        rel = [judged[pool[j]] for j in sorted(cos, key=lambda j: (-cos[j], j))]
        hits = np.cumsum(rel)
        ap = sum(h / r for r, (h, x) in enumerate(zip(hits, rel), 1) if x) / max(sum(rel), 1)
        dcg = sum(x / np.log2(r + 1) for r, x in enumerate(rel[:10], 1))
        ideal = sum(1 / np.log2(r + 1) for r in range(1, min(10, sum(rel)) + 1))
        assert out[q]["MAP"] == pytest.approx(ap) and out[q]["nDCG@10"] == pytest.approx(dcg / ideal if ideal else 0)


@pytest.mark.slow
def test_real_split_labels_match_the_committed_class_counts_and_a_raw_read(shared_data):
    """The committed split's venue classes and years, recomputed from the raw ACL records: every paper labelled,
    each class `sizes.venue_classes` times per split, years the records' own; no excluded paper in a split."""
    import gzip

    from aspire.benchmarks.acl_formats import load_split, read_records
    from aspire.benchmarks.venue import load_venue_task
    from aspire.benchmarks.year import load_year_task

    path = shared_data / "acl-anthology" / "papers.jsonl.gz"
    records = {r["paper_id"]: r for r in read_records(path)}
    split = load_split()
    splits, classes = load_venue_task(records)
    year_splits, years = load_year_task(records)
    assert year_splits == splits and splits == split["splits"]["venue_year"]
    for name, ids in splits.items():
        assert dict(Counter(classes[p] for p in ids)) == split["sizes"]["venue_classes"][name]
    wanted = {p for ids in splits.values() for p in ids}
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        raw = {r["paper_id"]: r for r in map(json.loads, handle) if r["paper_id"] in wanted}
    assert all(years[p] == float(int(raw[p]["year"])) for p in wanted)
    excluded = {p for ids in split["excluded"].values() for p in ids}
    assert not excluded & {p for parts in split["splits"].values() for ids in parts.values() for p in ids}
