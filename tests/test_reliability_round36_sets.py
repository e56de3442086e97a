"""Round 36: co-cited sets and citation cleaning against hand loops; the examples stage refuses an abstract whose
paper id repeats or is no string, naming its line."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from aspire.data.cocite import DataError, ExamplesConfig, SplitConfig
from aspire.data.cocite.sets import build_examples, group_contexts, set_id, split_groups
from aspire.data.cocite.text import clean_citations, get_tokenizer


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _split_folder(folder: Path, abstracts: list[dict]) -> Path:
    for split, sets in (("train", [["A", "B"], ["C", "D"]]), ("dev", [["E", "F"]])):
        _write_jsonl(folder / f"groups.{split}.jsonl", [
            {"set_id": set_id(ids), "paper_ids": ids, "context_ids": [f"{split}{i}"], "contexts": ["c"],
             "contexts_clean": ["c"]} for i, ids in enumerate(sets)])
    _write_jsonl(folder / "abstracts.jsonl", abstracts)
    return folder


def test_build_examples_refuses_a_repeated_abstract_paper_id(tmp_path):
    """Old code copied both lines of paper "A" to the examples' abstracts.jsonl (7 records for 6 papers)."""
    papers = [{"paper_id": p, "title": p, "abstract": ["s."]} for p in "ABCDEFG"]
    folder = _split_folder(tmp_path / "in", papers + [{"paper_id": "A", "title": "other", "abstract": ["t."]}])
    with pytest.raises(DataError, match=r"abstracts\.jsonl:8: paper_id 'A' repeats"):
        build_examples(folder, tmp_path / "out", ExamplesConfig(num_negatives=1, negatives_from="all"))


@pytest.mark.parametrize("bad", [5, "", None])
def test_build_examples_refuses_a_non_string_abstract_paper_id(tmp_path, bad):
    """Old code crashed with TypeError in `sorted` on an int id, and took "" or None as a paper."""
    papers = [{"paper_id": p, "title": p, "abstract": ["s."]} for p in "ABCDEFG"]
    folder = _split_folder(tmp_path / "in", papers + [{"paper_id": bad, "title": "x", "abstract": ["t."]}])
    with pytest.raises(DataError, match=r"abstracts\.jsonl:8: paper_id must be a non-empty string"):
        build_examples(folder, tmp_path / "out", ExamplesConfig(num_negatives=1, negatives_from="all"))


def test_group_split_examples_match_hand_loops(tmp_path):
    rng = random.Random(7)
    papers = [f"P{i:02d}" for i in range(14)]
    contexts = []
    for i in range(40):
        cited = rng.sample(papers[:10], rng.choice([2, 2, 3]))
        contexts.append({"context_id": f"c{i}", "text": f"raw {i}", "text_clean": f"clean {i}", "cited_ids": cited})
    _write_jsonl(tmp_path / "f" / "contexts.jsonl", contexts)
    _write_jsonl(tmp_path / "f" / "abstracts.jsonl", [{"paper_id": p, "title": p, "abstract": ["s."]} for p in papers])
    group_contexts(tmp_path / "f", tmp_path / "g")
    groups = [json.loads(line) for line in (tmp_path / "g" / "groups.jsonl").read_text().splitlines()]
    expected: dict[str, list[str]] = {}
    for ctx in contexts:  # hand loop: contexts by their sorted cited ids, in input order
        expected.setdefault("|".join(sorted(ctx["cited_ids"])), []).append(ctx["context_id"])
    assert [g["set_id"] for g in groups] == sorted(expected)
    assert {g["set_id"]: g["context_ids"] for g in groups} == expected

    split_groups(tmp_path / "g", tmp_path / "s", SplitConfig(dev_fraction=0.3, seed=3))
    by_split = {s: [json.loads(line) for line in (tmp_path / "s" / f"groups.{s}.jsonl").read_text().splitlines()]
                for s in ("train", "dev")}
    assert sorted(g["set_id"] for s in by_split for g in by_split[s]) == sorted(expected)  # each set once
    pairs = {s: {p for g in by_split[s] for p in itertools.combinations(g["paper_ids"], 2)} for s in by_split}
    assert not pairs["train"] & pairs["dev"]

    build_examples(tmp_path / "s", tmp_path / "e", ExamplesConfig(num_negatives=2, negatives_from="all"))
    all_sets = [set(g["paper_ids"]) for s in by_split for g in by_split[s]]
    for split in ("train", "dev"):
        rows = [json.loads(line) for line in (tmp_path / "e" / f"examples.{split}.jsonl").read_text().splitlines()]
        for row in rows:
            a, b = row["query_id"], row["positive_id"]
            assert a < b and row["example_id"] == f"{a}|{b}"
            holding = [g for g in by_split[split] if {a, b} <= set(g["paper_ids"])]
            assert row["context_ids"] == [c for g in holding for c in g["context_ids"]]
            partners = {p for s in all_sets if a in s or b in s for p in s}
            assert len(set(row["negative_ids"])) == 2 and not set(row["negative_ids"]) & partners
        assert {(r["query_id"], r["positive_id"]) for r in rows} <= pairs[split]


def test_clean_citations_comma_and_off_keeps_two_markers():
    assert clean_citations("X (2002), and Y (2003) z", comma_and=False) == "[CIT], and [CIT] z"


def test_regex_tokenizer_as_documented():
    tok = get_tokenizer("regex")
    assert tok("95.2% of [CIT] state-of-the-art don't") == ["95", ".", "2", "%", "of", "[CIT]", "state-of-the-art",
                                                           "don't"]
    with pytest.raises(ValueError, match="valid"):
        get_tokenizer("nope")
