"""Bad input to the group, split, examples and align stages is named (file, line, key), never aligned to the
wrong text, merged into another set or passed on in silence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_align import _HashTeacher

from aspire.data.align import AlignConfig, align_examples
from aspire.data.cocite import build_examples, group_contexts, split_groups
from aspire.io import DataError

PAPERS = {"P": ["P zero.", "P one.", "P two."], "Q": ["Q zero.", "Q one."], "N": ["N zero."]}
EXAMPLE = {"example_id": "P|Q", "split": "train", "query_id": "P", "positive_id": "Q", "negative_ids": ["N"],
           "set_ids": ["P|Q"], "context_ids": ["c1"], "contexts": ["raw"], "contexts_clean": ["P two."]}


def _jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _examples_dir(root: Path, train: list, abstracts: list | None = None) -> Path:
    papers = abstracts if abstracts is not None else [{"paper_id": k, "title": k, "abstract": v}
                                                      for k, v in PAPERS.items()]
    _jsonl(root / "abstracts.jsonl", papers)
    _jsonl(root / "examples.train.jsonl", train)
    _jsonl(root / "examples.dev.jsonl", [])
    return root


# --------------------------------------------------------------------------- align


@pytest.mark.parametrize("contexts, message", [
    ("P two.", r"contexts_clean must be a list of strings, got 'P two\.'"),  # was aligned to its characters
    ([""], r"contexts_clean\[0\] is blank"),  # was aligned to an empty text
    (["P two.", "  "], r"contexts_clean\[1\] is blank"),
])
def test_align_refuses_contexts_that_are_not_a_list_of_sentences(tmp_path, contexts, message):
    d = _examples_dir(tmp_path / "e", [EXAMPLE | {"contexts_clean": contexts}])
    with pytest.raises(DataError, match=rf"examples\.train\.jsonl:1: example P\|Q: {message}"):
        align_examples(d, _HashTeacher(), tmp_path / "out")
    assert not (tmp_path / "out" / "examples.train.jsonl").exists()


@pytest.mark.parametrize("change, message", [
    ({"query_id": "Z"}, r"example P\|Q: query_id 'Z' has no abstract in abstracts\.jsonl"),  # was KeyError: 'Z'
    ({"positive_id": 7}, r"example P\|Q: positive_id must be a string .*got int 7"),  # was KeyError: 7
    ({"positive_id": "P"}, r"example P\|Q pairs paper 'P' with itself"),  # was aligned as a pair
])
def test_align_names_the_example_whose_papers_are_wrong(tmp_path, change, message):
    d = _examples_dir(tmp_path / "e", [EXAMPLE | change])
    with pytest.raises(DataError, match=rf"examples\.train\.jsonl:1: {message}"):
        align_examples(d, _HashTeacher(), tmp_path / "out")


@pytest.mark.parametrize("key", ["example_id", "query_id", "contexts_clean"])
def test_align_names_the_line_missing_a_key(tmp_path, key):
    d = _examples_dir(tmp_path / "e", [EXAMPLE, {k: v for k, v in EXAMPLE.items() if k != key}])
    with pytest.raises(DataError, match=rf"examples\.train\.jsonl:2: missing key\(s\) \['{key}'\]"):
        align_examples(d, _HashTeacher(), tmp_path / "out")


def test_align_refuses_an_example_given_twice_in_a_split(tmp_path):
    d = _examples_dir(tmp_path / "e", [EXAMPLE, EXAMPLE])  # was aligned and written twice (trained on twice)
    with pytest.raises(DataError, match=r"examples\.train\.jsonl:2: example_id .P\|Q. repeats the one of .*:1"):
        align_examples(d, _HashTeacher(), tmp_path / "out")


def test_align_checks_every_example_before_encoding(tmp_path):
    class Counting(_HashTeacher):
        calls = 0

        def encode(self, texts, **kw):
            Counting.calls += 1
            return super().encode(texts, **kw)

    d = _examples_dir(tmp_path / "e", [EXAMPLE])
    _jsonl(d / "examples.dev.jsonl", [EXAMPLE | {"split": "dev", "contexts_clean": []}])
    with pytest.raises(DataError, match=r"examples\.dev\.jsonl:1: example P\|Q has no contexts to align to"):
        align_examples(d, Counting(), tmp_path / "out")
    assert Counting.calls == 0 and not (tmp_path / "out").exists()


def test_align_still_aligns_a_one_sentence_abstract_and_unicode_contexts(tmp_path):
    papers = [{"paper_id": "P", "title": "", "abstract": ["Une phrase naïve → α."]},
              {"paper_id": "Q", "title": "Q", "abstract": ["Q zero.", "Q one."]}]
    d = _examples_dir(tmp_path / "e", [EXAMPLE | {"contexts_clean": ["Q one.", "café"]}], papers)
    report = align_examples(d, _HashTeacher(), tmp_path / "out", AlignConfig())
    (out,) = [json.loads(line) for line in (tmp_path / "out" / "examples.train.jsonl").read_text().splitlines()]
    assert out["cc_align"] == [0, 1] and report["train"]["examples"] == 1


def test_align_refuses_a_teacher_giving_nan_vectors_naming_the_texts(tmp_path):
    """A broken teacher: NaN cosines made every alignment the first sentence, written with nothing said."""
    class Broken(_HashTeacher):
        def encode(self, texts, **kw):
            vecs = super().encode(texts, **kw)
            vecs[[i for i, t in enumerate(texts) if t == "Q one."]] = float("nan")
            return vecs

    d = _examples_dir(tmp_path / "e", [EXAMPLE])
    with pytest.raises(ValueError, match=r"the teacher gave 1 of 6 texts a NaN or infinite vector, e\.g\. \['Q one\.'\]"):
        align_examples(d, Broken(), tmp_path / "out")
    assert not (tmp_path / "out" / "examples.train.jsonl").exists()


# --------------------------------------------------------------------------- group


def _ctx(i: int, cited, **extra) -> dict:
    return {"context_id": f"c{i}", "text": f"text {i}", "text_clean": f"text {i}", "cited_ids": cited, **extra}


def _contexts_dir(root: Path, contexts: list[dict]) -> Path:
    _jsonl(root / "contexts.jsonl", contexts)
    _jsonl(root / "abstracts.jsonl", [{"paper_id": p, "title": p, "abstract": ["s."]} for p in "ABC"])
    return root


def test_group_refuses_a_paper_id_holding_the_set_id_separator(tmp_path):
    # {"A|B", "C"} and {"A", "B|C"} both had set id "A|B|C": the second's context joined the first's set
    d = _contexts_dir(tmp_path / "f", [_ctx(1, ["A|B", "C"]), _ctx(2, ["A", "B|C"])])
    with pytest.raises(DataError, match=r"contexts\.jsonl:1: context 'c1': cited_ids: paper id 'A\|B' holds '\|'"):
        group_contexts(d, tmp_path / "g")


@pytest.mark.parametrize("cited, message", [
    ("AB", r"cited_ids must be a list of non-empty paper id strings, got 'AB'"),  # was read as ["A", "B"]
    ([1, 2], r"cited_ids must be a list of non-empty paper id strings"),  # was a TypeError traceback
    (["A", "A", "B"], r"cited_ids names a paper twice"),  # was a set "A|A|B" apart from "A|B"
    (["A"], r"cited_ids names 1 paper\(s\); a co-cited set needs two or more"),  # was a set with no pair
])
def test_group_names_a_context_whose_cited_ids_are_not_a_set(tmp_path, cited, message):
    d = _contexts_dir(tmp_path / "f", [_ctx(1, ["A", "B"]), _ctx(2, cited)])
    with pytest.raises(DataError, match=rf"contexts\.jsonl:2: context 'c2': {message}"):
        group_contexts(d, tmp_path / "g")


def test_group_refuses_a_repeated_context_id(tmp_path):
    d = _contexts_dir(tmp_path / "f", [_ctx(1, ["A", "B"]), _ctx(1, ["A", "C"])])
    with pytest.raises(DataError, match=r"contexts\.jsonl:2: context_id .c1. repeats the one of .*contexts\.jsonl:1"):
        group_contexts(d, tmp_path / "g")


# --------------------------------------------------------------------------- split and examples


def _group(ids: list[str], **change) -> dict:
    sid = "|".join(sorted(ids))
    return {"set_id": sid, "paper_ids": sorted(ids), "context_ids": [f"{sid}#1"], "contexts": ["raw"],
            "contexts_clean": ["clean"], **change}


def _split_dir(root: Path, train: list[dict], dev: list[dict] = (), papers: str = "ABCDEF") -> Path:
    _jsonl(root / "groups.train.jsonl", train)
    _jsonl(root / "groups.dev.jsonl", list(dev))
    _jsonl(root / "abstracts.jsonl", [{"paper_id": p, "title": p, "abstract": ["s."]} for p in papers])
    return root


@pytest.mark.parametrize("change, message", [
    ({"paper_ids": "AB"}, r"co-cited set 'A\|B': paper_ids must be a list of non-empty paper id strings"),
    ({"set_id": "B|A"}, r"set_id 'B\|A' is not the set id of its paper_ids, 'A\|B'"),
    ({"contexts_clean": []}, r"co-cited set 'A\|B': context_ids, contexts and contexts_clean differ in length"),
    ({"context_ids": "A|B#1"}, r"co-cited set 'A\|B': context_ids must be a list of strings"),
])
def test_split_names_a_malformed_set(tmp_path, change, message):
    _jsonl(tmp_path / "g" / "groups.jsonl", [_group(["A", "B"], **change)])
    _jsonl(tmp_path / "g" / "abstracts.jsonl", [{"paper_id": p, "title": p, "abstract": ["s."]} for p in "AB"])
    with pytest.raises(DataError, match=rf"groups\.jsonl:1: {message}"):
        split_groups(tmp_path / "g", tmp_path / "s")


def test_split_names_a_set_missing_its_contexts_and_a_repeated_set(tmp_path):
    _jsonl(tmp_path / "g" / "groups.jsonl", [{"set_id": "A|B", "paper_ids": ["A", "B"]}])
    _jsonl(tmp_path / "g" / "abstracts.jsonl", [])
    with pytest.raises(DataError, match=r"groups\.jsonl:1: missing key\(s\) \['context_ids', 'contexts', "):
        split_groups(tmp_path / "g", tmp_path / "s")  # was KeyError: 'context_ids' after reading the whole file
    _jsonl(tmp_path / "g" / "groups.jsonl", [_group(["A", "B"]), _group(["A", "B"])])
    with pytest.raises(DataError, match=r"groups\.jsonl:2: co-cited set 'A\|B' repeats the set of line 1"):
        split_groups(tmp_path / "g", tmp_path / "s")


def test_examples_refuse_a_set_naming_a_paper_without_an_abstract(tmp_path):
    # the example "A|Z" was written although Z has no abstract; align then failed with KeyError: 'Z'
    d = _split_dir(tmp_path / "s", [_group(["A", "Z"]), _group(["C", "D"])])
    with pytest.raises(DataError, match=r"groups\.train\.jsonl:1: co-cited set 'A\|Z': paper 'Z' has no abstract"):
        build_examples(d, tmp_path / "e")
    assert not (tmp_path / "e" / "examples.train.jsonl").exists()


def test_examples_refuse_a_pair_in_both_splits(tmp_path):
    d = _split_dir(tmp_path / "s", [_group(["A", "B"]), _group(["C", "D"])], dev=[_group(["A", "B", "E"])])
    with pytest.raises(DataError, match=r"groups\.dev\.jsonl:1: the pair A\|B is also in .*groups\.train\.jsonl:1"):
        build_examples(d, tmp_path / "e")
    assert not (tmp_path / "e" / "examples.train.jsonl").exists()  # refused before anything is written


def test_examples_name_an_abstract_without_a_paper_id(tmp_path):
    d = _split_dir(tmp_path / "s", [_group(["A", "B"]), _group(["C", "D"])])
    with (d / "abstracts.jsonl").open("a") as f:
        f.write(json.dumps({"title": "x", "abstract": ["s."]}) + "\n")
    with pytest.raises(DataError, match=r"abstracts\.jsonl:7: missing key\(s\) \['paper_id'\]"):
        build_examples(d, tmp_path / "e")


# --------------------------------------------------------------------------- papers


def test_read_paper_map_takes_integer_ids_as_the_file_does(tmp_path):
    from aspire.data.papers import read_paper_map

    path = _jsonl(tmp_path / "papers.jsonl", [{"paper_id": 5, "title": "t", "abstract": ["a."]},
                                              {"paper_id": "6", "title": "t", "abstract": ["b."]}])
    # an integer paper_id in the file is read as "5"; asking for 5 once said "1 requested papers missing: [5]"
    assert sorted(read_paper_map(path, ids=[5, "6"])) == ["5", "6"]
    with pytest.raises(ValueError, match=r"1 requested papers missing: \['7'\]"):
        read_paper_map(path, ids=[5, 7])
