"""The co-citation split reads one work under several ids (a paper and its journal version) as one paper: a pair of
works is never in both train and dev under two ids (split.seed=8 on the real ACL co-citations put
{J95-2003, P05-1018} in dev and {J08-1001, J95-2003}, P05-1018's journal version, in train)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aspire.data.cocite import DataError, SplitConfig, build_examples, pairs_of, set_id, split_groups

# P05 and J08 are one work: the same title (`aspire.data.acl.same_work_groups`)
VERSIONS = {"P05": "Modeling Local Coherence: An Entity-based Approach",
            "J08": "Modeling Local Coherence: An Entity-Based Approach"}


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _group(ids: list[str]) -> dict:
    sid = set_id(ids)
    return {"set_id": sid, "paper_ids": sorted(ids), "context_ids": [f"{sid}#0"], "contexts": [f"ctx of {sid}"],
            "contexts_clean": [f"ctx of {sid}"]}


def _abstracts(papers: set[str]) -> list[dict]:
    return [{"paper_id": p, "title": VERSIONS.get(p, f"Title {p}"),
             "abstract": [f"{p}: first sentence.", f"{p}: second sentence.", f"{p}: third sentence."]}
            for p in sorted(papers)]


def _groups_dir(folder: Path, sets: list[list[str]]) -> Path:
    _write(folder / "groups.jsonl", [_group(s) for s in sorted(sets, key=set_id)])
    _write(folder / "abstracts.jsonl", _abstracts({p for s in sets for p in s}))
    return folder


def _work_pairs(path: Path) -> set[tuple[str, str]]:
    one = {"J08": "P05"}
    return {pair for line in path.read_text().splitlines()
            for pair in pairs_of(one.get(p, p) for p in json.loads(line)["paper_ids"])}


def test_split_keeps_a_pair_of_works_on_one_side_whatever_the_ids(tmp_path):
    sets = [["C", "P05"], ["C", "J08"]] + [[f"x{i}", f"y{i}"] for i in range(8)]
    src = _groups_dir(tmp_path / "g", sets)
    for seed in range(12):  # half the sets go to dev: two unlinked sets part at about every other seed
        out = tmp_path / f"s{seed}"
        split_groups(src, out, SplitConfig(dev_fraction=0.5, seed=seed))
        train, dev = _work_pairs(out / "groups.train.jsonl"), _work_pairs(out / "groups.dev.jsonl")
        assert not train & dev, f"seed {seed}: {sorted(train & dev)} in both train and dev"


def test_examples_refuse_a_hand_built_split_with_a_pair_of_works_on_both_sides(tmp_path):
    folder = tmp_path / "s"
    _write(folder / "groups.train.jsonl", [_group(["C", "J08"]), _group(["x", "y"])])
    _write(folder / "groups.dev.jsonl", [_group(["C", "P05"]), _group(["u", "v"])])
    _write(folder / "abstracts.jsonl", _abstracts({"C", "J08", "P05", "x", "y", "u", "v"}))
    with pytest.raises(DataError, match=r"groups\.dev\.jsonl:1: the pair C\|P05 is also in .*groups\.train\.jsonl:1 "
                                        r"as C\|J08 \(one work under two ids\)"):
        build_examples(folder, tmp_path / "e")
