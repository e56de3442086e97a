"""Round 9: what each training task feeds its loss — negatives that are co-citation partners of the anchor
(false negatives, in the examples stage and in the batch), and the teacher targets of a multi-task batch."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from aspire.data.cocite import build_examples, iter_examples, split_groups
from aspire.data.cocite.config import ExamplesConfig, SplitConfig
from aspire.losses import in_batch_negative_mask
from aspire.train.config import DataConfig
from aspire.train.data import TripletCollator, load_split
from tests.test_cocite import _groups_dir


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_example_negatives_are_never_cocited_with_the_query_or_the_positive_in_another_set(tmp_path):
    """A paper cited in one sentence with the query (in a set not holding the pair) is the query's positive in
    another example: the stage once drew it as a negative (20 of 1,065 train examples of cocite-acl)."""
    star = [["A", f"X{i}"] for i in range(6)]  # A co-cited with six papers, each pair in its own set
    sets = star + [["P1", "P2"], ["P3", "P4"]]
    split_groups(_groups_dir(tmp_path / "g", sets), tmp_path / "s", SplitConfig(dev_fraction=0.0))
    report = build_examples(tmp_path / "s", tmp_path / "e", ExamplesConfig(num_negatives=2, seed=3))
    partners: dict[str, set[str]] = {}
    for s in sets:
        for pid in s:
            partners.setdefault(pid, set()).update(s)
    examples = list(iter_examples(tmp_path / "e", "train"))
    assert len(examples) == report["train"]["examples"] == len(sets)  # nothing dropped: four papers remain
    for e in examples:
        cocited = partners[e["query_id"]] | partners[e["positive_id"]]
        assert not set(e["negative_ids"]) & cocited, (e["example_id"], e["negative_ids"])


def _data_dir(root: Path) -> Path:
    """Examples (A, B), (A, C), (D, E), (F, G), each pair its own set: C is A's partner outside the set of A|B."""
    root.mkdir()
    papers = ["A", "B", "C", "D", "E", "F", "G"]
    _write_jsonl(root / "abstracts.jsonl",
                 [{"paper_id": p, "title": f"paper {p}", "abstract": [f"sentence of {p}."]} for p in papers])
    pairs = [("A", "B"), ("A", "C"), ("D", "E"), ("F", "G")]
    lines = [{"example_id": f"{a}|{b}", "query_id": a, "positive_id": b, "negative_ids": [], "set_ids": [f"{a}|{b}"]}
             for a, b in pairs]
    _write_jsonl(root / "examples.train.jsonl", lines)
    _write_jsonl(root / "examples.dev.jsonl", lines[:1])
    return root


def test_an_anchors_other_cocited_papers_are_kept_out_of_its_in_batch_and_hard_negatives(tmp_path):
    """(A, B) and (A, C) in one batch: C, the positive of the other row, is A's co-citation partner, so it is no
    negative of the row (A, B) (it was: members held only the sets of the pair); B is not C's partner, so the
    row (C, A) may still take it. The hard negative of A skips C for D."""
    root = _data_dir(tmp_path / "ex")
    _write_jsonl(tmp_path / "hard.jsonl", [{"paper_id": "A", "negatives": ["C", "D"]}])
    cfg = DataConfig(examples_dir=str(root), hard_negatives=str(tmp_path / "hard.jsonl"), max_sentences=0)
    data = load_split(cfg, "train")
    by_dir = {(e.query_id, e.positive_id): e for e in data.examples}
    assert "C" in by_dir[("A", "B")].members and "B" in by_dir[("A", "C")].members
    assert "C" not in by_dir[("B", "A")].members and "B" not in by_dir[("C", "A")].members
    assert by_dir[("A", "B")].negative == "D" and by_dir[("A", "C")].negative == "D"
    rows = [by_dir[("A", "B")], by_dir[("A", "C")], by_dir[("C", "A")], by_dir[("D", "E")]]
    batch = TripletCollator(lambda papers, tasks=None: None, data.papers)(rows)
    allowed = in_batch_negative_mask(batch.group_ids, batch.pos_ids)  # (4, 4): candidate k = row k's positive
    assert allowed.tolist() == [[False, False, False, True],   # A->B: not B, C (partners) nor A (itself)
                                [False, False, False, True],   # A->C: likewise
                                [True, False, False, True],    # C->A: B is no partner of C
                                [True, True, True, False]]
    # the whole of a file names the partners, whatever max_examples keeps
    capped = load_split(DataConfig(examples_dir=str(root), max_examples=1, both_directions=False, max_sentences=0),
                        "train")
    assert [e.members for e in capped.examples] == [("A", "B", "C")]


def test_teacher_targets_go_to_the_distill_rows_only_even_where_a_cocited_pair_has_teacher_vectors():
    """In a mixed batch a co-cited pair whose two papers the teacher also encoded (ACL ids are shared by the
    co-citation and ACL Anthology data) keeps its one-hot target: its row of the teacher matrices is NaN. It was
    the teacher's softmax (and, its aligned sentence being the teacher's, the facet term's)."""
    import numpy as np
    import pytest

    from aspire.data.papers import Paper
    from aspire.losses.ranking import MultipleNegativesRankingLoss
    from aspire.train.data import Example

    papers = {p: Paper(p, f"title {p}", [f"first of {p}.", f"second of {p}."]) for p in "ABXY"}
    rng = np.random.default_rng(0)
    vecs = {p: (v / np.linalg.norm(v)).astype(np.float32) for p, v in zip("ABXY", rng.normal(size=(4, 8)))}
    sentences = {p: (0, papers[p].sentences[0], vecs[p][::-1].copy()) for p in "AX"}
    rows = [Example("A", "B", ("A", "B"), None, (0, 0), task=0),  # co-cited, aligned on the teacher's sentence
            Example("X", "Y", ("X", "Y"), None, (0, -1), task=1)]  # distilled
    collate = TripletCollator(lambda ps, tasks=None: None, papers, (1.0, 1.0), (), ["cocite", "distill"], vecs,
                              sentences)
    batch = collate(rows)
    assert torch.isnan(batch.teacher[0]).all() and torch.isnan(batch.facet_teacher[0]).all()
    assert batch.teacher[1].tolist() == pytest.approx([float(vecs["X"] @ vecs[c]) for c in "BY"], rel=1e-5)
    assert batch.facet_teacher[1].tolist() == pytest.approx([float(sentences["X"][2] @ vecs[c]) for c in "BY"],
                                                            rel=1e-5)
    sim = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    allowed = torch.ones(2, 2, dtype=torch.bool)
    loss = MultipleNegativesRankingLoss()
    plain = loss(sim, allowed)[0]
    assert loss(sim, allowed, teacher=batch.teacher)[0][0].item() == pytest.approx(plain[0].item())
    with pytest.raises(ValueError, match="teacher vectors but no 'distill' task"):
        TripletCollator(lambda ps, tasks=None: None, papers, teacher=vecs)


def test_every_paper_of_an_examples_sets_keeps_its_abstract_so_a_batch_can_mask_it(tmp_path):
    """A set paper whose own pairs were all dropped (too few negatives) was left out of abstracts.jsonl, yet
    training reads it as a member of the kept pairs of its set: the collator failed with a bare KeyError."""
    scenarios = {  # (sets, num_negatives): C's pairs are all dropped, A|B (of C's set) is kept
        "old rule": ([["A", "B", "C"], ["A", "C", "D1", "D2"], ["B", "C", "G1", "G2"]], 4),
        "partners rule": ([["A", "B", "C"], ["C", "X1"], ["C", "X2"], ["C", "X3"], ["C", "X4"]], 2),
    }
    kept_somewhere = False
    for name, (sets, k) in scenarios.items():
        split_groups(_groups_dir(tmp_path / name / "g", sets), tmp_path / name / "s", SplitConfig(dev_fraction=0.0))
        build_examples(tmp_path / name / "s", tmp_path / name / "e", ExamplesConfig(num_negatives=k, seed=1))
        examples = list(iter_examples(tmp_path / name / "e", "train"))
        has = {json.loads(line)["paper_id"] for line in (tmp_path / name / "e" / "abstracts.jsonl").open()}
        for e in examples:
            in_sets = {pid for sid in e["set_ids"] for pid in sid.split("|")}
            assert in_sets <= has, (name, e["example_id"], sorted(in_sets - has))
        kept_somewhere |= any("C" in {p for sid in e["set_ids"] for p in sid.split("|")} for e in examples)
        if examples:
            data = load_split(DataConfig(examples_dir=str(tmp_path / name / "e"), max_sentences=0, use_dev=False),
                              "train")
            TripletCollator(lambda papers, tasks=None: None, data.papers)(data.examples)  # every member indexed
    assert kept_somewhere
