"""Hard-negative mining (`aspire.data.negatives`) on a constructed co-citation graph."""

from __future__ import annotations

import json

import pytest
import torch

from aspire.data.__main__ import main
from aspire.data.negatives import (
    HardNegativesConfig,
    citation_negatives,
    mine_hard_negatives,
    nearest_negatives,
    read_groups,
)
from aspire.train.data import _read_hard_negatives

# X cites A with B, and C with D, in two sentences; Y cites A with E, and C with F. So A's citing papers
# (X, Y) also cite C (twice), D and F, never with A; B and E are A's co-citation partners.
GROUPS = {
    "train": [
        {"set_id": "A|B", "paper_ids": ["A", "B"], "context_ids": ["X#L1"]},
        {"set_id": "C|D", "paper_ids": ["C", "D"], "context_ids": ["X#L2"]},
        {"set_id": "A|E", "paper_ids": ["A", "E"], "context_ids": ["Y#L1"]},
    ],
    "dev": [{"set_id": "C|F", "paper_ids": ["C", "F"], "context_ids": ["Y#L2"]}],
}
PAPERS = ["A", "B", "C", "D", "E", "F", "G"]  # G is in no set


@pytest.fixture()
def examples_dir(tmp_path):
    root = tmp_path / "examples"
    root.mkdir()
    with open(root / "abstracts.jsonl", "w") as fh:
        for pid in PAPERS:
            fh.write(json.dumps({"paper_id": pid, "title": f"title {pid}", "abstract": [f"about {pid}."]}) + "\n")
    for split, groups in GROUPS.items():
        (root / f"groups.{split}.jsonl").write_text("".join(json.dumps(g) + "\n" for g in groups))
    return root


def test_citation_negatives_follow_the_citing_papers_and_skip_partners(examples_dir):
    groups = read_groups(examples_dir)
    negatives = citation_negatives(groups, PAPERS, k=10)
    assert negatives["A"] == ["C", "D", "F"]  # C shares both citing papers with A
    assert negatives["B"] == ["C", "D"]  # X only
    assert negatives["F"] == ["A", "E"]  # Y only; C is F's partner
    assert negatives["G"] == []
    assert citation_negatives(groups, PAPERS, k=1)["A"] == ["C"]
    bad = [{"set_id": "A|B", "paper_ids": ["A", "B"], "context_ids": ["L7"]}]
    with pytest.raises(ValueError, match=r"co-cited set A\|B: context id 'L7' does not name its citing paper"):
        citation_negatives(bad, PAPERS, k=10)


def test_nearest_negatives_rank_by_cosine_after_partners_and_skip(examples_dir):
    groups = read_groups(examples_dir)
    # on a circle, A's neighbours by angle: B (partner), C, D, E (partner), F, G
    angles = torch.tensor([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    vecs = torch.stack([angles.cos(), angles.sin()], dim=1) * torch.arange(1, 8)[:, None]  # norms do not matter
    negatives = nearest_negatives(vecs, groups, PAPERS, k=2)
    assert negatives["A"] == ["C", "D"]
    assert nearest_negatives(vecs, groups, PAPERS, k=2, skip=1)["A"] == ["D", "F"]
    assert negatives["G"] == ["F", "E"]


def test_nearest_method_encodes_through_the_function_passed_in(examples_dir, tmp_path):
    angles = {pid: 0.1 * i for i, pid in enumerate(PAPERS)}
    seen = []

    def encode(papers):  # a paper's vector is its angle on the circle, as in the test above
        seen.append([p.paper_id for p in papers])
        a = torch.tensor([angles[p.paper_id] for p in papers])
        return torch.stack([a.cos(), a.sin()], dim=1)

    cfg = HardNegativesConfig(method="nearest", k=2)
    report = mine_hard_negatives(examples_dir, tmp_path / "near", cfg, encode)
    assert seen == [PAPERS] and report["papers"] == 7
    assert _read_hard_negatives(tmp_path / "near" / "hard_negatives.jsonl")["A"] == ["C", "D"]
    with pytest.raises(ValueError, match="method 'nearest' need an `encode` function"):
        mine_hard_negatives(examples_dir, tmp_path / "near2", cfg)


def test_data_modules_load_no_encoder_code():
    """Every `aspire.data` module but the CLI (which loads the models a stage needs) imports no encoder."""
    import pkgutil
    import subprocess
    import sys

    import aspire.data

    names = sorted(m.name for m in pkgutil.walk_packages(aspire.data.__path__, "aspire.data.")
                   if m.name != "aspire.data.__main__")
    assert "aspire.data.cocite.ingest" in names and "aspire.data.negatives" in names
    code = ("import importlib, sys\n"
            f"for name in {names!r}: importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.startswith('aspire.encoders')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    # nor later, inside a function: no import statement of theirs names aspire.encoders
    import ast
    import importlib.util

    for name in names:
        tree = ast.parse(open(importlib.util.find_spec(name).origin, encoding="utf-8").read())
        imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in imported if m and m.startswith("aspire.encoders")], name


def test_cli_writes_the_trainers_file_and_a_report(examples_dir, tmp_path, capsys):
    out = tmp_path / "hard"
    assert main(["hard-negatives", "--examples", str(examples_dir), "--out", str(out), "k=2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads((out / "report.json").read_text())
    assert report["papers"] == 7 and report["papers_with_negatives"] == 6
    assert report["papers_without_negatives"] == ["G"]
    assert report["negatives_per_paper_histogram"] == {"0": 1, "2": 6}
    assert _read_hard_negatives(out / "hard_negatives.jsonl")["A"] == ["C", "D"]
    assert main(["hard-negatives", "--examples", str(examples_dir), "--out", str(out), "depth=3"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown config key(s) ['depth']")


def test_bad_inputs_are_named(examples_dir, tmp_path):
    with pytest.raises(ValueError, match="k must be at least 1"):
        mine_hard_negatives(examples_dir, tmp_path / "o", HardNegativesConfig(k=0))
    with pytest.raises(ValueError, match="unknown hard-negative method 'random'"):
        mine_hard_negatives(examples_dir, tmp_path / "o", HardNegativesConfig(method="random"))
    with open(examples_dir / "groups.dev.jsonl", "a") as fh:
        fh.write(json.dumps({"set_id": "A|Z", "paper_ids": ["A", "Z"], "context_ids": ["Y#L3"]}) + "\n")
    with pytest.raises(ValueError, match=r"co-cited papers without an abstract in abstracts.jsonl: \['Z'\]"):
        mine_hard_negatives(examples_dir, tmp_path / "o")
    for name in ("groups.train.jsonl", "groups.dev.jsonl"):
        (examples_dir / name).unlink()
    with pytest.raises(ValueError, match="no groups.train.jsonl or groups.dev.jsonl"):
        read_groups(examples_dir)
