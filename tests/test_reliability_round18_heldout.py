"""Round 18: the word 5-gram containment as a held-out rule (`aspire.benchmarks.heldout.Containment`), and CSFCube's
and the reviewer set's papers left out of the co-citation pipeline and the `context2doc` task
(`cited_benchmark_papers`), each rule against a hand-made benchmark and co-citation records."""

from __future__ import annotations

import json
import logging
import random
from types import SimpleNamespace

import pytest

from aspire.benchmarks.heldout import Containment, containment
from aspire.data.acl import REMOVED_BY, HeldOut, abstract_key, normalise_title, removed_by
from aspire.data.cocite import IngestConfig, ingest_records, iter_jsonl
from aspire.data.papers import Paper
from aspire.paths import REPO

BENCH = ("Statistical machine translation systems are usually trained on large amounts of bilingual text. In this "
         "article we explore the use of semi-supervised model adaptation methods for the effective use of "
         "monolingual data from the source language in order to improve translation quality.")
# the same work reworded at its opening and end, under another title and id: its abstract key differs
REWORDED = ("Machine translation engines learn from parallel text. In this article we explore the use of "
            "semi-supervised model adaptation methods for the effective use of monolingual data from the source "
            "language, and the results improve quality.")
UNRELATED = ("We present a dependency parser for morphologically rich languages. It uses a graph-based decoder and "
             "is evaluated on ten treebanks, where it improves attachment scores.")
OTHER = "A paper that cites nothing benchmark-like. Its abstract is about tagging text with a model of words."


def _held(**kw) -> HeldOut:
    return HeldOut(**{"containment": Containment([BENCH]), **kw})


def _cited(pid: str, title: str, abstract: str) -> dict:
    return {"paper_id": pid, "title": title, "abstract": [s + "." for s in abstract.split(". ") if s]}


def _records(tmp_path, rows) -> str:
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_reworded_abstract_is_under_the_old_rules_cut_and_over_the_containment_rules():
    """The fixture is what the rule is for: no title, id or abstract-key match, containment >= 0.5."""
    assert abstract_key(BENCH) != abstract_key(REWORDED)
    assert containment(BENCH, REWORDED) >= 0.5 and containment(BENCH, UNRELATED) == 0.0
    old = HeldOut(frozenset({normalise_title("Semi-supervised adaptation")}), frozenset({"9223911"}),
                  frozenset({abstract_key(BENCH)}))
    assert old.reason("P07-1004", "Transductive learning for SMT", REWORDED) is None
    new = HeldOut(old.titles, old.paper_ids, old.abstracts, Containment([BENCH]))
    assert new.reason("P07-1004", "Transductive learning for SMT", REWORDED) == "containment"
    assert new.reason("P07-1004", "Transductive learning for SMT", REWORDED.split(". ")) == "containment"  # sentences
    assert new.reason("X1", "A parser", UNRELATED) is None
    assert new.reason("9223911", "", UNRELATED) == "paper_id"  # the rules before it still answer first
    assert REMOVED_BY == ("title", "paper_id", "abstract", "containment") and not new.by_title_only


def test_containment_rule_score_is_the_largest_brute_force_containment():
    rng = random.Random(3)
    vocab = ["a", "b", "c", "d", "e", "f"]
    bench = [" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 20))) for _ in range(20)]
    rule = Containment(bench, threshold=0.5)
    for _ in range(200):
        text = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 25)))
        want = max((c for b in bench if (c := containment(b, text)) is not None), default=0.0)
        assert rule.score(text) == pytest.approx(want)
        assert rule.matches(text) == (want >= 0.5)


def test_containment_rule_is_hashable_by_value_and_joins():
    a, b = Containment([BENCH]), Containment([BENCH])
    assert a == b and hash(a) == hash(b) and HeldOut(containment=a) == HeldOut(containment=b)
    assert Containment([BENCH], threshold=0.2) != a
    joined = HeldOut(titles=frozenset({"t"})).union(HeldOut(containment=a))
    assert joined.containment == a and joined.reason("x", "", REWORDED) == "containment"
    both = HeldOut(containment=a).union(HeldOut(containment=Containment([UNRELATED])))
    assert both.reason("x", "", UNRELATED) == "containment" and both.reason("x", "", REWORDED) == "containment"
    with pytest.raises(ValueError, match="cannot be joined"):
        a.union(Containment([UNRELATED], threshold=0.2))
    with pytest.raises(ValueError, match="threshold"):
        Containment([BENCH], threshold=0)


def test_removed_by_lists_containment_when_it_removed_something():
    assert removed_by([None, "title"]) == {"title": 1, "paper_id": 0, "abstract": 0}
    assert removed_by(["containment", None]) == {"title": 0, "paper_id": 0, "abstract": 0, "containment": 1}


def test_the_experiment_script_uses_the_package_containment():
    import aspire.benchmarks.heldout as heldout
    from experiments import check_reworded_leak as script

    assert script.GramIndex is heldout.GramIndex and script.containment is heldout.containment
    assert script.ngrams is heldout.ngrams and script.N == heldout.GRAM_WORDS == 5


# ---- the co-citation pipeline --------------------------------------------------------------------------------

def _four_rule_records():
    """Five records; four each cite a benchmark paper named by one rule beside two other papers, one cites two
    benchmark papers beside one other (so it is left with fewer than two and dropped)."""
    a, b, c = _cited("A", "Paper A", OTHER), _cited("B", "Paper B", UNRELATED), _cited("C", "Paper C", OTHER + " C")
    by_title = _cited("T1", "Semi-supervised Adaptation!", OTHER + " T")
    by_id = _cited("9223911", "", OTHER + " I")
    by_key = _cited("K1", "Some journal version", BENCH)
    by_containment = _cited("P07-1004", "Transductive learning for SMT", REWORDED)
    return [
        {"citing_paper_id": "Z1", "context": "Alpha beta gamma delta cites three [1,2,3].", "cited": [a, b, by_title]},
        {"citing_paper_id": "Z2", "context": "Alpha beta gamma delta cites again [1,2,3].", "cited": [a, b, by_id]},
        {"citing_paper_id": "Z3", "context": "Alpha beta gamma delta third one [1,2,3].", "cited": [a, c, by_key]},
        {"citing_paper_id": "Z4", "context": "Alpha beta gamma delta fourth one [1,2,3].",
         "cited": [b, c, by_containment]},
        {"citing_paper_id": "Z5", "context": "Alpha beta gamma delta fifth one [1,2,3].",
         "cited": [a, by_containment, by_key]},
    ]


def _bench_held() -> HeldOut:
    return HeldOut(frozenset({normalise_title("Semi-supervised adaptation")}), frozenset({"9223911"}),
                   frozenset({abstract_key(BENCH)}), Containment([BENCH]))


def test_ingest_takes_each_rules_benchmark_paper_out_of_the_records_and_counts_them(tmp_path):
    path = _records(tmp_path, _four_rule_records())
    report = ingest_records(path, tmp_path / "out", held_out=(), held_out_papers=_bench_held())
    counts = report["counts"]
    assert report["removed_benchmark_by"] == {"title": 1, "paper_id": 1, "abstract": 1, "containment": 1}
    assert counts["records_citing_benchmark"] == 5 and counts["benchmark_citations_removed"] == 6
    assert counts["dropped_benchmark_paper"] == 1 and counts["contexts"] == 4
    assert "dropped_fewer_than_2_cited" not in counts
    contexts = [c for _, c in iter_jsonl(tmp_path / "out" / "contexts.jsonl")]
    assert [c["cited_ids"] for c in contexts] == [["A", "B"], ["A", "B"], ["A", "C"], ["B", "C"]]
    papers = sorted(p["paper_id"] for _, p in iter_jsonl(tmp_path / "out" / "abstracts.jsonl"))
    assert papers == ["A", "B", "C"]  # no benchmark paper's abstract is written


def test_ingest_holds_a_paper_out_everywhere_when_any_records_version_of_it_matches(tmp_path):
    """P07-1004's first record carries an unrelated text, its second the reworded benchmark abstract: it goes from
    both records, not only the second."""
    rows = _four_rule_records()[3:4]
    first = {**rows[0], "citing_paper_id": "Z0", "context": "Alpha beta gamma delta zero [1,2,3].",
             "cited": [_cited("A", "Paper A", OTHER), _cited("B", "Paper B", UNRELATED),
                       _cited("P07-1004", "Transductive learning for SMT", "An unrelated first version. Of it.")]}
    report = ingest_records(_records(tmp_path, [first, *rows]), tmp_path / "out", held_out=(),
                            held_out_papers=_bench_held())
    assert report["counts"]["records_citing_benchmark"] == 2
    assert "P07-1004" not in {p["paper_id"] for _, p in iter_jsonl(tmp_path / "out" / "abstracts.jsonl")}


def test_ingest_keeps_everything_with_the_switch_off_and_warns_without_the_papers(tmp_path, caplog):
    path = _records(tmp_path, _four_rule_records())
    off = ingest_records(path, tmp_path / "off", IngestConfig(exclude_benchmark_papers=False), held_out=(),
                         held_out_papers=_bench_held())
    assert off["counts"]["contexts"] == 5 and "removed_benchmark_by" not in off
    with caplog.at_level(logging.WARNING):
        missing = ingest_records(path, tmp_path / "missing", held_out=())
    assert missing["counts"]["contexts"] == 5 and missing["removed_benchmark_by"] is None
    assert "NOT removed" in caplog.text


def test_cli_without_the_benchmarks_is_an_error_naming_the_folder_and_the_switch(tmp_path):
    from aspire.cli.data import _held_out_papers
    from aspire.data.cocite import CociteConfig

    with pytest.raises(ValueError, match=r"exclude_benchmark_papers.*csfcube.*exclude_benchmark_papers=false"):
        _held_out_papers(CociteConfig(), data=tmp_path)
    assert _held_out_papers(CociteConfig(ingest=IngestConfig(exclude_benchmark_papers=False)), data=tmp_path) is None


def _csf_9223911(shared_data) -> dict:
    for line in open(shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8"):
        record = json.loads(line)
        if record["paper_id"] == "9223911":
            return record
    raise AssertionError("CSFCube 9223911 not found")


def _reworded_csf(shared_data) -> list[str]:
    """CSFCube 9223911's abstract with its first and last sentence rewritten: another abstract key."""
    sentences = _csf_9223911(shared_data)["abstract"]
    return ["Translation engines learn from parallel text and from target-side text."] + sentences[1:-1] + [
        "Quality improves on both tasks."]


def test_cited_benchmark_papers_catch_a_reworded_csfcube_abstract_under_another_title_and_id(shared_data):
    from aspire.benchmarks.heldout import cited_benchmark_papers

    held = cited_benchmark_papers(shared_data)
    reworded = _reworded_csf(shared_data)
    assert abstract_key(reworded) != abstract_key(_csf_9223911(shared_data)["abstract"])
    assert held.reason("P07-1004", "Transductive learning for SMT", reworded) == "containment"
    assert held.reason("9223911", "", ["x."]) == "paper_id"
    assert held.reason("X", "", _csf_9223911(shared_data)["abstract"]) == "abstract"
    assert held.reason("X", _csf_9223911(shared_data)["title"], ["x."]) == "title"
    assert held.reason("W99-0000", "A parser", UNRELATED.split(". ")) is None
    # context2doc's test-cited papers are that benchmark's candidates, trained on by design: J05-1004 is one
    assert held.reason("J05-1004", "", ["Unrelated text here."]) is None


def test_run_all_command_drops_the_reworded_csfcube_paper_by_default(tmp_path, shared_data, capsys):
    from aspire.cli.data import main

    three = ["First sentence of it.", "Second sentence of it.", "Third sentence, number {}."]  # the filter wants 3
    other = {"paper_id": "A", "title": "Paper A", "abstract": [t.format("a") for t in three]}
    rows = [{"citing_paper_id": f"Z{i}", "context": f"Alpha beta gamma delta number {i} cites [1,2,3].",
             "cited": [other, {"paper_id": f"B{i}", "title": f"Paper B{i}", "abstract": [t.format(i) for t in three]},
                       {"paper_id": "P07-1004", "title": "Transductive learning for SMT",
                        "abstract": _reworded_csf(shared_data)}]} for i in range(12)]
    path = _records(tmp_path, rows)
    assert main(["run-all", "--in", str(path), "--out", str(tmp_path / "run"), "split.dev_fraction=0.2",
                 "examples.num_negatives=0"]) == 0
    ingest = json.loads(capsys.readouterr().out)["stages"]["ingest"]
    assert ingest["removed_benchmark_by"]["containment"] == 1 and ingest["counts"]["records_citing_benchmark"] == 12
    papers = {p["paper_id"] for _, p in iter_jsonl(tmp_path / "run" / "5_examples" / "abstracts.jsonl")}
    assert "P07-1004" not in papers and "A" in papers


# ---- the context2doc task ------------------------------------------------------------------------------------

def test_context2doc_task_leaves_out_the_pairs_of_a_reworded_csfcube_paper(tmp_path, shared_data, monkeypatch):
    import aspire.benchmarks.context2doc as c2d
    from aspire.train.config import Config, TaskConfig
    from aspire.train.tasks import context2doc_task

    bench = SimpleNamespace(
        queries={"q1": "a sentence citing two", "q2": "a sentence citing the benchmark paper alone"},
        qrels={"q1": {"P07-1004": 1, "B": 1}, "q2": {"P07-1004": 1}},
        candidates=[Paper("P07-1004", "Transductive learning for SMT", _reworded_csf(shared_data)),
                    Paper("B", "Paper B", UNRELATED.split(". "))], left_out=[])
    monkeypatch.setattr(c2d, "load_context2doc", lambda data_dir, split: bench)
    monkeypatch.chdir(REPO)  # the task's benchmarks_dir is the default, ../shared/data (context2doc sets no other)
    task = TaskConfig(name="context2doc")
    assert (REPO / task.benchmarks_dir).resolve() == shared_data.resolve()
    data = context2doc_task(Config(), task, "train", 0)
    assert [(e.query_id, e.positive_id) for e in data.examples] == [("ctx:q1", "B")]
    assert data.stats["removed_benchmark_pairs"] == 2
    assert data.stats["removed_benchmark_by"]["containment"] == 1
    assert "P07-1004" not in data.papers and "ctx:q2" not in data.papers  # q2 has no pair left


# ---- excluded_papers: the containment rule for every training source that reads ACL ---------------------------

@pytest.mark.slow
def test_excluded_papers_remove_a_reworded_csfcube_abstract_from_the_acl_source(tmp_path, shared_data, monkeypatch):
    from aspire.benchmarks.heldout import excluded_papers
    from aspire.data.acl import read_acl

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    read_acl.cache_clear()
    rows = [{"paper_id": "P07-1004", "title": "Transductive learning for SMT",
             "abstract": " ".join(_reworded_csf(shared_data))},
            {"paper_id": "K1", "title": "Kept paper", "abstract": UNRELATED}]
    path = tmp_path / "acl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    held, counts = excluded_papers(str(shared_data), "test")
    assert counts["containment_abstracts"] > 4000
    papers, stats = read_acl(path, held, 0)
    assert [p.paper_id for p in papers] == ["K1"]
    assert stats["removed_benchmark_by"] == {"title": 0, "paper_id": 0, "abstract": 0, "containment": 1}


def test_a_context2doc_task_takes_its_benchmarks_dir_and_null_keeps_every_pair(shared_data, monkeypatch):
    # the context2doc task's keys once lacked benchmarks_dir: only the default ../shared/data could be used
    import aspire.benchmarks.context2doc as c2d
    from aspire.config import ConfigError
    from aspire.train.config import Config, TaskConfig
    from aspire.train.tasks import context2doc_task

    bench = SimpleNamespace(queries={"q": "a sentence"}, qrels={"q": {"P07-1004": 1}}, left_out=[],
                            candidates=[Paper("P07-1004", "Transductive learning for SMT", _reworded_csf(shared_data))])
    monkeypatch.setattr(c2d, "load_context2doc", lambda data_dir, split: bench)
    TaskConfig(name="context2doc", benchmarks_dir=str(shared_data))  # its own key now (refused before)
    with pytest.raises(ConfigError, match="span_min"):
        TaskConfig(name="context2doc", span_min=2)  # another task's key is still refused
    held = context2doc_task(Config(), TaskConfig(name="context2doc", benchmarks_dir=str(shared_data)), "train", 0)
    assert held.examples == [] and held.stats["removed_benchmark_pairs"] == 1
    kept = context2doc_task(Config(), TaskConfig(name="context2doc", benchmarks_dir=None), "train", 0)
    assert [(e.query_id, e.positive_id) for e in kept.examples] == [("ctx:q", "P07-1004")]


def test_containment_reads_a_combining_accent_as_the_accented_letter():
    # four CSFCube texts carry combining accents; a training copy written with the composed letters is the same text
    decomposed = BENCH.replace("semi-supervised", "se\u0301mi-supervise\u0301d")
    composed = BENCH.replace("semi-supervised", "s\u00e9mi-supervis\u00e9d")
    assert containment(decomposed, composed) == 1.0
    assert Containment([decomposed]).matches(composed) and Containment([composed]).matches(decomposed)
