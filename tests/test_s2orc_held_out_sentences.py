"""Input B (`aspire.data.s2orc`) leaves out every piece of a context2doc test sentence, however its splitter cuts the
paragraph: a sentence that is part of a test sentence, or holds one, is dropped (`dropped_benchmark_test`), compared
as lower-cased words. An exact match let the pieces of a test sentence cut where the benchmark's record was not
through to training, with the test query's cited papers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aspire.data.cocite import IngestConfig, iter_jsonl
from aspire.data.s2orc import mine_s2orc
from aspire.paths import DATA

REGEX = IngestConfig(splitter="regex", exclude_benchmark_papers=False)
ABSTRACT = ["First sentence of it.", "Second sentence here.", "Third one ends it."]
BIB = {"B1": {"title": "a", "link": "P1"}, "B2": {"title": "b", "link": "P2"}}


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _paragraph(text: str, cites: dict[str, str]) -> dict:
    spans = []
    for marker, ref in cites.items():
        start = text.index(marker)
        spans.append({"start": start, "end": start + len(marker), "text": marker, "ref_id": ref})
    return {"text": text, "section": "Intro", "cite_spans": spans}


def _mine(tmp_path: Path, paragraphs: list[str], held_out: list[str], cfg: IngestConfig = REGEX) -> tuple[dict, list]:
    paper = {"paper_id": "C1", "bib_entries": BIB,
             "body_text": [_paragraph(text, {"[1]": "B1", "[2]": "B2"}) for text in paragraphs]}
    abstracts = [{"paper_id": p, "title": p, "abstract": ABSTRACT} for p in ("P1", "P2")]
    out = tmp_path / "out"
    report = mine_s2orc(_write(tmp_path / "f.jsonl", [paper]), _write(tmp_path / "a.jsonl", abstracts), out, cfg,
                        held_out=held_out)
    return report, [c["text"] for _, c in iter_jsonl(out / "contexts.jsonl")]


def test_a_piece_of_a_test_sentence_is_held_out(tmp_path):
    """The benchmark's record is two sentences to the splitter: the second, which cites both papers, was kept."""
    test = "Lexicons come from other resources. The LinGO lexicon [1] holds entries taken from ComLex [2]."
    report, kept = _mine(tmp_path, [test], [test])
    assert kept == []
    assert report["counts"]["dropped_benchmark_test"] == 1


def test_a_sentence_holding_a_test_sentence_is_held_out(tmp_path):
    """The full text's sentence holds the test sentence, in other case and spacing: it was kept."""
    test = "The LinGO lexicon [1] holds entries taken from ComLex [2]."
    report, kept = _mine(tmp_path, ["As we said,  the LinGO lexicon [1] holds entries taken from ComLex [2], here."],
                         [test])
    assert kept == [] and report["counts"]["dropped_benchmark_test"] == 1


def test_other_sentences_citing_the_same_papers_are_kept(tmp_path):
    """Only the test sentence's words are held out: another sentence citing its papers, or sharing a few of its
    words, is training data as before."""
    test = "The LinGO lexicon [1] holds entries taken from ComLex [2]."
    other = "A grammar [1] and a lexicon [2] were compared on the same entries."
    report, kept = _mine(tmp_path, [other, "The LinGO lexicon [1] and ComLex [2] differ."], [test])
    assert kept == [other, "The LinGO lexicon [1] and ComLex [2] differ."]
    assert report["counts"].get("dropped_benchmark_test", 0) == 0


def test_overlaps_compares_words():
    from aspire.data.s2orc import HeldOutSentences

    held = HeldOutSentences(["The LinGO lexicon (Copestake, 2000) holds entries.", "  "])
    assert held.overlaps("The LinGO lexicon (Copestake, 2000) holds entries.")  # the sentence itself
    assert held.overlaps("lexicon (Copestake, 2000) holds")  # a piece of it
    assert held.overlaps("Before: the LINGO lexicon [Copestake 2000] holds entries; after.")  # holding it
    assert not held.overlaps("LinGO lex")  # not a run of its words: "lex" is no word of it
    assert not held.overlaps("   ") and not HeldOutSentences([]).overlaps("The LinGO lexicon")


@pytest.mark.skipif(not (DATA / "cocite-acl" / "cocitations.jsonl").is_file(), reason="shared co-citation data absent")
def test_real_test_sentence_cut_by_pysbd_is_held_out(tmp_path):
    """A real context2doc test sentence (W07-1215's), written as S2ORC full text: pysbd, the default splitter, cuts
    it at its '?', and its second piece, citing C94-1042 and P02-1043 as the test query does, was kept."""
    from aspire.benchmarks.context2doc import held_out_sentences

    records = [json.loads(line) for line in (DATA / "cocite-acl" / "cocitations.jsonl").open(encoding="utf-8")]
    rec = next(r for r in records if r["citing_paper_id"] == "W07-1215" and "LinGO ERG" in r["context"])
    held_out = held_out_sentences(DATA / "cocite-acl")
    assert rec["context"].strip() in held_out  # a test sentence of the benchmark
    markers = {"(Grishman et al, 1994)": "B1", "Hockenmaier and Steedman (2002)": "B2"}
    bib = {"B1": {"title": "comlex", "link": "C94-1042"}, "B2": {"title": "ccg", "link": "P02-1043"}}
    paper = {"paper_id": "W07-1215", "bib_entries": bib, "body_text": [_paragraph(rec["context"], markers)]}
    abstracts = [{"paper_id": c["paper_id"], "title": c["title"], "abstract": c["abstract"]} for c in rec["cited"]]
    cfg = IngestConfig(exclude_benchmark_papers=False)  # pysbd
    report = mine_s2orc(_write(tmp_path / "f.jsonl", [paper]), _write(tmp_path / "a.jsonl", abstracts),
                        tmp_path / "out", cfg, held_out=held_out)
    assert report["counts"]["sentences"] == 2  # cut in two
    assert report["counts"]["contexts"] == 0 and report["counts"]["dropped_benchmark_test"] == 1
