"""SciRepEval's other formats on the ACL abstracts (issue 42): the probes, metrics, splits and label files on
tiny synthetic data with known answers; the committed split's disjointness."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

from aspire.benchmarks import BENCHMARKS
from aspire.benchmarks.acl_formats import (
    SPLIT_FILE,
    check_disjoint,
    checksum,
    heldout_ids,
    labels_for,
    load_split,
    paired_papers_test,
    read_label_file,
)
from aspire.benchmarks.same_author import build_pools, counted_names, qrels_of
from aspire.benchmarks.venue import macro_f1, venue_class
from aspire.benchmarks.year import kendall_tau, rmse
from aspire.evaluate.probes import (
    ALPHA_GRID,
    C_GRID,
    compare_probe_results,
    proximity_scores,
    run_format,
    venue_probe,
    year_probe,
)

FORMATS = ("venue", "year", "same-author")


def test_the_formats_are_registered_with_a_suite_runner():
    from aspire.evaluate.suite import RUNNERS

    for name in FORMATS:
        assert BENCHMARKS[name].folder == "acl-anthology" and name in RUNNERS


@pytest.mark.parametrize("name", FORMATS)
def test_each_format_is_an_evaluate_command_with_help_and_examples(name, capsys):
    from aspire.cli import main as aspire_main

    with pytest.raises(SystemExit) as exc:
        aspire_main(["evaluate", name, "--help"])
    text = capsys.readouterr().out
    assert exc.value.code == 0 and "--model" in text and "--out" in text
    examples = text.split("examples:")[-1].splitlines()
    assert sum(line.strip().startswith(f"aspire evaluate {name} ") for line in examples) >= 2


def test_every_format_has_an_ensemble_runner_and_concatenates_unit_features():
    from aspire.evaluate.probes import ConcatFeatures
    from aspire.evaluate.suite import RUNNERS

    assert set(RUNNERS) == set(BENCHMARKS) and all(r.ensemble is not None for r in RUNNERS.values())
    a = _Features({"p": np.array([3.0, 4.0]), "q": np.array([0.0, 2.0])})
    b = _Features({"p": np.array([1.0, 0.0]), "q": np.array([1.0, 0.0])})
    X = ConcatFeatures([a, b]).of(["p", "q"])["abstract"]
    assert X.shape == (2, 4) and np.allclose(np.linalg.norm(X, axis=1), 1.0)
    assert X[0] @ X[1] == pytest.approx((0.8 + 1.0) / 2)  # the mean of the two models' cosines


def test_benchmark_modules_import_neither_torch_nor_sklearn():
    code = ("import sys, aspire.benchmarks.venue, aspire.benchmarks.year, aspire.benchmarks.same_author; "
            "print(sorted(m for m in ('torch', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_venue_rule_labels_multi_venue_papers():
    assert venue_class(["wmt", "ws"]) == "wmt"
    assert venue_class(["lrec", "coling"]) == "lrec"  # the specific community wins over the main conference
    assert venue_class(["acl", "ijcnlp"]) == "main"
    assert venue_class(["semeval", "conll"]) is None  # two communities: unlabelled
    assert venue_class(["ranlp"]) is None and venue_class([]) is None and venue_class(None) is None


def test_metrics_known_answers():
    y = np.array(["a", "a", "b", "b"])
    assert macro_f1(y, y) == 1.0
    # a: tp 1, fp 0, fn 1 -> 2/3; b: tp 2, fp 1, fn 0 -> 4/5
    assert macro_f1(y, np.array(["a", "b", "b", "b"])) == pytest.approx((2 / 3 + 4 / 5) / 2)
    years = np.array([2000.0, 2005.0, 2010.0, 2020.0])
    assert kendall_tau(years, years * 2 + 1) == pytest.approx(1.0)
    assert kendall_tau(years, -years) == pytest.approx(-1.0)
    assert rmse(years, years + 3) == pytest.approx(3.0)


def test_separable_toy_set_gives_macro_f1_one():
    rng = np.random.default_rng(0)
    centres = np.eye(3, 8) * 10
    X, y = {}, {}
    for split, n in (("train", 20), ("dev", 6), ("test", 9)):
        labels = np.repeat(np.arange(3), n // 3)
        X[split] = centres[labels] + rng.normal(scale=0.1, size=(len(labels), 8))
        y[split] = np.array([f"c{k}" for k in labels])
    probe = venue_probe(X, y)
    assert macro_f1(y["test"], probe["pred"]) == 1.0
    assert probe["chosen"]["C"] in C_GRID


def test_year_linear_in_features_gives_tau_one():
    rng = np.random.default_rng(1)
    w = rng.normal(size=6)
    X = {s: rng.normal(size=(n, 6)) for s, n in (("train", 60), ("dev", 20), ("test", 30))}
    y = {s: 2010 + 3 * (x @ w) for s, x in X.items()}
    probe = year_probe(X, y)
    assert kendall_tau(y["test"], probe["pred"]) == pytest.approx(1.0)
    assert rmse(y["test"], probe["pred"]) < 0.5
    assert probe["chosen"]["alpha"] == min(ALPHA_GRID)  # the least regularisation fits an exact line best on dev


def test_same_author_relevance_needs_two_counted_names():
    records = [{"paper_id": "p1", "authors": ["Ann Lee", "Bo Chen"]},
               {"paper_id": "p2", "authors": ["ann  lee", "Bo Chen", "Cy Dee"]},
               {"paper_id": "p3", "authors": ["Ann Lee", "Cy Dee"]},
               {"paper_id": "p4", "authors": []}]
    names = counted_names(records)
    assert names["p2"] == {"ann lee", "bo chen", "cy dee"} and names["p4"] == frozenset()
    qrels = qrels_of(["p1", "p2", "p3", "p4"], names)
    assert qrels["p1"] == {"p2": 1, "p3": 0, "p4": 0} and qrels["p3"] == {"p1": 0, "p2": 1, "p4": 0}
    assert "p4" not in qrels
    prolific = counted_names(records, max_papers=2)  # "ann lee" is on 3 papers: it counts for nothing
    assert "ann lee" not in prolific["p1"] and qrels_of(["p1", "p3"], prolific) == {}


def test_proximity_known_ranking():
    X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    qrels = {"a": {"b": 1, "c": 0}, "c": {"a": 1, "b": 0}}
    scores = proximity_scores(X, ["a", "b", "c"], qrels)
    assert scores["a"]["MAP"] == pytest.approx(1.0)  # b is a's nearest
    assert scores["c"]["MAP"] == pytest.approx(0.5)  # c ranks b (0.11) above a (0.0)


def test_ranking_metrics_known_answers():
    from aspire.benchmarks.same_author import average_precision, ndcg_at

    ranked = np.array([0, 1, 0, 1])  # relevant at ranks 2 and 4: AP = (1/2 + 2/4) / 2
    assert average_precision(ranked) == pytest.approx(0.5)
    assert average_precision(np.array([1, 1, 0])) == 1.0 and average_precision(np.array([0, 0])) == 0.0
    # DCG = 1/log2(3) + 1/log2(5); ideal = 1 + 1/log2(3)
    assert ndcg_at(ranked, 10) == pytest.approx((1 / np.log2(3) + 1 / np.log2(5)) / (1 + 1 / np.log2(3)))
    assert ndcg_at(np.array([0] * 10 + [1]), 10) == 0.0


def test_pools_are_disjoint_and_related():
    records = [{"paper_id": f"p{i}", "authors": [f"A{i // 3}", f"B{i // 3}"]} for i in range(30)]
    names = counted_names(records)
    pools = build_pools([r["paper_id"] for r in records], names, {"test": 9, "dev": 6}, seed=0)
    assert len(pools["test"]) == 9 and len(pools["dev"]) == 6 and not set(pools["test"]) & set(pools["dev"])
    assert len(qrels_of(pools["test"], names)) == 9  # every paper came with its group


def test_committed_split_is_disjoint_and_checked(tmp_path):
    data = load_split()
    sets = [set(ids) for parts in data["splits"].values() for ids in parts.values()]
    assert sum(map(len, sets)) == len(set().union(*sets))
    assert len(heldout_ids()) == sum(len(ids) for parts in data["splits"].values()
                                     for name, ids in parts.items() if name != "train")
    edited = json.loads(SPLIT_FILE.read_text())
    edited["splits"]["venue_year"]["test"].append(edited["splits"]["venue_year"]["train"][0])
    path = tmp_path / "split.json"
    path.write_text(json.dumps(edited))
    with pytest.raises(ValueError, match="checksum"):
        load_split(path)
    edited["checksum"] = checksum(edited["splits"])
    path.write_text(json.dumps(edited))
    with pytest.raises(ValueError, match="in two splits"):
        load_split(path)
    with pytest.raises(ValueError, match="paper x is in two splits"):
        check_disjoint({"a": {"train": ["x"]}, "b": {"test": ["x"]}})


@pytest.mark.parametrize("line, message", [
    ({"paper_id": "p2", "label": ""}, r"labels.jsonl:2 \(paper p2\): empty class"),
    ({"paper_id": "p2"}, r"labels.jsonl:2 \(paper p2\): missing label"),
    ({"paper_id": "p2", "label": None}, r"labels.jsonl:2 \(paper p2\): missing label"),
    ({"paper_id": "zz", "label": "x"}, r"labels.jsonl:2: paper zz is in no split"),
    ({"label": "x"}, r"labels.jsonl:2: no 'paper_id'"),
])
def test_bad_class_label_file_names_the_record(tmp_path, line, message):
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"paper_id": "p1", "label": "a"}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=message):
        read_label_file(path, "class", ["p1", "p2"])


def test_bad_number_labels_and_a_class_without_training_paper(tmp_path):
    path = tmp_path / "years.jsonl"
    path.write_text(json.dumps({"paper_id": "p1", "label": "2019"}) + "\n")
    with pytest.raises(ValueError, match=r"years.jsonl:1 \(paper p1\): label '2019' is not a finite number"):
        read_label_file(path, "number")
    splits = {"train": ["p1"], "dev": ["p2"], "test": ["p3"]}
    with pytest.raises(ValueError, match="paper p3 \\(test\\) has class 'b', which no training paper has"):
        labels_for(splits, {"p1": "a", "p2": "a", "p3": "b"}, "class")
    with pytest.raises(ValueError, match="1 paper\\(s\\) of the dev split have no label, e.g. p2"):
        labels_for(splits, {"p1": "a", "p3": "a"}, "class")


def test_paired_test_of_identical_predictions_is_p_one():
    y = np.array([0, 1, 1, 0, 1])
    res = paired_papers_test(macro_f1, y, y, y, n_perm=50, n_boot=50)
    assert res["delta"] == 0.0 and res["p_value"] == 1.0


class _Features:
    """Stand-in for `aspire.evaluate.probes.Features`: fixed vectors by paper id."""

    def __init__(self, vectors):
        self.vectors, self.seconds = vectors, 0.0

    def of(self, ids):
        X = np.stack([self.vectors[p] for p in ids])
        return {"abstract": X, "sentences": X}

    def fingerprint(self):
        return "toy"


def test_run_format_end_to_end_on_a_toy_split(tmp_path):
    ids = [f"p{i}" for i in range(30)]
    body = {"venue_year": {"train": ids[:12], "dev": ids[12:18], "test": ids[18:24]}, "same_author": {"test": ids[24:]}}
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"splits": body, "checksum": checksum(body)}))
    venues = ["wmt", "bea", "sigdial"]
    records = {p: {"paper_id": p, "venues": [venues[i % 3]], "year": str(2000 + i), "title": p,
                   "authors": [f"A{i % 3}", f"B{i % 3}"]} for i, p in enumerate(ids)}
    vectors = {p: np.array([10.0 * (i % 3 == k) for k in range(3)] + [float(i)]) for i, p in enumerate(ids)}
    feats = _Features(vectors)
    for name in FORMATS:
        res = run_format(name, tmp_path, "toy", tmp_path / name, features=feats, context=({}, records), split_file=split)
        assert json.loads((tmp_path / name / "results.json").read_text())["format"] == name
        rep = res["representations"]["abstract"]
        if name == "venue":
            assert rep["metrics"]["macro-F1"] == 1.0
        elif name == "year":
            assert rep["metrics"]["Kendall tau"] == pytest.approx(1.0)
        else:  # the two papers of each author pair are nearest each other by the first coordinates
            assert res["n_queries"] == 6 and rep["metrics"]["MAP"] == pytest.approx(1.0)
    same = compare_probe_results(tmp_path / "venue", tmp_path / "venue", n_perm=20)
    assert same["abstract/macro-F1"]["delta"] == 0.0
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"paper_id": p, "label": "x" if p != "p3" else ""}) + "\n" for p in ids[:24]))
    with pytest.raises(ValueError, match=r"labels.jsonl:4 \(paper p3\): empty class"):
        run_format("venue", tmp_path, "toy", tmp_path / "v2", features=feats, context=({}, records),
                   split_file=split, label_file=labels)


def test_format_titles_are_the_dev_and_test_papers(tmp_path):
    from aspire.benchmarks.heldout import format_titles

    body = {"venue_year": {"train": ["a"], "dev": ["b"], "test": ["c"]}, "same_author": {"test": ["d"]}}
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"splits": body, "checksum": checksum(body)}))
    (tmp_path / "acl-anthology").mkdir()
    with gzip.open(tmp_path / "acl-anthology" / "papers.jsonl.gz", "wt") as handle:
        for pid in "abcde":
            handle.write(json.dumps({"paper_id": pid, "title": f"Title {pid.upper()}!", "abstract": "x"}) + "\n")
    assert format_titles(tmp_path, split) == {"titleb", "titlec", "titled"}
