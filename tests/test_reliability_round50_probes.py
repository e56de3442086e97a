"""Round 50: the SciRepEval probe runner (`aspire.evaluate.probes`): `compare_probe_results` refusing two runs of
different splits (the same test papers and labels, other train / dev papers or another same-author pool) by name;
dev-only choice of the probes' hyper-parameters under adversarial test labels; macro-F1 against sklearn."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aspire.evaluate.probes import compare_probe_results, venue_probe, year_probe

IDS = [f"p{i}" for i in range(8)]
Y = ["acl", "emnlp", "acl", "naacl", "emnlp", "acl", "naacl", "acl"]
PRED = ["acl", "acl", "acl", "naacl", "emnlp", "emnlp", "naacl", "acl"]


def _venue(path, sizes, split_file):
    rep = {"chosen": {"C": 1.0}, "dev": {}, "metrics": {"macro-F1": 0.5}, "ci95": {"macro-F1": [0.0, 1.0]},
           "test_ids": IDS, "y": Y, "pred": PRED}
    path.write_text(json.dumps({"format": "venue", "split_file": split_file, "sizes": sizes, "label_file": None,
                                "representations": {"abstract": rep}}))
    return path


def test_compare_refuses_runs_of_different_splits_naming_them(tmp_path):
    """Two venue runs on the same 8 test papers and labels but a split with 40 train papers in one and 20 in the
    other were compared as if only the model differed; now refused, naming both runs and split files."""
    a = _venue(tmp_path / "a.json", {"train": 40, "dev": 10, "test": 8}, "split_a.json")
    same = _venue(tmp_path / "same.json", {"train": 40, "dev": 10, "test": 8}, "split_a.json")
    b = _venue(tmp_path / "b.json", {"train": 20, "dev": 10, "test": 8}, "split_b.json")
    out = compare_probe_results(a, same, n_perm=20)
    assert out["abstract/macro-F1"]["delta"] == 0.0
    with pytest.raises(ValueError, match=r"a\.json and .*b\.json come from different splits .*split_a\.json and "
                                         r"split_b\.json"):
        compare_probe_results(a, b, n_perm=20)


def test_compare_refuses_same_author_runs_of_different_pools(tmp_path):
    per_query = {"q0": {"MAP": 0.5, "nDCG@10": 0.6}, "q1": {"MAP": 1.0, "nDCG@10": 1.0}}
    for name, pool in (("a", 10), ("b", 12)):
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {"format": "same-author", "split_file": f"s_{name}.json", "pool": pool, "n_queries": 2,
             "representations": {"abstract": {"metrics": {}, "ci95": {}, "per_query": per_query}}}))
    with pytest.raises(ValueError, match=r"different splits .*pool 10 and 12"):
        compare_probe_results(tmp_path / "a.json", tmp_path / "b.json", n_perm=5)


def test_choices_do_not_move_with_adversarial_test_labels_and_macro_f1_is_sklearns():
    from sklearn.metrics import f1_score

    from aspire.benchmarks.venue import macro_f1

    rng = np.random.default_rng(3)
    X = {s: rng.normal(size=(k, 4)) for s, k in (("train", 30), ("dev", 20), ("test", 20))}
    yc = {s: np.where(x[:, 0] > 0, "a", "b") for s, x in X.items()}
    yr = {s: 2000 + 2 * x[:, 1] for s, x in X.items()}
    v, r = venue_probe(X, yc), year_probe(X, yr)
    v2 = venue_probe(X, dict(yc, test=yc["test"][::-1]))
    r2 = year_probe(X, dict(yr, test=-yr["test"]))
    assert v2["chosen"] == v["chosen"] and list(v2["pred"]) == list(v["pred"])
    assert r2["chosen"] == r["chosen"] and np.allclose(r2["pred"], r["pred"])
    assert macro_f1(yc["test"], v["pred"]) == pytest.approx(f1_score(yc["test"], v["pred"], average="macro"))
