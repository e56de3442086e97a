"""Round 21: the held-out code's leftovers. One wording for a null benchmarks folder (`null_benchmarks_dir`), one
gram builder (`ngrams` joins `_gram_tuples`), one `removed_benchmark_by` tail for both co-citation inputs
(`removed_benchmark_entry`), and the containment rule counted wherever it ran, zero included."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from aspire.benchmarks.heldout import (
    Containment,
    _gram_tuples,
    excluded_papers,
    excluded_titles,
    ngrams,
    not_removed,
    null_benchmarks_dir,
)
from aspire.data.acl import HeldOut, normalise_title, read_acl, removed_benchmark_entry, removed_by
from aspire.data.cocite import IngestConfig, ingest_records
from aspire.data.s2orc import mine_s2orc
from tests.test_reliability_round18_heldout import BENCH
from tests.test_reliability_round20_s2orc import PAPERS, _bench_held, _s2orc, _sentences, _write


def test_a_null_benchmarks_folder_is_worded_once_naming_the_setting_and_how_to_switch_it_on(caplog):
    """`excluded_papers`, `excluded_titles` and the `context2doc` task's `_cited_benchmark` said "X is null: benchmark
    papers are NOT removed" in three copies, none saying how to switch the check on; now one function words all."""
    from aspire.train.tasks import _cited_benchmark

    with caplog.at_level(logging.WARNING):
        assert excluded_papers(None, "crop task: tasks[].benchmarks_dir") == (HeldOut(), {})
        assert excluded_titles(None, "benchmarks_dir") == (frozenset(), {})
        assert _cited_benchmark(SimpleNamespace(name="context2doc", benchmarks_dir=None)) == HeldOut()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [null_benchmarks_dir("crop task: tasks[].benchmarks_dir"), null_benchmarks_dir("benchmarks_dir"),
                    null_benchmarks_dir("context2doc task: tasks[].benchmarks_dir", "CSFCube and reviewer-set papers")]
    assert said[0] == ("crop task: tasks[].benchmarks_dir is null: benchmark papers are NOT removed; set it to the "
                       "benchmarks' data folder (../shared/data) to remove them")
    assert said[2].startswith("context2doc task: tasks[].benchmarks_dir is null: CSFCube and reviewer-set papers are "
                              "NOT removed; set it to")
    assert not_removed("a is off", "b", "switch a on") == "a is off: b are NOT removed; switch a on"


def _brute_grams(text: str, n: int) -> frozenset[str]:
    """The old `ngrams`, written out: the lower-cased `\\w+` words (of the NFC text, as `words` reads it since a
    combining accent no longer cuts a word), every window of `n` joined by a space."""
    import re
    import unicodedata

    w = re.findall(r"\w+", unicodedata.normalize("NFC", text).lower())
    return frozenset(" ".join(w[i : i + n]) for i in range(len(w) - n + 1))


@pytest.mark.slow
def test_ngrams_and_gram_tuples_agree_on_the_real_csfcube_abstracts(shared_data):
    """`ngrams` is now `_gram_tuples` joined: on every CSFCube abstract (title too) the two forms name the same grams,
    and both the old joined form (`_brute_grams`), for n = 1, 2, 5 and 8."""
    rows = [json.loads(line) for line in open(shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl",
                                              encoding="utf-8") if line.strip()]
    assert len(rows) > 100
    for row in rows:
        for text in (" ".join(row["abstract"]), row["title"]):
            for n in (1, 2, 5, 8):
                tuples = _gram_tuples(text, n)
                assert ngrams(text, n) == {" ".join(g) for g in tuples} == _brute_grams(text, n), (row["paper_id"], n)
                assert len(tuples) == len(ngrams(text, n))  # words hold no space: joining merges no two grams


def test_a_gram_of_no_word_is_refused():
    """n = 0 gave the one empty gram {""} (so `containment(a, b, 0)` was 1.0 for any two texts) and n < 0 grams of
    the text's tail; both are a ValueError now."""
    for n in (0, -1):
        with pytest.raises(ValueError, match=f"n={n}"):
            ngrams("one two three", n)
        with pytest.raises(ValueError, match="at least 1"):
            Containment(["one two three"], n=n)


def test_removed_by_counts_the_containment_rule_it_ran_zero_included():
    """A `HeldOut` with a containment rule ran it: its count is listed at 0 too (it was left out, so a report could not
    tell "ran, none" from "not run"); one without a rule lists the three others; no `exclude`: as before."""
    ran = HeldOut(frozenset({"t"}), containment=Containment([BENCH]))
    assert removed_by(["title", None], ran) == {"title": 1, "paper_id": 0, "abstract": 0, "containment": 0}
    assert removed_by([], ran) == {"title": 0, "paper_id": 0, "abstract": 0, "containment": 0}
    assert removed_by(["title"], HeldOut(frozenset({"t"}), frozenset({"p"}))) == {"title": 1, "paper_id": 0,
                                                                                 "abstract": 0}
    assert removed_by([None, "title"]) == {"title": 1, "paper_id": 0, "abstract": 0}
    assert removed_by(["containment"], ran) == {"title": 0, "paper_id": 0, "abstract": 0, "containment": 1}


def test_removed_benchmark_entry_is_the_one_tail_of_both_ingest_reports():
    held = _bench_held()
    assert removed_benchmark_entry(False, held, ["title"]) == {}
    assert removed_benchmark_entry(True, None, []) == {"removed_benchmark_by": None}
    assert removed_benchmark_entry(True, held, ["title"]) == {
        "removed_benchmark_by": {"title": 1, "paper_id": 0, "abstract": 0, "containment": 0}}


def test_both_ingest_inputs_report_a_containment_rule_that_removed_nothing(tmp_path):
    """Input B (`mine_s2orc`) and input A (`ingest_records`) on one co-citation whose benchmark paper goes by title:
    `removed_benchmark_by` names the containment rule at 0 (it was missing: as from an ingest before that rule)."""
    fulltext, abstracts = _s2orc(tmp_path, [["A", "B", "T1"]])
    b = mine_s2orc(fulltext, abstracts, tmp_path / "b", IngestConfig(splitter="regex"), held_out=(),
                   held_out_papers=_bench_held())
    cited = [{"paper_id": pid, "title": PAPERS[pid][0], "abstract": PAPERS[pid][1]} for pid in ("A", "B", "T1")]
    record = {"citing_paper_id": "Z1", "context": "Alpha beta gamma delta cites [1,2,3].", "cited": cited}
    a = ingest_records(_write(tmp_path / "records.jsonl", [record]), tmp_path / "a", held_out=(),
                       held_out_papers=_bench_held())
    expected = {"title": 1, "paper_id": 0, "abstract": 0, "containment": 0}
    assert b["removed_benchmark_by"] == a["removed_benchmark_by"] == expected
    assert json.loads((tmp_path / "a" / "report.json").read_text())["removed_benchmark_by"] == expected


def test_read_acl_reports_a_containment_rule_that_removed_nothing(tmp_path, monkeypatch):
    """The ACL source (every task's and the teacher's): one paper out by title, none by containment: listed at 0."""
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    read_acl.cache_clear()
    rows = [{"paper_id": "K1", "title": "Kept paper", "abstract": "Nothing held out here. Two sentences."},
            {"paper_id": "T1", "title": "Semi-supervised Adaptation!", "abstract": " ".join(_sentences("Other. Text."))}]
    path = _write(tmp_path / "acl.jsonl", rows)
    held = HeldOut(frozenset({normalise_title("Semi-supervised adaptation")}), frozenset({"X"}),
                   containment=Containment([BENCH]))
    papers, stats = read_acl(path, held, 0)
    assert [p.paper_id for p in papers] == ["K1"]
    assert stats["removed_benchmark_by"] == {"title": 1, "paper_id": 0, "abstract": 0, "containment": 0}
    read_acl.cache_clear()
