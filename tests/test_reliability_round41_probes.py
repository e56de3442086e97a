"""Round 41: the SciRepEval probe runner (`aspire.evaluate.probes`) against independent references: sklearn's
logistic regression / ridge over the grid with the choice made by brute force on dev only (test labels made
adversarial), sklearn's macro-F1 and average precision, scipy's Kendall tau, a brute-force RMSE; papers without
features refused by name; the vector cache never serving another fingerprint's or paper set's features."""

from __future__ import annotations

import numpy as np
import pytest

from aspire.benchmarks.venue import macro_f1
from aspire.benchmarks.year import kendall_tau, rmse
from aspire.evaluate.probes import (
    ALPHA_GRID,
    C_GRID,
    Features,
    proximity_scores,
    venue_probe,
    year_probe,
)


def _split_data(seed=0, n=(40, 30, 30), d=6):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1.5, (3, d))
    X, yc, yr = {}, {}, {}
    for s, k in zip(("train", "dev", "test"), n):
        lab = np.arange(k) % 3
        X[s] = centres[lab] + rng.normal(0, 1.5, (k, d)) + 5.0  # offset: the standardisation matters
        yc[s] = np.array(["acl", "emnlp", "naacl"])[lab]
        yr[s] = 2000 + 3.0 * X[s][:, 0] + rng.normal(0, 2.0, k)
    return X, yc, yr


def _std(X):
    mu, sd = X["train"].mean(0), X["train"].std(0) + 1e-8
    return {s: (x - mu) / sd for s, x in X.items()}


def test_venue_c_is_chosen_on_dev_only_and_matches_sklearn():
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score

    X, y, _ = _split_data()
    Z = _std(X)
    dev = {c: f1_score(y["dev"], LogisticRegression(C=c, max_iter=3000, random_state=0).fit(Z["train"], y["train"])
                       .predict(Z["dev"]), average="macro") for c in C_GRID}
    best = max(C_GRID, key=lambda c: (round(dev[c], 12), -c))
    out = venue_probe(X, y)
    assert out["chosen"]["C"] == best
    assert out["dev"] == pytest.approx({str(c): v for c, v in dev.items()})
    ref = LogisticRegression(C=best, max_iter=3000, random_state=0).fit(Z["train"], y["train"]).predict(Z["test"])
    assert list(out["pred"]) == list(ref)
    # test labels adversarial: the choice and the predictions do not move
    y_adv = dict(y, test=np.roll(y["test"], 1))
    X_adv = dict(X, test=X["test"][::-1].copy())
    out2 = venue_probe(X_adv, y_adv)
    assert out2["chosen"] == out["chosen"] and out2["dev"] == out["dev"]
    assert list(out2["pred"]) == list(out["pred"][::-1])
    assert macro_f1(y["test"], out["pred"]) == pytest.approx(f1_score(y["test"], out["pred"], average="macro"))


def test_year_alpha_is_chosen_on_dev_only_and_matches_sklearn():
    from sklearn.linear_model import Ridge
    from sklearn.metrics import mean_squared_error

    X, _, y = _split_data(1)
    Z = _std(X)
    dev = {a: np.sqrt(mean_squared_error(y["dev"], Ridge(alpha=a).fit(Z["train"], y["train"]).predict(Z["dev"])))
           for a in ALPHA_GRID}
    best = min(ALPHA_GRID, key=lambda a: (dev[a], -a))
    out = year_probe(X, y)
    assert out["chosen"]["alpha"] == best
    assert out["dev"] == pytest.approx({str(a): v for a, v in dev.items()})
    ref = Ridge(alpha=best).fit(Z["train"], y["train"]).predict(Z["test"])
    np.testing.assert_allclose(out["pred"], ref, rtol=1e-9)
    out2 = year_probe(X, dict(y, test=-y["test"]))  # adversarial test labels change nothing
    assert out2["chosen"] == out["chosen"]
    np.testing.assert_allclose(out2["pred"], out["pred"])


def test_year_metrics_match_scipy_and_brute_force():
    from scipy.stats import kendalltau

    rng = np.random.default_rng(3)
    y = rng.integers(1990, 2020, 50).astype(float)
    pred = y + rng.normal(0, 4, 50)
    pred[:5] = pred[5]  # ties on the predicted side
    assert kendall_tau(y, pred) == pytest.approx(kendalltau(y, pred).statistic)
    assert rmse(y, pred) == pytest.approx((sum((a - b) ** 2 for a, b in zip(y, pred)) / len(y)) ** 0.5)


def test_features_of_papers_missing_names_them():
    f = Features.__new__(Features)
    f.papers, f.seconds = {"a": object()}, 0.0
    with pytest.raises(ValueError, match="b"):
        f.of(["a", "b"])


def test_the_cache_serves_neither_another_fingerprint_nor_another_paper_set(tiny_model_dir, tmp_path):
    import torch

    from aspire.data.papers import Paper
    from tests.conftest import build_tiny_model

    papers = {f"p{i}": Paper(f"p{i}", f"title {w}", [f"we propose a {w} method.", "results show data."])
              for i, w in enumerate(["neural", "parser", "text", "language"])}
    other_dir = tmp_path / "other"
    build_tiny_model(other_dir)
    import transformers  # a second model: other weights, other fingerprint
    m = transformers.BertModel.from_pretrained(other_dir)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05)
    m.save_pretrained(other_dir)
    cache = tmp_path / "cache"
    fa = Features(str(tiny_model_dir), papers, cache)
    a1 = fa.of(["p0", "p1"])
    a2 = fa.of(["p2", "p3"])  # another paper set: its own vectors, not the first set's
    assert not np.allclose(a1["abstract"], a2["abstract"])
    nocache = Features(str(tiny_model_dir), papers, None)
    for rep in ("abstract", "sentences"):
        np.testing.assert_allclose(a2[rep], nocache.of(["p2", "p3"])[rep], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(fa.of(["p1", "p0"])[rep], a1[rep][::-1], rtol=1e-5, atol=1e-6)
    fb = Features(str(other_dir), papers, cache)
    assert fb.fingerprint() != fa.fingerprint()
    b1 = fb.of(["p0", "p1"])
    ref = Features(str(other_dir), papers, None).of(["p0", "p1"])
    for rep in ("abstract", "sentences"):
        np.testing.assert_allclose(b1[rep], ref[rep], rtol=1e-5, atol=1e-6)
        assert not np.allclose(b1[rep], a1[rep])


def test_proximity_refuses_features_or_judgments_that_do_not_cover_the_pool():
    """Four feature rows for a pool of five ranked only four papers: the query's one relevant paper (the fifth) was
    dropped and its MAP read 0.0 instead of 0.25, silently."""
    pool = ["a", "b", "c", "d", "e"]
    qrels = {"a": {"b": 0, "c": 0, "d": 0, "e": 1}}
    X = np.eye(5) + 0.1
    assert proximity_scores(X, pool, qrels)["a"]["MAP"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="4 rows, 5 pool papers"):
        proximity_scores(X[:4], pool, qrels)
    with pytest.raises(ValueError, match="not in the pool, e.g. z"):
        proximity_scores(X, pool, {**qrels, "z": {p: 0 for p in pool}})
    with pytest.raises(ValueError, match="query a has no judgment of 1 pool paper.*e.g. e"):
        proximity_scores(X, pool, {"a": {"b": 0, "c": 1, "d": 0}})
