"""Round 23: the SciRepEval-style formats (venue, year, same-author) and the reviewer benchmark, checked against
sklearn / scipy and hand-made inputs."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from aspire.benchmarks.acl_formats import read_label_file
from aspire.benchmarks.reviewers import load_ratings
from aspire.benchmarks.venue import macro_f1
from aspire.benchmarks.year import _year_label, kendall_tau, rmse


@pytest.mark.parametrize("metric", [macro_f1, rmse, kendall_tau])
def test_format_metrics_refuse_zero_papers(metric):
    """Over no paper macro-F1, RMSE and Kendall's tau were NaN, with only a numpy / scipy warning ("Mean of empty
    slice") to show it; now a ValueError, as `bootstrap_papers` and `paired_papers_test` refuse no test paper."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NaN behind a warning either
        with pytest.raises(ValueError, match="at least one paper"):
            metric([], [])


def test_format_metrics_match_sklearn_scipy():
    """The metrics the fix touched still agree with sklearn's macro F1 and scipy's tau-b and a hand RMSE."""
    from scipy.stats import kendalltau
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(2, 25))
        y, p = rng.choice(list("abc"), n), rng.choice(list("abcd"), n)
        assert macro_f1(y, p) == pytest.approx(f1_score(y, p, average="macro", zero_division=0), abs=1e-12)
        yy, pp = rng.integers(2000, 2006, n).astype(float), rng.normal(2003, 2, n)
        if len(set(yy)) > 1:
            assert kendall_tau(yy, pp) == pytest.approx(kendalltau(yy, pp).statistic, abs=1e-12)
        assert rmse(yy, pp) == pytest.approx(float(np.sqrt(np.mean((yy - pp) ** 2))), abs=1e-12)


def test_year_label_refuses_a_digit_float_cannot_read():
    """"²" passes `str.isdigit`, so the record was taken as a year and `float("²")` raised a bare ValueError that
    named no paper; now the message names the paper (and "2019" still reads)."""
    with pytest.raises(ValueError, match=r"ACL paper X1: year '²' is not a whole number"):
        _year_label({"paper_id": "X1", "year": "²"})
    assert _year_label({"paper_id": "X2", "year": "2019"}) == 2019.0
    assert _year_label({"paper_id": "X3", "year": 2019}) == 2019.0


def test_ratings_header_naming_a_column_twice_is_refused(tmp_path):
    """csv.DictReader keeps the last of two like-named columns: with `Expertise2` twice, the first column's ratings
    were replaced by the second's without a word (here reviewer r1's 5.0 for p2 read as 1.0)."""
    path = tmp_path / "evaluations.csv"
    header = ["ParticipantID", "Paper1", "Paper2", "Expertise1", "Expertise2", "Expertise2"]
    path.write_text("\t".join(header) + "\n" + "\t".join(["r1", "p1", "p2", "3", "5", "1"]) + "\n")
    with pytest.raises(ValueError, match=r"evaluations.csv:1: the header names column\(s\) \['Expertise2'\] twice"):
        load_ratings(path)
    path.write_text("\t".join(header[:-1]) + "\n" + "\t".join(["r1", "p1", "p2", "3", "5"]) + "\n")
    assert load_ratings(path) == {"r1": [("p1", 3.0), ("p2", 5.0)]}


def test_label_file_non_string_class_is_named_as_such(tmp_path):
    """A class label that is a number was reported as an "empty class 3"; the message now says what is wrong."""
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"paper_id": "p1", "label": 3}) + "\n")
    with pytest.raises(ValueError, match=r"labels.jsonl:1 \(paper p1\): class 3 is not a string") as err:
        read_label_file(path, "class")
    assert "empty" not in str(err.value)
    path.write_text(json.dumps({"paper_id": "p1", "label": " "}) + "\n")
    with pytest.raises(ValueError, match=r"labels.jsonl:1 \(paper p1\): empty class"):
        read_label_file(path, "class")


def test_reviewer_loss_matches_a_brute_force_loop_on_the_published_predictions(shared_data):
    """The published SPECTER / ELMo predictions: the evaluator's mean over the ten draws equals a loop over the raw
    files written here (ratings read by csv, pairs with a paper outside the draw skipped) and the README's 0.2689 /
    0.3447."""
    import csv
    from itertools import combinations

    from aspire.benchmarks.reviewers import (
        load_reviewer_set,
        prediction_files,
        read_predictions,
        reviewer_units,
        summarize,
    )

    root = shared_data / "reviewer-matching"
    rset = load_reviewer_set(root)
    with open(root / "evaluations.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    rated = {r["ParticipantID"]: [(r[f"Paper{i}"], float(r[f"Expertise{i}"])) for i in range(1, 11) if r[f"Paper{i}"]]
             for r in rows}
    for exp, known in (("specter", 0.2689), ("elmo", 0.3447)):
        files = prediction_files(root / "predictions", exp, rset)
        got = summarize(*reviewer_units(rset, [read_predictions(f) for f in files]), n_boot=10)
        losses = []
        for draw, f in zip(range(1, 11), files):
            subs = json.loads((root / f"d_20_{draw}" / "submissions.json").read_text())
            pred = {k.lstrip("~"): v for k, v in json.loads(f.read_text()).items()}
            loss = top = 0.0
            for reviewer, pairs in rated.items():
                if reviewer not in pred:
                    continue
                for (p1, e1), (p2, e2) in combinations(pairs, 2):
                    if p1 in subs and p2 in subs:
                        d, t = pred[reviewer][p1] - pred[reviewer][p2], e1 - e2
                        top += abs(t)
                        loss += abs(t) if d * t < 0 else abs(t) / 2 if d == 0 else 0.0
            losses.append(loss / top)
        assert got["per_draw"] == pytest.approx(losses, abs=1e-12)
        assert got["loss"] == pytest.approx(float(np.mean(losses)), abs=1e-12)
        assert got["loss"] == pytest.approx(known, abs=5e-5)
        assert got["n_reviewers"] == 58 and got["skipped_pairs"] == 0


def test_committed_split_is_disjoint_balanced_and_outside_the_other_benchmarks(shared_data):
    """The committed split against the real ACL file, recomputed here: checksum and source file, no paper twice, 60 /
    20 / 50 papers of every venue class in train / dev / test, the same-author pools outside venue_year with every
    paper authored, and no split paper's normalised title (lower case, letters and digits) a CSFCube, reviewer-set or
    co-citation paper's."""
    import hashlib
    import re
    from collections import Counter

    from aspire.benchmarks.acl_formats import SPLIT_FILE, heldout_ids
    from aspire.benchmarks.venue import venue_class

    split = json.loads(SPLIT_FILE.read_text())
    body = split["splits"]
    assert hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest() == split["checksum"]
    acl = shared_data / "acl-anthology" / "papers.jsonl.gz"
    assert hashlib.sha256(acl.read_bytes()).hexdigest() == split["source_sha256"]
    records = raw_acl_records(acl)
    ids = [p for parts in body.values() for part in parts.values() for p in part]
    assert len(ids) == len(set(ids)) == 2030 and all(p in records for p in ids)
    for name, n in (("train", 60), ("dev", 20), ("test", 50)):
        classes = Counter(venue_class(records[p]["venues"]) for p in body["venue_year"][name])
        assert len(classes) == 11 and set(classes.values()) == {n}, name
    pools = [p for part in body["same_author"].values() for p in part]
    assert not set(pools) & {p for part in body["venue_year"].values() for p in part}
    assert all(records[p]["authors"] for p in pools)
    assert heldout_ids() == frozenset(p for t in body.values() for s, part in t.items() if s != "train" for p in part)

    def norm(title):
        return re.sub(r"[^0-9a-z]", "", (title or "").lower())

    titles = {norm(json.loads(line)["title"]) for line in open(shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl")
              if line.strip()}
    titles |= {norm(c.get("title")) for line in open(shared_data / "cocite-acl" / "cocitations.jsonl") if line.strip()
               for c in json.loads(line)["cited"]}
    for draw in (shared_data / "reviewer-matching").glob("d_20_*"):
        titles |= {norm(v["content"].get("title")) for v in json.loads((draw / "submissions.json").read_text()).values()}
        for archive in (draw / "archives").glob("*.jsonl"):
            titles |= {norm(json.loads(line)["content"].get("title")) for line in open(archive) if line.strip()}
    titles.discard("")
    assert not [p for p in ids if norm(records[p]["title"]) in titles]


def raw_acl_records(path) -> dict[str, dict]:
    """The ACL file's records that have an abstract, by paper id: a plain loop over the gzip, no project reader."""
    import gzip

    records = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r.get("abstract"):
                records[r["paper_id"]] = r
    return records
