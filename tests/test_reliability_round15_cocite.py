"""Round 15: the co-citation filter stage against the papers reader and against hand-built input.

Defects: with `filter.min_abstract_sentences` 0 or null, a cited paper with an empty abstract (`"abstract": []`, which
ingest accepts and leaves to the filter) passed the filter, and the examples folder's `abstracts.jsonl` was then refused
by the papers reader that training and `align` use; and the filter read a hand-built folder as it came: a string
`cited_ids` "A|B" was read a character an id (kept as the set {A, B}), a string abstract was counted a character a
sentence, a "false" string `links_confirmed` passed `confirmed_only`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_reliability_round13_cocite import ABSTRACT, _read, _write_jsonl

from aspire.data.cocite import CociteConfig, DataError, FilterConfig, filter_contexts, run_all
from aspire.data.papers import read_paper_map
from tests.test_cocite import _own_abstract

CONTEXT = "We follow the earlier work on this task and its many later extensions here."


def _record(citing: str, context: str, abstracts: dict[str, list[str]]) -> dict:
    return {"citing_paper_id": citing, "context": context,
            "cited": [{"paper_id": p, "title": f"Title {p}", "abstract": a} for p, a in abstracts.items()]}


# --------------------------------------------------------------------------- empty abstracts


@pytest.mark.parametrize("bound", [0, None])
def test_an_empty_abstract_never_passes_the_filter_whatever_min_abstract_sentences(tmp_path, bound):
    records = [
        _record("X", CONTEXT, {"A": _own_abstract("A"), "B": [], "C": _own_abstract("C")}),  # B: no sentence -> {A, C}
        _record("Y", CONTEXT + " Again.", {"C": _own_abstract("C"), "D": _own_abstract("D")}),
        _record("Z", CONTEXT + " Once more.", {"E": _own_abstract("E"), "F": _own_abstract("F")}),
    ]
    cfg = CociteConfig()
    cfg.ingest.exclude_benchmark_test = False
    cfg.filter.min_abstract_sentences = bound
    cfg.split.dev_fraction = 0.0
    examples = run_all(_write_jsonl(tmp_path / "records.jsonl", records), tmp_path / "run", cfg)
    report = json.loads((tmp_path / "run" / "pipeline_report.json").read_text())["stages"]["filter"]
    assert report["papers"]["removed_too_few_sentences"] == 1 and report["papers"]["papers_passing"] == 5
    kept = _read(tmp_path / "run" / "2_filter" / "contexts.jsonl")
    assert [c["cited_ids"] for c in kept] == [["A", "C"], ["C", "D"], ["E", "F"]]
    # the reader training and align use takes every abstract the pipeline wrote (it refused B's before)
    papers = read_paper_map(examples / "abstracts.jsonl", split_strings=False)
    assert sorted(papers) == ["A", "C", "D", "E", "F"]


# --------------------------------------------------------------------------- hand-built filter input


def _folder(tmp_path: Path, papers: list[dict] | None = None, contexts: list[dict] | None = None) -> Path:
    good = [{"paper_id": p, "title": p, "abstract": ABSTRACT} for p in ("A", "B", "C")]
    _write_jsonl(tmp_path / "in" / "abstracts.jsonl", good + (papers or []))
    ctx = {"context_id": "c1", "text": CONTEXT, "text_clean": CONTEXT, "cited_ids": ["A", "B"]}
    _write_jsonl(tmp_path / "in" / "contexts.jsonl", [ctx, *(contexts or [])])
    return tmp_path / "in"


@pytest.mark.parametrize("change, message", [
    ({"cited_ids": "A|C"}, r"contexts\.jsonl:2: context 'c2': cited_ids must be a list of non-empty paper id strings"),
    ({"cited_ids": ["A", 3]}, r"contexts\.jsonl:2: context 'c2': cited_ids must be a list"),
    ({"text_clean": None}, r"contexts\.jsonl:2: context 'c2': text_clean must be a string, got null"),
    ({"links_confirmed": "false"}, r"contexts\.jsonl:2: context 'c2': links_confirmed must be true or false, got str"),
])
def test_filter_names_a_hand_built_context_it_cannot_read(tmp_path, change, message):
    ctx = {"context_id": "c2", "text": CONTEXT + " Two.", "text_clean": CONTEXT + " Two.", "cited_ids": ["A", "C"],
           **change}
    with pytest.raises(DataError, match=message):
        filter_contexts(_folder(tmp_path, contexts=[ctx]), tmp_path / "out", FilterConfig(confirmed_only=True))
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.parametrize("paper, message", [
    ({"paper_id": "S", "title": "s", "abstract": "One. Two. Three."},
     r"abstracts\.jsonl:4: paper 'S': abstract must be a list of sentences, got str"),
    ({"paper_id": 7, "title": "s", "abstract": ABSTRACT}, r"abstracts\.jsonl:4: paper_id must be a non-empty string, got int"),
    ({"paper_id": "A", "title": "again", "abstract": ABSTRACT}, r"abstracts\.jsonl:4: paper 'A' repeats the paper of line 1"),
    ({"paper_id": "S", "title": "s", "abstract": ["Fine.", "  "]}, r"abstracts\.jsonl:4: paper 'S': abstract\[1\] is empty"),
])
def test_filter_names_a_hand_built_paper_it_cannot_read(tmp_path, paper, message):
    with pytest.raises(DataError, match=message):
        filter_contexts(_folder(tmp_path, papers=[paper]), tmp_path / "out", FilterConfig(max_abstract_sentences=None))


def test_filter_still_reads_its_ingest_input_as_before(tmp_path):
    report = filter_contexts(_folder(tmp_path), tmp_path / "out")
    assert report["contexts_out"] == 1 and report["papers"]["papers_passing"] == 3
    assert [c["cited_ids"] for c in _read(tmp_path / "out" / "contexts.jsonl")] == [["A", "B"]]


# --------------------------------------------------------------------------- align: the teacher's input length


def _examples_with_a_long_context(root: Path) -> Path:
    _write_jsonl(root / "abstracts.jsonl", [{"paper_id": p, "title": p, "abstract": ABSTRACT} for p in ("A", "B")])
    long_context = " ".join(["the model of data"] * 40)  # 160 words: over 64 word pieces
    _write_jsonl(root / "examples.train.jsonl", [{"example_id": "A|B", "query_id": "A", "positive_id": "B",
                                                   "contexts_clean": [long_context, "the data of the model"]}])
    (root / "examples.dev.jsonl").write_text("", encoding="utf-8")
    return root


def test_align_refuses_a_max_seq_length_over_the_teachers_position_limit(tmp_path):
    from conftest import build_tiny_model

    from aspire.data.align import align_examples
    from aspire.data.cocite.config import AlignConfig
    from aspire.encoders.cosentbert import load_sentence_model

    teacher = load_sentence_model(build_tiny_model(tmp_path / "teacher64", max_position=64))
    examples = _examples_with_a_long_context(tmp_path / "ex")
    # the default 128 used to reach the model and fail there: "The size of tensor a (128) must match ... (64)"
    with pytest.raises(ValueError, match=r"align\.max_seq_length=128 is more than the teacher reads: its model has "
                                         r"room for 64 word pieces"):
        align_examples(examples, teacher, tmp_path / "out", AlignConfig())
    assert teacher.max_seq_length == 64 and not (tmp_path / "out").exists()
    for length in (64, None):  # at the limit, or the teacher's own: aligned
        report = align_examples(examples, teacher, tmp_path / f"out{length}", AlignConfig(max_seq_length=length))
        assert report["train"]["examples"] == 1
        (row,) = _read(tmp_path / f"out{length}" / "examples.train.jsonl")
        assert all(0 <= i < len(ABSTRACT) for i in row["cc_align"] + row["abs_align"])
    assert teacher.max_seq_length == 64
