"""Round 34: the S2ORC input (`aspire.data.s2orc`) and the data command (`aspire.cli.data`): citation spans mapped
to sentences as a hand loop maps them, self-citations counted as input A counts them, a mistyped splitter named with
`regex` among the valid ones and refused before the held-out sets load, an ingest input the output would replace."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

import aspire.cli.data as cli
from aspire.data.cocite import IngestConfig, ingest_records, iter_jsonl
from aspire.data.s2orc import get_span_splitter, mine_s2orc

FIXTURE = Path(__file__).parent / "fixtures" / "s2orc_mini"
PLAIN = IngestConfig(splitter="regex", exclude_benchmark_test=False, exclude_benchmark_papers=False)
OFF = ["ingest.splitter=regex", "ingest.exclude_benchmark_test=false", "ingest.exclude_benchmark_papers=false"]
ABSTRACT = ["First sentence of it.", "Second sentence here.", "Third one ends it."]


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cite(text: str, marker: str, ref: str | None) -> dict:
    start = text.index(marker)
    return {"start": start, "end": start + len(marker), "text": marker, "ref_id": ref}


# ---- self-citations are counted, as input A counts them ---------------------------------------------------------

def test_s2orc_counts_self_citations_as_input_a_does(tmp_path):
    """C1 cites itself in two sentences: beside P1 and P2 (kept as {P1, P2}) and beside P1 alone (dropped). Input A
    counts `self_citations_removed` for the same two co-citations; input B once took the paper out silently."""
    bib = {"B1": {"title": "t", "link": "P1"}, "B2": {"title": "t", "link": "P2"}, "BS": {"title": "own", "link": "C1"}}
    t1 = "We use A [1] and B [2] and our own [3]."
    t2 = "Our own [3] extends A [1] here."
    paper = {"paper_id": "C1", "bib_entries": bib, "body_text": [
        {"text": t1, "section": "I", "cite_spans": [_cite(t1, "[1]", "B1"), _cite(t1, "[2]", "B2"), _cite(t1, "[3]", "BS")]},
        {"text": t2, "section": "I", "cite_spans": [_cite(t2, "[3]", "BS"), _cite(t2, "[1]", "B1")]}]}
    abstracts = [{"paper_id": p, "title": p, "abstract": ABSTRACT} for p in ("P1", "P2", "C1")]
    b = mine_s2orc(_write(tmp_path / "f.jsonl", [paper]), _write(tmp_path / "a.jsonl", abstracts), tmp_path / "b", PLAIN)
    assert b["counts"]["self_citations_removed"] == 2
    assert b["counts"]["dropped_fewer_than_2_linked"] == 1 and b["counts"]["contexts"] == 1
    assert [c["cited_ids"] for _, c in iter_jsonl(tmp_path / "b" / "contexts.jsonl")] == [["P1", "P2"]]
    cited = {p: {"paper_id": p, "title": p, "abstract": ABSTRACT} for p in ("P1", "P2", "C1")}
    records = [{"citing_paper_id": "C1", "context": "We use A [1] and B [2] and our own [3].",
                "cited": [cited["P1"], cited["P2"], cited["C1"]]},
               {"citing_paper_id": "C1", "context": "Our own [3] extends A [1] here.", "cited": [cited["C1"], cited["P1"]]}]
    a = ingest_records(_write(tmp_path / "r.jsonl", records), tmp_path / "a", PLAIN)
    assert b["counts"]["self_citations_removed"] == a["counts"]["self_citations_removed"]


def test_s2orc_fixture_counts_its_one_self_citation():
    """The fixture's README names one sentence dropped for a self-citation; the report now says so."""
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        report = mine_s2orc(FIXTURE / "pdf_parses.jsonl", FIXTURE / "abstracts.jsonl", out, PLAIN)
    counts = report["counts"]
    assert counts["self_citations_removed"] == 1 and counts["dropped_fewer_than_2_linked"] == 3
    assert counts["contexts"] == 6 and counts["cite_spans"] == 23 and counts["cite_spans_without_bib_entry"] == 1


# ---- the splitter's name -----------------------------------------------------------------------------------------

def test_unknown_splitter_lists_regex_among_the_valid_names(tmp_path):
    """`regex` is a valid `ingest.splitter`; the error for a typo once listed only `aspire.data.sentences`' names."""
    with pytest.raises(ValueError, match="unknown sentence splitter 'regexx'") as err:
        get_span_splitter("regexx")
    assert "'regex'" in str(err.value) and "'pysbd_rule_guarded'" in str(err.value)
    with pytest.raises(ValueError, match="'regex'"):
        mine_s2orc(FIXTURE / "pdf_parses.jsonl", FIXTURE / "abstracts.jsonl", tmp_path / "o",
                   IngestConfig(splitter="nope", exclude_benchmark_test=False, exclude_benchmark_papers=False))
    assert not (tmp_path / "o" / "report.json").exists()


def test_cli_refuses_a_mistyped_splitter_before_the_held_out_sets_load(tmp_path, monkeypatch, capsys):
    """The held-out sets (context2doc's test sentences: a hash of the whole full-text file; the benchmark papers) took
    seconds on the tiny fixture before a mistyped `ingest.splitter` was refused."""
    loaded = []
    monkeypatch.setattr(cli, "_held_out", lambda path, cfg: loaded.append("held_out") or set())
    monkeypatch.setattr(cli, "_held_out_papers", lambda cfg: loaded.append("papers"))
    status = cli.main(["cocite-from-s2orc", "--fulltext", str(FIXTURE / "pdf_parses.jsonl"), "--abstracts",
                       str(FIXTURE / "abstracts.jsonl"), "--out", str(tmp_path / "o"), "ingest.splitter=regexx"])
    assert status == 2 and loaded == []
    message = capsys.readouterr().err
    assert "unknown sentence splitter 'regexx'" in message and "'regex'" in message


# ---- an ingest input that the output would replace ---------------------------------------------------------------

def test_cli_s2orc_refuses_an_abstracts_file_it_would_write_over(tmp_path, capsys):
    """An earlier ingest folder holding the whole abstracts table (7 papers) given back as --abstracts with that
    folder as --out: the output (6 cited papers) once replaced the input, P5 lost, with exit status 0."""
    out = tmp_path / "o"
    assert cli.main(["cocite-from-s2orc", "--fulltext", str(FIXTURE / "pdf_parses.jsonl"), "--abstracts",
                     str(FIXTURE / "abstracts.jsonl"), "--out", str(out), *OFF]) == 0
    shutil.copy(FIXTURE / "abstracts.jsonl", out / "abstracts.jsonl")
    before = (out / "abstracts.jsonl").read_bytes()
    capsys.readouterr()
    status = cli.main(["cocite-from-s2orc", "--fulltext", str(FIXTURE / "pdf_parses.jsonl"), "--abstracts",
                       str(out / "abstracts.jsonl"), "--out", str(out), *OFF])
    assert status == 2 and "--abstracts" in capsys.readouterr().err
    assert (out / "abstracts.jsonl").read_bytes() == before


def test_cli_records_refuses_an_input_it_would_write_over(tmp_path, capsys):
    """`cocite-from-records --in OUT/contexts.jsonl --out OUT ingest.on_error=skip`: every line skipped, and the empty
    output once replaced the input before the stage reported nothing left."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"stage": "ingest", "counts": {}}), encoding="utf-8")
    _write(out / "contexts.jsonl", [{"context_id": "x", "text": "a context"}])
    before = (out / "contexts.jsonl").read_bytes()
    status = cli.main(["cocite-from-records", "--in", str(out / "contexts.jsonl"), "--out", str(out),
                       "ingest.on_error=skip", "ingest.exclude_benchmark_test=false",
                       "ingest.exclude_benchmark_papers=false"])
    assert status == 2 and "--in" in capsys.readouterr().err
    assert (out / "contexts.jsonl").read_bytes() == before


# ---- citation spans mapped as a hand loop maps them (found correct) ---------------------------------------------

def test_s2orc_maps_random_citation_spans_as_a_hand_loop_does(tmp_path):
    """Random paragraphs and spans (overlapping, straddling sentence cuts, in the gaps, unknown and null ref_ids):
    each sentence's cited ids, text and id, and the spans outside every sentence, as a brute-force loop finds them."""
    rng = random.Random(34)
    words = ["We", "use", "Lin", "et", "al.", "The", "model", "A.", "B!", "(2002).", "[1]", "and", "In", "x?"]
    bib = {f"B{i}": {"title": "x", "link": f"P{i}"} for i in range(6)}
    bib["BN"] = {"title": "x", "link": None}
    abstracts = _write(tmp_path / "a.jsonl", [{"paper_id": f"P{i}", "title": "t", "abstract": ABSTRACT} for i in range(6)])
    splitter = get_span_splitter("regex")
    for trial in range(60):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 25)))
        if trial % 3 == 0:
            text = "  " + text + " "
        cites = []
        for _ in range(rng.randint(0, 5)):
            a = rng.randrange(0, len(text))
            cites.append({"start": a, "end": rng.randint(a + 1, min(len(text), a + 12)),
                          "ref_id": rng.choice([*bib, "ZZ", None])})
        paper = {"paper_id": "C", "bib_entries": bib, "body_text": [{"text": text, "section": None, "cite_spans": cites}]}
        out = tmp_path / f"o{trial}"
        report = mine_s2orc(_write(tmp_path / "f.jsonl", [paper]), abstracts, out, PLAIN)
        spans = splitter.spans(text)
        merged = True
        while merged:  # a cut inside a span joins its two sentences
            merged = False
            for c in cites:
                for i in range(len(spans) - 1):
                    if spans[i][0] <= c["start"] < spans[i][1] < c["end"]:
                        spans[i:i + 2] = [(spans[i][0], spans[i + 1][1])]
                        merged = True
                        break
        expected = []
        for k, (a, b) in enumerate(spans):
            links = {bib[c["ref_id"]]["link"] for c in cites if a <= c["start"] < b and c["ref_id"] in bib} - {None}
            if len(links) >= 2:
                expected.append((f"C#p0s{k}", text[a:b], sorted(links)))
        outside = sum(not any(a <= c["start"] < b for a, b in spans) for c in cites)
        got = [(c["context_id"], c["text"], c["cited_ids"]) for _, c in iter_jsonl(out / "contexts.jsonl")]
        assert got == expected, (text, cites)
        assert report["counts"].get("cite_spans_outside_sentences", 0) == outside
        assert report["counts"].get("cite_spans", 0) == len(cites)
        assert report["counts"].get("cite_spans_without_bib_entry", 0) == sum(c["ref_id"] == "ZZ" for c in cites)
