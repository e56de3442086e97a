"""Co-citation pipeline: ingest, filters, grouping, the pair-respecting split, examples, S2ORC mining."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aspire.cli.data import main as cli_main
from aspire.config import ConfigError
from aspire.data import cocite
from aspire.data.cocite import (
    CociteConfig,
    DataError,
    ExamplesConfig,
    FilterConfig,
    IngestConfig,
    SplitConfig,
    build_examples,
    clean_citations,
    filter_contexts,
    get_tokenizer,
    group_contexts,
    ingest_records,
    iter_jsonl,
    pair_components,
    pairs_of,
    split_groups,
)
from aspire.data.s2orc import merge_spans_across_citations, mine_s2orc

FIXTURE = Path(__file__).parent / "fixtures" / "s2orc_mini"
GOOD_ABSTRACT = ["First sentence of the abstract.", "Second sentence here.", "Third and last sentence."]
LONG_CONTEXT = "This context is long enough to pass the token filter easily (Smith, 2000; Jones, 2001)."


def _write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _read(path: Path) -> list[dict]:
    return [obj for _, obj in iter_jsonl(path)]


def _own_abstract(paper_id: str) -> list[str]:
    """`GOOD_ABSTRACT`, each sentence led by `paper_id`: one abstract shared by all papers would make them one work
    (`aspire.data.acl.same_work_groups`), and no paper could be another's random negative."""
    return [f"{paper_id}: {s}" for s in GOOD_ABSTRACT]


def _record(context: str, *paper_ids: str, confirmed: bool = True, abstracts: dict | None = None) -> dict:
    abstracts = abstracts or {}
    return {
        "citing_paper_id": "X",
        "context": context,
        "source": "test",
        "all_links_confirmed": confirmed,
        "cited": [{"paper_id": p, "title": f"Title {p}", "abstract": abstracts.get(p, _own_abstract(p)),
                   "link": "aan"}
                  for p in paper_ids],
    }


def _removed(report: dict) -> dict[str, int]:
    return {row["filter"]: row["removed"] for row in report["removed_in_order"]}


# --------------------------------------------------------------------------- citations and tokens


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("the TNT tagger (Brants, 2000), with", "the TNT tagger [CIT], with"),
        ("For example, Petrov et al (2012) build taggers", "For example, [CIT] build taggers"),
        ("clustering (Lin, 1998; Lin and Pantel, 2002) has", "clustering [CIT] has"),
        ("induction [Ganchev et al, 2009, Naseem et al, 2010], part", "induction [CIT], part"),
        ("as in [12] and [3, 4].", "as in [CIT]."),
        ("Dale and Reiter (1995) and van Deemter and Krahmer (2007) argue", "[CIT] argue"),
        ("In 2005 (the year) we had 5 (five) items [sic].", "In 2005 (the year) we had 5 (five) items [sic]."),
        # a title-case particle is part of the name: "De [CIT]" / "Di [CIT]" were left
        ("Gamon (2010), De Felice and Pulman (2008) and Gamon et al (2008) describe systems",
         "[CIT] describe systems"),
        ("until the publication of Di Eugenio and Glass (2004) and Passonneau (2004).",
         "until the publication of [CIT]."),
        ("Van Deemter (2002) argues", "[CIT] argues"),
        ("as van Deemter (2002) argues", "as [CIT] argues"),
        ("In our table SINGLE LE Collins (1999) 89.", "In our table SINGLE LE [CIT] 89."),  # an upper-case word stays
        # "et. al", as real contexts write it: "Chodorow et. al [CIT]" was left
        ("Chodorow et. al (2007), Tetreault and Chodorow (2008), and others", "[CIT], and others"),
        ("Chodorow et. al. (2007) show", "[CIT] show"),
        # two papers of one year: "Collins [CIT]" was left
        ("Collins (2002a,b) shows", "[CIT] shows"),
        ("Collins (2002a, b; 2003) shows", "[CIT] shows"),
        ("Smith (2019a, 2019b) show", "[CIT] show"),
        # the module docstring's examples (round 36)
        ("as Petrov et al (2012) showed", "as [CIT] showed"),
        ("as Petrov et. al (2012) showed", "as [CIT] showed"),
        ("Dale and Reiter (1995) wrote", "[CIT] wrote"),
        ("by Collins (2002a,b) and others", "by [CIT] and others"),
        ("tagging (Brants, 2000) works", "tagging [CIT] works"),
        ("similarity (Lin, 1998; Lin and Pantel, 2002) is", "similarity [CIT] is"),
        ("see [12], [3, 4] and [5-7].", "see [CIT]."),
        ("as in [Ganchev et al, 2009] here", "as in [CIT] here"),
        ("X (2002), and Y (2003) z", "[CIT] z"),
        ("a window (size 5) in 2000", "a window (size 5) in 2000"),
    ],
)
def test_clean_citations(raw, clean):
    assert clean_citations(raw) == clean


def test_tokenizers_registry():
    assert get_tokenizer("regex")("A state-of-the-art model (Brants, 2000).") == [
        "A", "state-of-the-art", "model", "(", "Brants", ",", "2000", ")", "."]
    assert get_tokenizer("whitespace")("a  b c") == ["a", "b", "c"]
    assert get_tokenizer("spacy_blank")("We don't stop.") == ["We", "do", "n't", "stop", "."]
    with pytest.raises(ValueError, match="valid: .*regex"):
        get_tokenizer("nltk")


# --------------------------------------------------------------------------- ingest


def test_ingest_records_writes_contexts_and_deduplicated_abstracts(tmp_path):
    rows = [_record(LONG_CONTEXT, "B", "A"), _record(LONG_CONTEXT + " Again.", "A", "C"), _record("Alone (X, 1999).", "A", "A")]
    report = ingest_records(_write_jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out", held_out=())
    contexts = _read(tmp_path / "out" / "contexts.jsonl")
    assert [c["cited_ids"] for c in contexts] == [["A", "B"], ["A", "C"]]
    assert contexts[0]["text"] == LONG_CONTEXT and contexts[0]["text_clean"].endswith("easily [CIT].")
    assert sorted(p["paper_id"] for p in _read(tmp_path / "out" / "abstracts.jsonl")) == ["A", "B", "C"]
    assert report["counts"] == {"records": 3, "dropped_fewer_than_2_cited": 1, "contexts": 2, "papers": 3}
    assert json.loads((tmp_path / "out" / "report.json").read_text())["counts"]["contexts"] == 2


def test_bad_lines_name_file_and_line_or_are_skipped_and_counted(tmp_path):
    path = _write_jsonl(tmp_path / "in.jsonl", [_record(LONG_CONTEXT, "A", "B"), "{not json", {"context": "no ids"}])
    with pytest.raises(DataError, match=r"in\.jsonl:2: invalid JSON"):
        ingest_records(path, tmp_path / "out", held_out=())
    assert not (tmp_path / "out" / "contexts.jsonl").exists()  # atomic: nothing half-written
    path3 = _write_jsonl(tmp_path / "in3.jsonl", [_record(LONG_CONTEXT, "A", "B"), {"context": "no ids"}])
    with pytest.raises(DataError, match=r"in3\.jsonl:2: missing key\(s\) \['citing_paper_id', 'cited'\]"):
        ingest_records(path3, tmp_path / "out", held_out=())
    broken = _record(LONG_CONTEXT, "A", "B")
    del broken["cited"][1]["title"]
    path4 = _write_jsonl(tmp_path / "in4.jsonl", [_record(LONG_CONTEXT, "A", "C"), broken])
    with pytest.raises(DataError, match=r"in4\.jsonl:2: cited\[1\]: missing key\(s\) \['title'\]"):
        ingest_records(path4, tmp_path / "out", held_out=())
    report = ingest_records(path, tmp_path / "out", IngestConfig(on_error="skip"), held_out=())
    assert report["bad_lines"] == 2 and report["counts"]["contexts"] == 1
    assert ":2:" in report["bad_line_messages"][0] and ":3:" in report["bad_line_messages"][1]


def test_non_utf8_line_is_named_or_skipped_and_counted(tmp_path):
    path = _write_jsonl(tmp_path / "in.jsonl", [_record(LONG_CONTEXT, "A", "B")])
    with open(path, "ab") as fh:
        fh.write(b'{"citing_paper_id": "x", "context": "caf\xe9 [CIT]", "cited": []}\n')
    with pytest.raises(DataError, match=r"in\.jsonl:2: not UTF-8"):
        ingest_records(path, tmp_path / "out", held_out=())
    report = ingest_records(path, tmp_path / "out", IngestConfig(on_error="skip"), held_out=())
    assert report["bad_lines"] == 1 and report["counts"]["contexts"] == 1


# --------------------------------------------------------------------------- filters


def _filter_input(tmp_path: Path) -> Path:
    short = ["Too short."] * 2
    long_sentence = GOOD_ABSTRACT + [" ".join(["word"] * 81)]
    abstracts = {"S": short, "L": long_sentence, "M": GOOD_ABSTRACT * 7}  # M: 21 sentences
    rec = functools.partial(_record, abstracts=abstracts)
    rows = [
        rec(LONG_CONTEXT, "A", "B"),  # kept
        rec(LONG_CONTEXT + " Unconfirmed.", "A", "C", confirmed=False),  # kept unless confirmed_only
        rec(LONG_CONTEXT + " Four.", "A", "B", "C", "D"),  # max_cited
        rec("Too short (Smith, 2000; Jones, 2001).", "A", "B"),  # 4 tokens in text_clean -> context_tokens
        rec(" ".join(["many"] * 61) + ".", "A", "C"),  # 62 tokens -> context_tokens
        rec(LONG_CONTEXT + " Three.", "A", "B", "S"),  # S fails: trimmed to {A, B}
        rec(LONG_CONTEXT + " Bad.", "A", "L"),  # L fails: 1 paper left -> min_cited
        rec(LONG_CONTEXT + " Many.", "C", "M"),  # M fails: min_cited
        rec("  " + LONG_CONTEXT.upper(), "C", "D"),  # same text as row 0 up to case/space -> dedup
    ]
    ingest_records(_write_jsonl(tmp_path / "records.jsonl", rows), tmp_path / "ingest", held_out=())
    return tmp_path / "ingest"


def test_filters_remove_what_each_should_in_order(tmp_path):
    report = filter_contexts(_filter_input(tmp_path), tmp_path / "f")
    assert [row["filter"] for row in report["removed_in_order"]] == [
        "confirmed_only", "max_cited", "context_tokens", "bad_abstract", "min_cited", "dedup"]
    assert _removed(report) == {"confirmed_only": 0, "max_cited": 1, "context_tokens": 2, "bad_abstract": 0,
                                "min_cited": 2, "dedup": 1}
    assert report["papers"] == {"papers_in": 7, "removed_too_few_sentences": 1, "removed_sentence_too_long": 1,
                                "removed_too_many_sentences": 1, "papers_passing": 4}
    assert report["contexts_trimmed_by_bad_abstract"] == 3
    kept = _read(tmp_path / "f" / "contexts.jsonl")
    assert [c["cited_ids"] for c in kept] == [["A", "B"], ["A", "C"], ["A", "B"]]
    assert report["contexts_in"] == sum(_removed(report).values()) + report["contexts_out"]
    assert sorted(p["paper_id"] for p in _read(tmp_path / "f" / "abstracts.jsonl")) == ["A", "B", "C"]


def test_each_filter_is_configurable(tmp_path):
    src = _filter_input(tmp_path)
    off = FilterConfig(max_cited=None, min_context_tokens=None, max_context_tokens=None, min_abstract_sentences=None,
                       max_abstract_sentences=None, max_sentence_tokens=None, dedup="none")
    report = filter_contexts(src, tmp_path / "off", off)
    assert sum(_removed(report).values()) == 0 and report["contexts_out"] == 9
    report = filter_contexts(src, tmp_path / "conf", FilterConfig(confirmed_only=True))
    assert _removed(report)["confirmed_only"] == 1
    report = filter_contexts(src, tmp_path / "drop", FilterConfig(bad_abstract="drop_context"))
    assert _removed(report)["bad_abstract"] == 3 and _removed(report)["min_cited"] == 0
    # counted on the raw text, the two citations add 5 tokens each: the short context passes
    report = filter_contexts(src, tmp_path / "raw", FilterConfig(count_on="text"))
    assert _removed(report)["context_tokens"] == 1
    report = filter_contexts(src, tmp_path / "ws", FilterConfig(tokenizer="whitespace", max_context_tokens=10))
    assert _removed(report)["context_tokens"] == 8  # the six 12-word contexts, the short and the long one
    report = filter_contexts(src, tmp_path / "set", FilterConfig(dedup="text_and_set"))
    assert _removed(report)["dedup"] == 0


def test_config_file_and_overrides(tmp_path):
    yaml_path = tmp_path / "c.yaml"
    yaml_path.write_text("filter:\n  max_cited: 4\nsplit:\n  seed: 5\n")
    cfg = cocite.load_cocite_config(yaml_path, ["filter.dedup=none"])
    assert (cfg.filter.max_cited, cfg.split.seed, cfg.filter.dedup) == (4, 5, "none")
    with pytest.raises(ConfigError, match="max_citd"):
        cocite.load_cocite_config(None, ["filter.max_citd=4"])
    repo_cfg = cocite.load_cocite_config(Path(__file__).parents[1] / "configs" / "data_cocite.yaml")
    assert repo_cfg == CociteConfig()  # the shipped file states the embedded defaults


# --------------------------------------------------------------------------- grouping and the split


def _groups_dir(tmp_path: Path, sets: list[list[str]], contexts_per_set: int = 1) -> Path:
    rows = [{"set_id": cocite.set_id(s), "paper_ids": sorted(s),
             "context_ids": [f"{cocite.set_id(s)}#{k}" for k in range(contexts_per_set)],
             "contexts": [f"ctx {k} of {s}" for k in range(contexts_per_set)],
             "contexts_clean": [f"ctx {k} of {s}" for k in range(contexts_per_set)]}
            for s in sorted(sets, key=cocite.set_id)]
    _write_jsonl(tmp_path / "groups.jsonl", rows)
    papers = sorted({p for s in sets for p in s})
    _write_jsonl(tmp_path / "abstracts.jsonl", [{"paper_id": p, "title": p, "abstract": _own_abstract(p)}
                                                  for p in papers])
    return tmp_path


def test_group_contexts_by_cocited_set(tmp_path):
    rows = [_record(LONG_CONTEXT + f" {i}.", *ids) for i, ids in enumerate([("A", "B"), ("B", "A"), ("A", "B", "C")])]
    ingest_records(_write_jsonl(tmp_path / "r.jsonl", rows), tmp_path / "i", held_out=())
    report = group_contexts(tmp_path / "i", tmp_path / "g")
    groups = _read(tmp_path / "g" / "groups.jsonl")
    assert [(g["set_id"], len(g["context_ids"])) for g in groups] == [("A|B", 2), ("A|B|C", 1)]
    assert report["sets"] == 2 and report["contexts"] == 3 and report["set_size_histogram"] == {"2": 1, "3": 1}


def test_pair_components_join_sets_sharing_a_pair():
    sets = [["A", "B"], ["C", "D"], ["A", "B", "C"], ["D", "E"], ["B", "C"]]
    roots = pair_components(sets)
    # {A,B} ~ {A,B,C} (pair A-B) ~ {B,C} (pair B-C); {C,D} and {D,E} share only a paper, not a pair
    assert roots[0] == roots[2] == roots[4]
    assert len({roots[0], roots[1], roots[3]}) == 3


def _pairs(path: Path) -> set:
    return {pair for g in _read(path) for pair in pairs_of(g["paper_ids"])}


def test_split_keeps_every_pair_on_one_side(tmp_path):
    # a chain of sets linked by shared pairs, plus independent sets: a split by set alone would leak
    sets = [["A", "B"], ["A", "B", "C"], ["B", "C", "D"], ["C", "D"]] + [[f"x{i}", f"y{i}"] for i in range(16)]
    src = _groups_dir(tmp_path / "g", sets)
    report = split_groups(src, tmp_path / "s", SplitConfig(dev_fraction=0.25, seed=3))
    train, dev = _pairs(tmp_path / "s" / "groups.train.jsonl"), _pairs(tmp_path / "s" / "groups.dev.jsonl")
    assert train and dev and not (train & dev)
    assert report["dev"]["sets"] == 5 and report["train"]["sets"] == 15  # round(0.25 * 20), whole components
    assert report["components"] == 17 and report["largest_component_sets"] == 4
    chain = {cocite.set_id(s) for s in sets[:4]}
    dev_ids = {g["set_id"] for g in _read(tmp_path / "s" / "groups.dev.jsonl")}
    assert chain <= dev_ids or not (chain & dev_ids)


def test_split_is_deterministic_and_seeded(tmp_path):
    sets = [[f"p{i}", f"p{i + 1}"] for i in range(40)]
    src = _groups_dir(tmp_path / "g", sets)

    def dev_ids(seed: int, name: str) -> list[str]:
        split_groups(src, tmp_path / name, SplitConfig(dev_fraction=0.2, seed=seed))
        return [g["set_id"] for g in _read(tmp_path / name / "groups.dev.jsonl")]

    assert dev_ids(1, "a") == dev_ids(1, "b")
    assert dev_ids(1, "a") != dev_ids(2, "c")
    assert len(dev_ids(1, "a")) == 8


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sets(st.sampled_from("ABCDEFG"), min_size=2, max_size=3), min_size=1, max_size=25),
       st.integers(0, 5), st.floats(0.0, 0.9))
def test_split_never_shares_a_pair_property(tmp_path_factory, sets, seed, fraction):
    sets = [sorted(s) for s in {frozenset(s) for s in sets}]
    tmp = tmp_path_factory.mktemp("prop")
    report = split_groups(_groups_dir(tmp / "g", sets), tmp / "s", SplitConfig(dev_fraction=fraction, seed=seed))
    train, dev = _pairs(tmp / "s" / "groups.train.jsonl"), _pairs(tmp / "s" / "groups.dev.jsonl")
    assert not (train & dev)
    assert report["train"]["sets"] + report["dev"]["sets"] == len(sets)
    assert report["dev"]["sets"] <= round(fraction * len(sets))


# --------------------------------------------------------------------------- examples


def test_examples_every_pair_with_its_contexts_and_a_safe_negative(tmp_path):
    sets = [["A", "B"], ["A", "B", "C"], ["D", "E"], ["F", "G"], ["H", "I"]]
    src = _groups_dir(tmp_path / "g", sets, contexts_per_set=2)
    split_groups(src, tmp_path / "s", SplitConfig(dev_fraction=0.0))
    report = build_examples(tmp_path / "s", tmp_path / "e", ExamplesConfig(num_negatives=2, seed=7))
    examples = {e["example_id"]: e for e in cocite.iter_examples(tmp_path / "e", "train")}
    assert sorted(examples) == ["A|B", "A|C", "B|C", "D|E", "F|G", "H|I"]
    ab = examples["A|B"]
    assert (ab["query_id"], ab["positive_id"], ab["set_ids"]) == ("A", "B", ["A|B", "A|B|C"])
    assert len(ab["contexts"]) == len(ab["context_ids"]) == len(ab["contexts_clean"]) == 4
    for e in examples.values():
        members = set().union(*(s.split("|") for s in e["set_ids"]))
        assert len(e["negative_ids"]) == 2 == len(set(e["negative_ids"]))
        assert not set(e["negative_ids"]) & members
    assert report["train"]["examples"] == 6 and report["dev"]["examples"] == 0
    papers = {p["paper_id"] for p in _read(tmp_path / "e" / "abstracts.jsonl")}
    assert papers == {p for e in examples.values() for p in (e["query_id"], e["positive_id"], *e["negative_ids"])}
    build_examples(tmp_path / "s", tmp_path / "e2", ExamplesConfig(num_negatives=2, seed=7))
    assert (tmp_path / "e" / "examples.train.jsonl").read_text() == (tmp_path / "e2" / "examples.train.jsonl").read_text()
    build_examples(tmp_path / "s", tmp_path / "e3", ExamplesConfig(num_negatives=2, seed=8))
    assert (tmp_path / "e" / "examples.train.jsonl").read_text() != (tmp_path / "e3" / "examples.train.jsonl").read_text()


def test_examples_without_a_possible_negative_are_dropped_and_counted(tmp_path):
    src = _groups_dir(tmp_path / "g", [["A", "B", "C"]])
    split_groups(src, tmp_path / "s", SplitConfig(dev_fraction=0.0))
    report = build_examples(tmp_path / "s", tmp_path / "e")
    assert report["train"]["dropped_no_negative"] == 3 and report["train"]["examples"] == 0


# --------------------------------------------------------------------------- input B: S2ORC-style full text


def test_merge_spans_across_citations():
    spans = [(0, 20), (21, 40), (41, 60)]
    assert merge_spans_across_citations(spans, [(15, 25)]) == ([(0, 40), (41, 60)], 1)
    assert merge_spans_across_citations(spans, [(22, 30)]) == (spans, 0)
    assert merge_spans_across_citations(spans, [(10, 50)]) == ([(0, 60)], 2)


@pytest.mark.parametrize("splitter, merges", [("pysbd", 0), ("regex", 2)])
def test_mine_s2orc_fixture(tmp_path, splitter, merges):
    report = mine_s2orc(FIXTURE / "pdf_parses.jsonl", FIXTURE / "abstracts.jsonl", tmp_path / "i",
                        IngestConfig(splitter=splitter), held_out=set())
    counts = report["counts"]
    assert (counts["papers"], counts["paragraphs"], counts["cite_spans"]) == (3, 9, 23)
    assert counts["contexts"] == 6 and counts["dropped_fewer_than_2_linked"] == 3
    assert counts["dropped_fewer_than_2_with_abstract"] == 1 and counts["sentences_without_citations"] == 1
    assert counts["sentence_merges_at_citations"] == merges
    contexts = _read(tmp_path / "i" / "contexts.jsonl")
    assert [c["cited_ids"] for c in contexts] == [["P1", "P2"], ["P1", "P4", "P7"], ["P2", "P3"], ["P1", "P2"],
                                                  ["P2", "P3", "P6", "P7"], ["P1", "P6"]]
    assert contexts[0]["text"] == "Neural retrieval has been studied widely [1], [2]."
    assert contexts[0]["text_clean"] == "Neural retrieval has been studied widely [CIT]."
    assert contexts[2]["text_clean"] == "Retrieval models [CIT] are pretrained on large corpora of scientific papers."
    abstracts = {p["paper_id"]: p for p in _read(tmp_path / "i" / "abstracts.jsonl")}
    assert sorted(abstracts) == ["P1", "P2", "P3", "P4", "P6", "P7"]
    assert len(abstracts["P3"]["abstract"]) == 3  # a string abstract, split into sentences

    report = filter_contexts(tmp_path / "i", tmp_path / "f")
    assert _removed(report) == {"confirmed_only": 0, "max_cited": 1, "context_tokens": 0, "bad_abstract": 0,
                                "min_cited": 1, "dedup": 1}
    assert [c["cited_ids"] for c in _read(tmp_path / "f" / "contexts.jsonl")] == [["P1", "P2"], ["P1", "P4", "P7"], ["P2", "P3"]]


def test_mine_s2orc_bad_paper_names_line(tmp_path):
    good = (FIXTURE / "pdf_parses.jsonl").read_text().splitlines()[0]
    path = _write_jsonl(tmp_path / "pp.jsonl", [good, {"paper_id": "Z", "body_text": []}])
    with pytest.raises(DataError, match=r"pp\.jsonl:2: missing key\(s\) \['bib_entries'\]"):
        mine_s2orc(path, FIXTURE / "abstracts.jsonl", tmp_path / "o", held_out=set())


def test_mine_s2orc_leaves_out_the_benchmark_test_sentences(tmp_path):
    """The context2doc test sentences are dropped and counted, as by cocite-from-records; once the S2ORC input
    ignored ingest.exclude_benchmark_test and a test query could reach training."""
    test_sentence = "  Neural retrieval has been studied widely [1], [2]. "
    report = mine_s2orc(FIXTURE / "pdf_parses.jsonl", FIXTURE / "abstracts.jsonl", tmp_path / "o",
                        IngestConfig(splitter="regex"), held_out={test_sentence.strip()})
    assert report["counts"]["dropped_benchmark_test"] == 2 and report["counts"]["contexts"] == 4  # cited twice
    assert test_sentence.strip() not in [c["text"] for c in _read(tmp_path / "o" / "contexts.jsonl")]
    with pytest.raises(ValueError, match="exclude_benchmark_test needs the held-out sentences"):
        mine_s2orc(FIXTURE / "pdf_parses.jsonl", FIXTURE / "abstracts.jsonl", tmp_path / "p")
    kept = mine_s2orc(FIXTURE / "pdf_parses.jsonl", FIXTURE / "abstracts.jsonl", tmp_path / "q",
                      IngestConfig(splitter="regex", exclude_benchmark_test=False), held_out={test_sentence.strip()})
    assert kept["counts"]["contexts"] == 6 and "dropped_benchmark_test" not in kept["counts"]


# --------------------------------------------------------------------------- CLI and real data


def test_cli_stages_chain_on_the_fixture(tmp_path, capsys):
    d = tmp_path
    cli_main(["cocite-from-s2orc", "--fulltext", str(FIXTURE / "pdf_parses.jsonl"), "--abstracts",
              str(FIXTURE / "abstracts.jsonl"), "--out", str(d / "1"), "ingest.splitter=regex"])
    cli_main(["filter", "--in", str(d / "1"), "--out", str(d / "2")])
    cli_main(["group", "--in", str(d / "2"), "--out", str(d / "3")])
    cli_main(["split", "--in", str(d / "3"), "--out", str(d / "4"), "split.dev_fraction=0.0"])
    capsys.readouterr()
    cli_main(["examples", "--in", str(d / "4"), "--out", str(d / "5")])
    printed = json.loads(capsys.readouterr().out)
    # pairs of {P1,P2}, {P1,P4,P7}, {P2,P3}: P1-P2, P1-P4, P1-P7, P4-P7, P2-P3; P1-P2 has no negative left, since
    # every other paper is co-cited with P1 or P2 (a negative never is), so it is dropped and counted
    assert printed["train"]["examples"] == len(list(cocite.iter_examples(d / "5", "train"))) == 4
    assert printed["train"]["dropped_no_negative"] == 1


def test_run_all_on_records(tmp_path):
    rows = [_record(LONG_CONTEXT + f" {i}.", f"p{i}", f"p{i + 1}") for i in range(30)]
    out = cocite.run_all(_write_jsonl(tmp_path / "r.jsonl", rows), tmp_path / "run", held_out=())
    report = json.loads((tmp_path / "run" / "pipeline_report.json").read_text())
    n_train = report["stages"]["examples"]["train"]["examples"]
    n_dev = report["stages"]["examples"]["dev"]["examples"]
    assert n_dev == 3 and n_train == 27
    assert {e["split"] for e in cocite.iter_examples(out, "dev")} == {"dev"}


@pytest.mark.slow
def test_real_cocitations_run_all(tmp_path, shared_data):
    records = shared_data / "cocite-acl" / "cocitations.jsonl"
    out = cocite.run_all(records, tmp_path / "run", held_out=())
    stages = json.loads((tmp_path / "run" / "pipeline_report.json").read_text())["stages"]
    f = stages["filter"]
    assert stages["ingest"]["counts"]["records"] == 2600
    assert f["contexts_in"] == sum(_removed(f).values()) + f["contexts_out"]
    assert stages["group"]["contexts"] == f["contexts_out"]
    train = {(e["query_id"], e["positive_id"]) for e in cocite.iter_examples(out, "train")}
    dev = {(e["query_id"], e["positive_id"]) for e in cocite.iter_examples(out, "dev")}
    assert train and dev and not (train & dev)
    assert all(len(s.split("|")) <= 3 for e in cocite.iter_examples(out, "train") for s in e["set_ids"])
    assert len(train) == stages["split"]["train"]["pairs"]


def test_pairs_of_is_all_unordered_pairs():
    assert pairs_of(["C", "A", "B", "A"]) == list(itertools.combinations(["A", "B", "C"], 2))
