"""Round 63 (the fix prepared in round 62): the examples stage never draws a paper's other version
(`aspire.data.acl.same_work_groups`: the same normalised title or abstract under another id, such as P05-1018 and
its journal version J08-1001) as a random negative of a pair holding that paper, or a paper co-cited with it; a
version is only passed over when drawn, so every other draw stays as it was."""

from __future__ import annotations

from pathlib import Path

from aspire.data.cocite import ExamplesConfig, iter_examples
from aspire.data.cocite.sets import build_examples, set_id
from tests.test_reliability_round36_sets import _write_jsonl

OTHERS = [f"N{i}" for i in range(6)]


def _folder(folder: Path, titles: dict[str, str], train: list[list[str]]) -> Path:
    """A split stage's folder: `train` sets, one dev set of two of `OTHERS`, a distinct abstract a paper."""
    for split, sets in (("train", train), ("dev", [OTHERS[:2]])):
        _write_jsonl(folder / f"groups.{split}.jsonl", [
            {"set_id": set_id(ids), "paper_ids": sorted(ids), "context_ids": [f"{split}{i}"], "contexts": ["c"],
             "contexts_clean": ["c"]} for i, ids in enumerate(sets)])
    _write_jsonl(folder / "abstracts.jsonl", [{"paper_id": p, "title": t, "abstract": [f"Abstract of {p}."]}
                                              for p, t in titles.items()])
    return folder


def _titles(version_title: str) -> dict[str, str]:
    titles = {p: f"Title {p}" for p in ("P05-1018", "X", "C", "C2", *OTHERS)}
    return {**titles, "J08-1001": version_title}


def _negatives(out: Path) -> dict[str, list[str]]:
    return {e["example_id"]: e["negative_ids"] for split in ("train", "dev") for e in iter_examples(out, split)}


def test_a_negative_is_never_a_version_of_the_pair_or_of_a_partner(tmp_path):
    """J08-1001 is P05-1018's journal version (same title), C2 is C's (same title); C is co-cited with X. Old code
    drew J08-1001 as a negative of P05-1018|X (and C2 as one of X's pairs) for several seeds."""
    titles = {**_titles("Title P05-1018"), "C2": "Title C"}
    folder = _folder(tmp_path / "in", titles, [["P05-1018", "X"], ["X", "C"]])
    bad = []
    for seed in range(20):
        out = tmp_path / f"out{seed}"
        build_examples(folder, out, ExamplesConfig(num_negatives=2, negatives_from="all", seed=seed))
        negatives = _negatives(out)
        assert set(negatives) == {"P05-1018|X", "C|X", "N0|N1"}  # no pair dropped: four candidates are left
        bad += [(seed, negatives[pair]) for pair in ("P05-1018|X", "C|X")
                if {"J08-1001", "C2"} & set(negatives[pair])]
    assert bad == []


def test_a_pair_whose_only_candidates_are_versions_is_dropped_and_counted(tmp_path):
    """Two ids, one work: old code had to give P05-1018|X three negatives out of J08-1001, N0 and N1, so it drew
    P05-1018's journal version."""
    titles = {p: t for p, t in _titles("Title P05-1018").items() if p in ("P05-1018", "X", "J08-1001", *OTHERS[:2])}
    folder = _folder(tmp_path / "in", titles, [["P05-1018", "X"]])
    report = build_examples(folder, tmp_path / "out", ExamplesConfig(num_negatives=3, negatives_from="all"))
    assert "P05-1018|X" not in _negatives(tmp_path / "out")
    assert report["train"]["dropped_no_negative"] == 1
    assert sorted(_negatives(tmp_path / "out")["N0|N1"]) == ["J08-1001", "P05-1018", "X"]  # not a version of N0, N1


def test_a_version_is_only_passed_over_when_drawn(tmp_path):
    """Against the same input with J08-1001 under a title of its own: every pair whose draw there never met
    J08-1001 gets the same negatives, in the same order (the generator's stream did not move)."""
    train = [["P05-1018", "X"], ["X", "C"], ["C", "C2"], ["N2", "N3"]]
    same, kept = 0, 0
    for seed in range(10):
        cfg = ExamplesConfig(num_negatives=3, negatives_from="all", seed=seed)
        build_examples(_folder(tmp_path / f"a{seed}", _titles("Another title"), train), tmp_path / f"oa{seed}", cfg)
        build_examples(_folder(tmp_path / f"b{seed}", _titles("Title P05-1018"), train), tmp_path / f"ob{seed}", cfg)
        apart, one_work = _negatives(tmp_path / f"oa{seed}"), _negatives(tmp_path / f"ob{seed}")
        for pair, negatives in apart.items():
            if "J08-1001" not in negatives or not {"P05-1018", "X"} & set(pair.split("|")):
                assert one_work[pair] == negatives, (seed, pair)
                same += 1
            else:
                kept += pair in one_work and "J08-1001" not in one_work[pair]
    assert same > 0 and kept > 0  # both kinds of pair were met


def test_abstracts_without_title_or_abstract_are_read_as_before(tmp_path):
    """A hand-built folder whose abstracts hold only ids: no versions, every pair gets its negative."""
    folder = _folder(tmp_path / "in", _titles("x"), [["P05-1018", "X"]])
    _write_jsonl(folder / "abstracts.jsonl", [{"paper_id": p} for p in _titles("x")])
    build_examples(folder, tmp_path / "out", ExamplesConfig(num_negatives=1, negatives_from="all"))
    assert set(_negatives(tmp_path / "out")) == {"P05-1018|X", "N0|N1"}


def test_a_version_by_abstract_alone_is_never_a_negative(tmp_path):
    """J08-1001 has a title of its own but P05-1018's abstract, given as one string where P05-1018's is a sentence
    list: one abstract key, one work. Old code drew J08-1001 as a negative of P05-1018|X for some seeds."""
    folder = _folder(tmp_path / "in", _titles("A journal title"), [["P05-1018", "X"]])
    records = [{"paper_id": p, "title": t, "abstract": [f"Abstract of {p}.", "Second sentence."]}
               for p, t in _titles("A journal title").items()]
    for r in records:
        if r["paper_id"] == "J08-1001":
            r["abstract"] = "Abstract of P05-1018. Second sentence."
    _write_jsonl(folder / "abstracts.jsonl", records)
    drawn = []
    for seed in range(20):
        out = tmp_path / f"out{seed}"
        build_examples(folder, out, ExamplesConfig(num_negatives=3, negatives_from="all", seed=seed))
        drawn += _negatives(out)["P05-1018|X"]
    assert len(drawn) == 60 and "J08-1001" not in drawn
