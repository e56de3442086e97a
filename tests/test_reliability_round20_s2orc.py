"""Round 20: benchmark papers held out of the S2ORC input (`aspire.data.s2orc.mine_s2orc`,
`ingest.exclude_benchmark_papers`) as `ingest_records` holds them out of input A, and the `cocite` training data
(`aspire.train.data.load_split`) saying when its examples were built without that rule."""

from __future__ import annotations

import json
import logging

import pytest

from aspire.benchmarks.heldout import Containment
from aspire.data.acl import HeldOut, abstract_key, normalise_title
from aspire.data.cocite import IngestConfig, ingest_records, iter_jsonl
from aspire.data.s2orc import mine_s2orc
from tests.test_cocite import _own_abstract
from tests.test_reliability_round18_heldout import BENCH, REWORDED

OTHER = "A paper that cites nothing benchmark-like. Its abstract is about tagging text with a model of words."


def _bench_held() -> HeldOut:
    return HeldOut(frozenset({normalise_title("Semi-supervised adaptation")}), frozenset({"9223911"}),
                   frozenset({abstract_key(BENCH)}), Containment([BENCH]))


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _sentences(text: str) -> list[str]:
    return [s + ("" if s.endswith(".") else ".") for s in text.split(". ") if s]


# the cited papers: A, B, C plain; one benchmark paper per rule (as in round 18's input A test)
PAPERS = {
    "A": ("Paper A", _sentences(OTHER)),
    "B": ("Paper B", _sentences(OTHER + " B")),
    "C": ("Paper C", OTHER + " C"),  # a string abstract: split by the configured splitter
    "T1": ("Semi-supervised Adaptation!", _sentences(OTHER + " T")),
    "9223911": ("", _sentences(OTHER + " I")),
    "K1": ("Some journal version", _sentences(BENCH)),
    "P07-1004": ("Transductive learning for SMT", REWORDED),
}


def _paragraph(text_ids: list[str]) -> tuple[dict, dict]:
    """One paragraph of one sentence citing `text_ids` by bib refs, and those bib entries."""
    text = "Alpha beta gamma delta cites these papers"
    spans, bib = [], {}
    for k, pid in enumerate(text_ids):
        mark = f" [{k + 1}]"
        spans.append({"start": len(text) + 1, "end": len(text) + len(mark), "text": mark.strip(), "ref_id": f"B{pid}"})
        text += mark
        bib[f"B{pid}"] = {"title": PAPERS[pid][0] or "x", "link": pid}
    return {"text": text + ".", "cite_spans": spans, "section": "Intro"}, bib


def _s2orc(tmp_path, cited_sets: list[list[str]]):
    """A full-text file of one citing paper a sentence (Z1, Z2, ...), each citing one of `cited_sets`, and the
    abstracts table of every paper of `PAPERS`."""
    rows = []
    for i, ids in enumerate(cited_sets):
        para, bib = _paragraph(ids)
        rows.append({"paper_id": f"Z{i + 1}", "body_text": [para], "bib_entries": bib})
    abstracts = [{"paper_id": pid, "title": t, "abstract": a} for pid, (t, a) in PAPERS.items()]
    return _write(tmp_path / "pdf_parses.jsonl", rows), _write(tmp_path / "abstracts.jsonl", abstracts)


FOUR_RULES = [["A", "B", "T1"], ["A", "B", "9223911"], ["A", "C", "K1"], ["B", "C", "P07-1004"],
              ["A", "P07-1004", "K1"]]


def _contexts(folder) -> list[list[str]]:
    return [c["cited_ids"] for _, c in iter_jsonl(folder / "contexts.jsonl")]


def test_s2orc_takes_each_rules_benchmark_paper_out_of_the_sentences_and_counts_them(tmp_path):
    """Five sentences; four cite a benchmark paper named by one rule beside two others, one cites two beside one
    other (left with one paper: no context). Once the S2ORC input kept every one of them."""
    fulltext, abstracts = _s2orc(tmp_path, FOUR_RULES)
    report = mine_s2orc(fulltext, abstracts, tmp_path / "out", IngestConfig(splitter="regex"), held_out=(),
                        held_out_papers=_bench_held())
    counts = report["counts"]
    assert report["removed_benchmark_by"] == {"title": 1, "paper_id": 1, "abstract": 1, "containment": 1}
    assert counts["records_citing_benchmark"] == 5 and counts["benchmark_citations_removed"] == 6
    assert counts["dropped_benchmark_paper"] == 1 and counts["contexts"] == 4
    assert _contexts(tmp_path / "out") == [["A", "B"], ["A", "B"], ["A", "C"], ["B", "C"]]
    written = sorted(p["paper_id"] for _, p in iter_jsonl(tmp_path / "out" / "abstracts.jsonl"))
    assert written == ["A", "B", "C"]  # no benchmark paper's abstract is written


def test_s2orc_counts_as_ingest_counts_on_the_same_co_citations(tmp_path):
    """The same five co-citations through input A's records: the same counts, contexts and removed_benchmark_by."""
    fulltext, abstracts = _s2orc(tmp_path, FOUR_RULES)
    b = mine_s2orc(fulltext, abstracts, tmp_path / "b", IngestConfig(splitter="regex"), held_out=(),
                   held_out_papers=_bench_held())
    records = []
    for i, ids in enumerate(FOUR_RULES):
        cited = [{"paper_id": pid, "title": PAPERS[pid][0],
                  "abstract": PAPERS[pid][1] if isinstance(PAPERS[pid][1], list) else _sentences(PAPERS[pid][1])}
                 for pid in ids]
        records.append({"citing_paper_id": f"Z{i + 1}", "context": f"Alpha beta gamma delta cites {i} [1,2,3].",
                        "cited": cited})
    a = ingest_records(_write(tmp_path / "records.jsonl", records), tmp_path / "a", held_out=(),
                       held_out_papers=_bench_held())
    keys = ("records_citing_benchmark", "benchmark_citations_removed", "dropped_benchmark_paper", "contexts")
    assert {k: b["counts"][k] for k in keys} == {k: a["counts"][k] for k in keys}
    assert b["removed_benchmark_by"] == a["removed_benchmark_by"]
    assert _contexts(tmp_path / "b") == _contexts(tmp_path / "a")


def test_s2orc_keeps_everything_with_the_switch_off_and_warns_without_the_papers(tmp_path, caplog):
    fulltext, abstracts = _s2orc(tmp_path, FOUR_RULES)
    off = mine_s2orc(fulltext, abstracts, tmp_path / "off",
                     IngestConfig(splitter="regex", exclude_benchmark_papers=False), held_out=(),
                     held_out_papers=_bench_held())
    assert off["counts"]["contexts"] == 5 and "removed_benchmark_by" not in off
    assert "records_citing_benchmark" not in off["counts"]
    with caplog.at_level(logging.WARNING):
        missing = mine_s2orc(fulltext, abstracts, tmp_path / "missing", IngestConfig(splitter="regex"), held_out=())
    assert missing["counts"]["contexts"] == 5 and missing["removed_benchmark_by"] is None
    assert "NOT removed" in caplog.text and "pdf_parses.jsonl" in caplog.text


def test_s2orc_sentence_under_two_papers_before_the_rule_is_not_counted_a_benchmark_drop(tmp_path):
    """A sentence citing one plain paper and one benchmark paper, where the plain one has no abstract, is dropped
    for the missing abstract (as before), not counted as a benchmark drop; a clean sentence is untouched."""
    fulltext, abstracts = _s2orc(tmp_path, [["A", "K1"], ["A", "B"]])
    rows = [json.loads(line) for line in abstracts.read_text().splitlines()]
    rows = [{**r, "abstract": None} if r["paper_id"] == "A" else r for r in rows]
    _write(abstracts, rows)
    report = mine_s2orc(fulltext, abstracts, tmp_path / "o", IngestConfig(splitter="regex"), held_out=(),
                        held_out_papers=_bench_held())
    assert report["counts"]["dropped_fewer_than_2_with_abstract"] == 2
    assert "dropped_benchmark_paper" not in report["counts"] and "records_citing_benchmark" not in report["counts"]
    assert report["removed_benchmark_by"] == {"title": 0, "paper_id": 0, "abstract": 0, "containment": 0}


def test_cli_cocite_from_s2orc_passes_the_benchmark_papers(tmp_path, monkeypatch, capsys):
    """The command reads the benchmark papers (`_held_out_papers`) and hands them to `mine_s2orc`; once it only
    logged that input B kept them."""
    import aspire.cli.data as cli

    fulltext, abstracts = _s2orc(tmp_path, FOUR_RULES)
    monkeypatch.setattr(cli, "_held_out_papers", lambda cfg: _bench_held() if cfg.ingest.exclude_benchmark_papers
                        else None)
    monkeypatch.setattr(cli, "_held_out", lambda path, cfg: set())
    assert cli.main(["cocite-from-s2orc", "--fulltext", str(fulltext), "--abstracts", str(abstracts),
                     "--out", str(tmp_path / "o"), "ingest.splitter=regex"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["counts"]["contexts"] == 4 and printed["removed_benchmark_by"]["containment"] == 1
    assert _contexts(tmp_path / "o") == [["A", "B"], ["A", "B"], ["A", "C"], ["B", "C"]]


# ---- the cocite training data says when its examples may hold benchmark papers ------------------------------

LONG = "This context is long enough to pass the token filter easily (Smith, 2000; Jones, 2001)"


def _records_file(tmp_path, with_benchmark: bool = True):
    """30 records each co-citing p{i}, p{i+1} (and, in the first, the benchmark paper K1 too), each paper with an
    abstract of its own."""
    rows = []
    for i in range(30):
        ids = [f"p{i}", f"p{i + 1}"] + (["K1"] if with_benchmark and i == 0 else [])
        cited = [{"paper_id": p, "title": f"Title {p}", "abstract": _sentences(BENCH) if p == "K1" else _own_abstract(p)}
                 for p in ids]
        rows.append({"citing_paper_id": "X", "context": f"{LONG} {i}.", "cited": cited})
    return _write(tmp_path / "records.jsonl", rows)


def _load_train(examples_dir):
    from aspire.train.config import DataConfig
    from aspire.train.data import load_split

    return load_split(DataConfig(examples_dir=str(examples_dir)), "train")


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "examples_dir" in r.getMessage()]


def test_load_split_is_silent_on_examples_built_with_the_benchmark_papers_out(tmp_path, caplog):
    from aspire.data.cocite import run_all

    out = run_all(_records_file(tmp_path), tmp_path / "run", held_out=(), held_out_papers=_bench_held())
    with caplog.at_level(logging.WARNING):
        data = _load_train(out)
    assert len(data.examples) > 0 and _warnings(caplog) == []
    assert "K1" not in data.papers


@pytest.mark.parametrize("how, said", [
    ("off", "ingest.exclude_benchmark_papers=false"),
    ("not_given", "removed_benchmark_by is null"),
    ("before_the_rule", "has no removed_benchmark_by"),
])
def test_load_split_warns_once_naming_the_folder_and_the_command_but_still_reads(tmp_path, caplog, how, said):
    """Examples built with the switch off, with it on but no papers, or before the rule (a report without
    `removed_benchmark_by`): one warning naming the examples folder, the ingest report and the rebuild command.
    Once they were read without a word."""
    from aspire.data.cocite import CociteConfig, run_all

    records = _records_file(tmp_path)
    cfg = CociteConfig(ingest=IngestConfig(exclude_benchmark_papers=how != "off"))
    out = run_all(records, tmp_path / "run", cfg, held_out=(),
                  held_out_papers=None if how == "not_given" else _bench_held())
    if how == "before_the_rule":
        report_path = tmp_path / "run" / "1_ingest" / "report.json"
        report = json.loads(report_path.read_text())
        report.pop("removed_benchmark_by")
        report["config"].pop("exclude_benchmark_papers")
        report_path.write_text(json.dumps(report))
    with caplog.at_level(logging.WARNING):
        data = _load_train(out)
        _load_train(out)  # the dev split, another task: the same folder is said once
    assert len(data.examples) > 0
    (message,) = _warnings(caplog)
    assert str(out) in message and said in message and str(tmp_path / "run" / "1_ingest" / "report.json") in message
    assert f"aspire data run-all --in {records} --out NEW" in message


def test_load_split_follows_stage_reports_of_a_pipeline_run_stage_by_stage(tmp_path, caplog):
    """Stages run one by one into folders of any name: the reports' `input` lead back to the ingest report; an
    align output names its examples folder (and the warning adds the align step)."""
    from aspire.data.cocite import (
        ExamplesConfig,
        SplitConfig,
        build_examples,
        filter_contexts,
        group_contexts,
        split_groups,
    )
    from aspire.train.data import find_ingest_report

    fulltext, abstracts = _s2orc(tmp_path, FOUR_RULES)
    mine_s2orc(fulltext, abstracts, tmp_path / "a", IngestConfig(splitter="regex", exclude_benchmark_papers=False),
               held_out=())
    filter_contexts(tmp_path / "a", tmp_path / "b")
    group_contexts(tmp_path / "b", tmp_path / "c")
    split_groups(tmp_path / "c", tmp_path / "d", SplitConfig(dev_fraction=0.0))
    build_examples(tmp_path / "d", tmp_path / "e", ExamplesConfig(num_negatives=0))
    aligned = tmp_path / "f"
    aligned.mkdir()
    for name in ("examples.train.jsonl", "examples.dev.jsonl", "abstracts.jsonl"):
        (aligned / name).write_bytes((tmp_path / "e" / name).read_bytes())
    (aligned / "report.json").write_text(json.dumps({"stage": "align", "input": str(tmp_path / "e")}))
    assert find_ingest_report(aligned)[0] == tmp_path / "a"
    with caplog.at_level(logging.WARNING):
        _load_train(aligned)
    (message,) = _warnings(caplog)
    assert "ingest.exclude_benchmark_papers=false" in message and str(tmp_path / "a" / "report.json") in message
    assert f"cocite-from-s2orc --fulltext {fulltext} --abstracts {abstracts}" in message
    assert message.endswith("then `aspire data align`")


def test_find_ingest_report_of_a_moved_run_and_of_a_hand_built_folder(tmp_path, monkeypatch, caplog):
    """A run-all folder built with relative paths and read from another working folder (or moved) is still found,
    beside the folder naming it; a folder no report leads from warns that nothing says either way."""
    from aspire.data.cocite import run_all
    from aspire.train.data import check_benchmark_papers_excluded, find_ingest_report

    monkeypatch.chdir(tmp_path)
    run_all(_records_file(tmp_path), "run", held_out=(), held_out_papers=_bench_held())
    (tmp_path / "run").rename(tmp_path / "moved")
    (tmp_path / "moved" / "pipeline_report.json").unlink()
    monkeypatch.chdir("/")
    found = find_ingest_report(tmp_path / "moved" / "5_examples")
    assert found is not None and found[0] == tmp_path / "moved" / "1_ingest"
    assert check_benchmark_papers_excluded(tmp_path / "moved" / "5_examples") is None

    hand = tmp_path / "hand"
    hand.mkdir()
    for name in ("examples.train.jsonl", "examples.dev.jsonl", "abstracts.jsonl"):
        (hand / name).write_bytes((tmp_path / "moved" / "5_examples" / name).read_bytes())
    with caplog.at_level(logging.WARNING):
        data = _load_train(hand)
    assert len(data.examples) > 0
    (message,) = _warnings(caplog)
    assert str(hand) in message and "no ingest report" in message and "aspire data run-all --in RECORDS" in message
