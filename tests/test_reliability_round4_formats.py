"""Round 4 of the reliability work on the SciRepEval formats over the ACL abstracts (venue, year, same-author),
context2doc's split and runs, and the statistics they report: split files of the wrong shape, papers missing from
the ACL records, labels that cannot be learnt or scored, metrics on misaligned predictions and paired tests of
undefined or empty figures. Each bad input is refused with a message naming its file, key or record."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aspire.benchmarks import context2doc as c2d
from aspire.benchmarks.acl_formats import bootstrap_papers, checksum, heldout_ids, load_split, paired_papers_test
from aspire.benchmarks.same_author import load_same_author
from aspire.benchmarks.stats import UnitScores, paired_test
from aspire.benchmarks.venue import load_venue_task, macro_f1
from aspire.benchmarks.year import kendall_tau, load_year_task, rmse


def _split(tmp_path, body, name="split.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"splits": body, "checksum": checksum(body)}))
    return path


def _records(ids, **fields):
    return {p: {"paper_id": p, "venues": ["wmt"], "year": "2019", "authors": ["X Y", "Z W"], **fields} for p in ids}


BODY = {"venue_year": {"train": ["a", "b"], "dev": ["c"], "test": ["d"]}, "same_author": {"test": ["e", "f", "g"]}}


# ---- the SciRepEval-format split file -----------------------------------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ("{}", "a split file is a JSON object with 'splits'"),
    ("[]", "a split file is a JSON object with 'splits'"),
    ("{not json", "not JSON"),
    (json.dumps({"splits": {"venue_year": ["a"]}, "checksum": checksum({"venue_year": ["a"]})}),
     r"splits.venue_year is not an object of splits"),
    (json.dumps({"splits": {"venue_year": {"train": "abc"}}, "checksum": checksum({"venue_year": {"train": "abc"}})}),
     r"splits.venue_year.train is not a list of paper ids"),
])
def test_scirepeval_split_of_the_wrong_shape_is_refused_naming_the_file(tmp_path, text, message):
    path = tmp_path / "split.json"
    path.write_text(text)
    for load in (load_split, heldout_ids):  # a string of ids was read letter by letter as paper ids
        with pytest.raises(ValueError, match=f"split.json: .*{message}"):
            load(path)


@pytest.mark.parametrize("body, message", [
    ({"venue_year": {"dev": ["c"], "test": ["d"]}, "same_author": {"test": ["e"]}}, "has no 'train' papers"),
    ({"venue_year": {"train": ["a"], "test": ["d"]}, "same_author": {"test": ["e"]}}, "has no 'dev' papers"),
    ({"venue_year": {"train": ["a"], "dev": [], "test": ["d"]}, "same_author": {"test": ["e"]}}, "has no 'dev' papers"),
])
def test_venue_and_year_need_train_dev_and_test_papers(tmp_path, body, message):
    split = _split(tmp_path, body)
    for load in (load_venue_task, load_year_task):  # year loaded a split with no train part without a word
        with pytest.raises(ValueError, match=f"split.json: splits.venue_year {message}"):
            load(_records("abcde"), split)


def test_same_author_needs_its_part_of_the_split(tmp_path):
    split = _split(tmp_path, {"venue_year": BODY["venue_year"]})
    with pytest.raises(ValueError, match="split.json: no splits.same_author"):
        load_same_author(_records("abcdefg"), "test", split)


def test_split_papers_missing_from_the_acl_records_are_named(tmp_path):
    split = _split(tmp_path, BODY)
    records = _records("abcdefg")
    del records["d"], records["f"]
    for load in (load_venue_task, load_year_task):
        with pytest.raises(ValueError, match=r"1 paper\(s\) of the (venue|year) split of .*split.json are not in the "
                                             r"ACL file \(or have no abstract\), e.g. d"):
            load(records, split)
    with pytest.raises(ValueError, match=r"same-author test pool of .*split.json are not in the ACL file .*e.g. f"):
        load_same_author(records, "test", split)


def test_acl_records_with_fields_of_the_wrong_type_are_named(tmp_path):
    split = _split(tmp_path, BODY)
    with pytest.raises(ValueError, match="ACL paper a: 'venues' is 'wmt', not a list of venue ids"):
        load_venue_task(_records("abcdefg", venues="wmt"), split)
    # an author string was read letter by letter: papers sharing two letters were "same-author"
    with pytest.raises(ValueError, match="ACL paper a: 'authors' is 'Xavier Yu', not a list of names"):
        load_same_author(_records("abcdefg", authors="Xavier Yu"), "test", split)
    records = _records("abcdefg")
    records["b"]["year"] = 2019.5
    with pytest.raises(ValueError, match="ACL paper b: year 2019.5 is not a whole number"):
        load_year_task(records, split)


def test_a_same_author_pool_without_a_query_is_refused(tmp_path):
    split = _split(tmp_path, BODY)
    with pytest.raises(ValueError, match=r"same-author test pool of .*split.json \(3 papers\) has no query"):
        load_same_author(_records("abcdefg", authors=None), "test", split)


def test_labels_that_cannot_be_learnt_or_scored_are_refused(tmp_path):
    split = _split(tmp_path, BODY)
    with pytest.raises(ValueError, match="every training paper has the class 'wmt': a classifier needs two"):
        load_venue_task(_records("abcdefg"), split)  # was sklearn's error from inside the probe
    two_test = _split(tmp_path, {"venue_year": {"train": ["a", "b"], "dev": ["c"], "test": ["d", "e"]}}, "two.json")
    records = _records("abcde")
    records["a"]["year"], records["e"]["year"] = "2018", 2017  # an int year is a year
    assert load_year_task(records, two_test)[1] == {"a": 2018.0, "b": 2019.0, "c": 2019.0, "d": 2019.0, "e": 2017.0}
    with pytest.raises(ValueError, match="every paper of the train split has the label 2019.0: a regression"):
        load_year_task(_records("abcde"), two_test)
    years = tmp_path / "years.jsonl"
    years.write_text("".join(json.dumps({"paper_id": p, "label": y}) + "\n"
                             for p, y in zip("abcde", (2000, 2010, 2005, 2005, 2005))))
    with pytest.raises(ValueError, match="every paper of the test split has the label 2005.0: Kendall's tau"):
        load_year_task({}, two_test, years)  # tau was reported as NaN


# ---- metrics and paired tests on test papers ----------------------------------------------------------------------


@pytest.mark.parametrize("metric", [macro_f1, rmse, kendall_tau])
def test_metrics_refuse_predictions_of_another_length(metric):
    y = np.array([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="one prediction per paper: 4 (labels|years), 1 predictions"):
        metric(y, np.array([1.0]))  # rmse and macro-F1 broadcast it against every paper


def test_paired_papers_test_refuses_misaligned_runs():
    y = np.arange(5.0)
    with pytest.raises(ValueError, match="one per test paper: 5 labels, 5 and 4 predictions"):
        paired_papers_test(rmse, y, y, y[:4], n_perm=5, n_boot=5)
    with pytest.raises(ValueError, match="one per test paper: 5 labels, 5 and 1 predictions"):
        paired_papers_test(rmse, y, y, y[:1], n_perm=5, n_boot=5)
    with pytest.raises(ValueError, match="at least one permutation"):
        paired_papers_test(rmse, y, y, y + 1, n_perm=0, n_boot=5)
    with pytest.raises(ValueError, match="no test paper"):
        bootstrap_papers(rmse, y[:0], y[:0], n_boot=5)


def test_paired_test_of_an_undefined_metric_is_not_significant():
    y = np.array([2010.0, 2012, 2014, 2016, 2018])
    constant, good = np.full(5, 2015.0), np.array([2011.0, 2012, 2013, 2017, 2019])
    res = paired_papers_test(kendall_tau, y, constant, good, n_perm=50, n_boot=50)
    assert np.isnan(res["delta"]) and np.isnan(res["p_value"])  # was p = 1/51: "significant"
    same = paired_papers_test(rmse, y, good, good, n_perm=50, n_boot=50)
    assert same["p_value"] == 1.0


def test_paired_test_over_units_refuses_no_unit_and_infinite_scores():
    empty = UnitScores.means({})
    with pytest.raises(ValueError, match="at least one unit"):
        paired_test(empty, empty, n_perm=20, n_boot=20)  # was p = 1/21 for two empty runs
    with pytest.raises(ValueError, match="finite numbers"):
        UnitScores.means({"q1": float("inf"), "q2": 0.0})


# ---- context2doc --------------------------------------------------------------------------------------------------


def _cocite(path, abstract=("A.", "B.")):
    path.parent.mkdir(parents=True, exist_ok=True)
    recs = [{"citing_paper_id": f"C{i}", "context": f"We follow Smith (2010) in sentence {i}.",
             "cited": [{"paper_id": f"P{i % 3}", "title": f"T{i % 3}",
                        "abstract": abstract if i % 3 == 0 else ["A.", "B."]}]} for i in range(30)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_context2doc_refuses_a_cited_abstract_that_is_one_string(tmp_path):
    source = _cocite(tmp_path / "cc" / "cocitations.jsonl", "One sentence. Two sentences.")
    # it became a candidate with one sentence a character
    with pytest.raises(ValueError, match=r"cocitations.jsonl:1: cited paper P0: 'abstract' must be a list of sentences"):
        c2d.make_split(source)


@pytest.mark.parametrize("edit, message", [
    (lambda m: [], "a context2doc split file is a JSON object"),
    (lambda m: {k: v for k, v in m.items() if k != "source_sha256"}, "a context2doc split file is a JSON object"),
    (lambda m: {**m, "splits": {**m["splits"], "test": {"queries": "L1"}}}, r"splits.test.queries is not a list"),
    (lambda m: {**m, "splits": {k: v for k, v in m["splits"].items() if k != "dev"}}, r"splits.dev.queries"),
    (lambda m: {**m, "splits": {**m["splits"], "test": {**m["splits"]["test"],
                                                        "queries": m["splits"]["train"]["queries"][:1]}}},
     r"query L\d+ is in two splits: train and test"),
])
def test_context2doc_split_of_the_wrong_shape_is_refused_naming_the_file(tmp_path, edit, message):
    meta = edit(c2d.make_split(_cocite(tmp_path / "cc" / "cocitations.jsonl")))
    if isinstance(meta, dict):
        meta["checksum"] = c2d._checksum(meta["splits"])
    (tmp_path / "split.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=f"split.json: {message}"):
        c2d.load_split(tmp_path / "split.json")
    (tmp_path / "split.json").write_text("{broken")
    with pytest.raises(ValueError, match="split.json: not JSON"):
        c2d.load_split(tmp_path / "split.json")


def test_context2doc_run_refuses_nan_or_misshapen_scores(tmp_path):
    from aspire.evaluate.context2doc_run import to_run

    source = _cocite(tmp_path / "cc" / "cocitations.jsonl")
    (tmp_path / "split.json").write_text(json.dumps(c2d.make_split(source)))
    bench = c2d.load_context2doc(tmp_path / "cc", "train", tmp_path / "split.json")
    scores = np.ones((len(bench.queries), len(bench.candidates)))
    assert set(to_run(bench, scores, 10)) == set(bench.queries)
    with pytest.raises(ValueError, match=r"scores are \(1, 3\), expected one row a query"):
        to_run(bench, scores[:1], 10)  # the other queries were dropped from the run
    scores[1, 2] = np.nan
    with pytest.raises(ValueError, match=rf"query {list(bench.queries)[1]}: NaN scores for 1 of 3 candidates: \['P2'\]"):
        to_run(bench, scores, 10)  # the NaN candidate was ranked last without a word


def test_read_acl_rejects_a_non_string_title_naming_it(tmp_path, monkeypatch):
    from aspire.data.acl import read_acl

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "papers.jsonl"
    path.write_text(json.dumps({"paper_id": "a", "title": "T", "abstract": "One. Two."}) + "\n"
                    + json.dumps({"paper_id": "b", "title": 5, "abstract": "One. Two."}) + "\n")
    papers, stats = read_acl(path, frozenset({"x"}), 0)  # crashed on title.lower() before naming the record
    assert [p.paper_id for p in papers] == ["a"] and "title must be a string" in stats["rejected"][f"{path}:2"]


def test_format_titles_pass_over_a_record_whose_title_is_not_a_string(tmp_path):
    import gzip

    from aspire.benchmarks.heldout import format_titles

    split = _split(tmp_path, {"venue_year": {"train": ["a"], "dev": ["b"], "test": ["c"]}})
    (tmp_path / "acl-anthology").mkdir()
    with gzip.open(tmp_path / "acl-anthology" / "papers.jsonl.gz", "wt") as handle:
        for pid, title in (("a", "A"), ("b", 5), ("c", "Title C")):
            handle.write(json.dumps({"paper_id": pid, "title": title, "abstract": "x"}) + "\n")
    assert format_titles(tmp_path, split) == {"titlec"}  # crashed on (5).lower(); read_acl rejects paper b
