"""Hard-negative mining (`aspire.data.negatives`) on a constructed co-citation graph."""

from __future__ import annotations

import json

import pytest
import torch

from aspire.cli.data import main
from aspire.data.negatives import (
    HardNegativesConfig,
    citation_negatives,
    cocitation_matrix,
    cocitation_partners,
    coverage_negatives,
    kmeans_clusters,
    mine_hard_negatives,
    nearest_negatives,
    random_negatives,
    read_groups,
    svd_vectors,
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
    mined = citation_negatives(groups, PAPERS, k=10)
    negatives = mined.negatives
    assert negatives["A"] == ["C", "D", "F"]  # C shares both citing papers with A
    assert negatives["B"] == ["C", "D"]  # X only
    assert negatives["F"] == ["A", "E"]  # Y only; C is F's partner
    assert negatives["G"] == []
    assert mined.dropped == {"partner": 8, "citation": 0}  # A: B, E; B: A; C: D, F; D: C; E: A; F: C
    assert citation_negatives(groups, PAPERS, k=1).negatives["A"] == ["C"]
    bad = [{"set_id": "A|B", "paper_ids": ["A", "B"], "context_ids": ["L7"]}]
    with pytest.raises(ValueError, match=r"co-cited set A\|B: context id 'L7' does not name its citing paper"):
        citation_negatives(bad, PAPERS, k=10)


def test_nearest_negatives_rank_by_cosine_after_partners_and_skip(examples_dir):
    partners = cocitation_partners(read_groups(examples_dir))
    # on a circle, A's neighbours by angle: B (partner), C, D, E (partner), F, G
    angles = torch.tensor([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    vecs = torch.stack([angles.cos(), angles.sin()], dim=1) * torch.arange(1, 8)[:, None]  # norms do not matter
    mined = nearest_negatives(vecs, partners, PAPERS, k=2)
    negatives = mined.negatives
    assert negatives["A"] == ["C", "D"]
    assert nearest_negatives(vecs, partners, PAPERS, k=2, skip=1).negatives["A"] == ["D", "F"]
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
    """Every `aspire.data` module but the `python -m` shim (the command, `aspire.cli.data`, loads the models a stage
    needs) imports no encoder."""
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
    with pytest.raises(ValueError, match="unknown hard-negative method 'bogus'"):
        mine_hard_negatives(examples_dir, tmp_path / "o", HardNegativesConfig(method="bogus"))
    with open(examples_dir / "groups.dev.jsonl", "a") as fh:
        fh.write(json.dumps({"set_id": "A|Z", "paper_ids": ["A", "Z"], "context_ids": ["Y#L3"]}) + "\n")
    with pytest.raises(ValueError, match=r"co-cited papers without an abstract in abstracts.jsonl: \['Z'\]"):
        mine_hard_negatives(examples_dir, tmp_path / "o")
    for name in ("groups.train.jsonl", "groups.dev.jsonl"):
        (examples_dir / name).unlink()
    with pytest.raises(ValueError, match="no groups.train.jsonl or groups.dev.jsonl"):
        read_groups(examples_dir)


# ---- the false-negative guards, the sampled methods and the citation SVD ------------------------------

CIRCLE = torch.stack([torch.tensor([0.1 * i for i in range(7)]).cos(), torch.tensor([0.1 * i for i in range(7)]).sin()],
                     dim=1)  # paper i of PAPERS at angle 0.1 i


def test_margin_guard_drops_candidates_within_margin_of_the_partner_similarity():
    only_a = {"A": {"A", "B", "E"}}  # A's partners B (angle 0.1) and E (angle 0.4); no one else has any
    mined = nearest_negatives(CIRCLE, only_a, PAPERS, k=2, margin=0.0, reference="min")  # E: the least similar
    assert mined.negatives["A"] == ["F", "G"]  # C and D score above cos(0.4): dropped
    assert mined.dropped == {"partner": 2, "margin": 2} and mined.notes["margin_guarded_anchors"] == 1
    assert sorted(mined.negatives["B"]) == ["A", "C"]  # no partners: no guard (A and C tie, up to rounding)
    # against the most similar partner B (cos 0.1 = 0.995), a margin of 0.03 drops C (0.980) but keeps D (0.955)
    mined = nearest_negatives(CIRCLE, only_a, PAPERS, k=2, margin=0.03, reference="max")
    assert mined.negatives["A"] == ["D", "F"] and mined.dropped == {"partner": 2, "margin": 1}  # B, E above F
    # without the margin guard only partners go; E (0.4) lies below the last kept D (0.3), so only B counts
    mined = nearest_negatives(CIRCLE, only_a, PAPERS, k=2)
    assert mined.negatives["A"] == ["C", "D"] and mined.dropped == {"partner": 1}
    with pytest.raises(ValueError, match=r"vectors must be \(N, D\) with N = 7 papers, got shape \(6, 2\)"):
        nearest_negatives(CIRCLE[:6], only_a, PAPERS, k=2)


def test_a_paper_without_vector_has_no_neighbours_and_is_no_ones():
    vecs = CIRCLE.clone()
    vecs[2] = 0.0  # C
    mined = nearest_negatives(vecs.double().requires_grad_(), {}, PAPERS, k=2)  # any dtype, even with grad
    assert mined == nearest_negatives(vecs.numpy(), {}, PAPERS, k=2)
    assert mined.negatives["C"] == [] and mined.negatives["B"] == ["A", "D"]
    assert mined.notes["papers_without_vector"] == ["C"]


def test_random_negatives_are_seeded_uniform_non_partners(examples_dir):
    partners = cocitation_partners(read_groups(examples_dir))
    mined = random_negatives(partners, PAPERS, k=4, seed=0)
    assert sorted(mined.negatives["A"]) == ["C", "D", "F", "G"]  # every non-partner, since k = their number
    for pid, negs in mined.negatives.items():
        assert len(negs) == len(set(negs)) and pid not in negs and not set(negs) & partners.get(pid, set())
    assert random_negatives(partners, PAPERS, k=4, seed=0) == mined
    draws = [random_negatives(partners, PAPERS, k=4, seed=s) for s in range(5)]
    assert len({tuple(m.negatives["A"]) for m in draws}) > 1  # the seed changes the draw order
    assert sum(m.dropped["partner"] for m in draws) > 0  # partners were drawn and dropped
    # G has no partner: nothing to drop however often it is drawn from
    lone = random_negatives({}, PAPERS, k=6, seed=1)
    assert lone.dropped == {"partner": 0} and sorted(lone.negatives["G"]) == ["A", "B", "C", "D", "E", "F"]


def _four_clusters():
    """Twenty papers P00..P19 in four tight clusters (P00-P04 around axis 0, P05-P09 axis 1, ...)."""
    ids = [f"P{i:02d}" for i in range(20)]
    gen = torch.Generator().manual_seed(0)
    vecs = torch.eye(4).repeat_interleave(5, dim=0) + 0.01 * torch.randn(20, 4, generator=gen)
    return ids, vecs


def test_coverage_draws_one_negative_per_other_cluster():
    ids, vecs = _four_clusters()
    clusters = kmeans_clusters(vecs, 4, seed=0)
    truth = [i // 5 for i in range(20)]
    assert len({(c, t) for c, t in zip(clusters.tolist(), truth)}) == 4  # k-means recovers the four groups
    mined = coverage_negatives(clusters, {}, ids, k=3, seed=0)
    for i, pid in enumerate(ids):
        spread = sorted(truth[ids.index(n)] for n in mined.negatives[pid])
        assert spread == sorted({0, 1, 2, 3} - {truth[i]})  # one from each other cluster, none from its own
    assert mined.notes == {"clusters": 4, "cluster_sizes": [5, 5, 5, 5]} and mined.dropped == {"partner": 0}
    assert coverage_negatives(clusters, {}, ids, k=3, seed=0) == mined
    assert coverage_negatives(clusters, {}, ids, k=3, seed=1) != mined
    # P00's partners fill the whole of the second cluster: it is passed over, its five partners dropped
    partners = {"P00": {"P00", *ids[5:10]}}
    guarded = coverage_negatives(clusters, partners, ids, k=3, seed=0)
    assert sorted(truth[ids.index(n)] for n in guarded.negatives["P00"]) == [2, 3]
    assert guarded.dropped == {"partner": 5}
    with pytest.raises(ValueError, match=r"clusters must be \(N,\) with N = 20 papers"):
        coverage_negatives(clusters[:5], {}, ids, k=3, seed=0)
    with pytest.raises(ValueError, match=r"coverage needs 2 <= clusters <= papers \(20\), got clusters=21"):
        kmeans_clusters(vecs, 21, seed=0)


# A and D are both co-cited with B and with C, never with each other; E..H form a second such square.
SQUARE = [{"set_id": s, "paper_ids": s.split("|"), "context_ids": [f"X#{s}"]}
          for s in ("A|B", "A|C", "B|D", "C|D", "E|F", "F|G", "G|H", "E|H")]


def test_svd_negatives_are_close_in_the_cocitation_space_but_unlinked():
    ids = list("ABCDEFGH")
    matrix = cocitation_matrix(SQUARE + [SQUARE[0]], ids)  # A|B twice
    assert matrix.shape == (8, 8) and matrix[0, 1] == 2 and matrix[1, 0] == 2 and matrix[0, 2] == 1
    assert matrix[0, 3] == 0 and matrix.diagonal().sum() == 0
    vectors, notes = svd_vectors(cocitation_matrix(SQUARE, ids), dim=4, seed=0)
    assert vectors.shape == (8, 4) and notes == {"dim": 4, "explained_variance_ratio": pytest.approx(1.0, abs=1e-3)}
    mined = nearest_negatives(vectors, cocitation_partners(SQUARE), ids, k=1)
    assert mined.negatives == {"A": ["D"], "B": ["C"], "C": ["B"], "D": ["A"],
                               "E": ["G"], "F": ["H"], "G": ["E"], "H": ["F"]}
    with pytest.raises(ValueError, match=r"co-cited set A\|B: papers \['B'\] are not among the papers"):
        cocitation_matrix(SQUARE, ["A", "C", "D"])


def _encode_by_circle(papers):
    return CIRCLE[[PAPERS.index(p.paper_id) for p in papers]]


@pytest.mark.parametrize("method, options", [("random", {}), ("coverage", {"clusters": 3, "k": 2}),
                                             ("svd", {"dim": 3}), ("nearest", {"margin": 0.02})])
def test_every_method_gives_every_paper_a_line_and_is_deterministic(examples_dir, tmp_path, method, options):
    cfg = HardNegativesConfig(method=method, **options)
    first = mine_hard_negatives(examples_dir, tmp_path / "a", cfg, _encode_by_circle)
    again = mine_hard_negatives(examples_dir, tmp_path / "b", cfg, _encode_by_circle)
    text = (tmp_path / "a" / "hard_negatives.jsonl").read_text()
    assert text == (tmp_path / "b" / "hard_negatives.jsonl").read_text() and first == again
    lines = _read_hard_negatives(tmp_path / "a" / "hard_negatives.jsonl")
    assert sorted(lines) == PAPERS and first["papers"] == 7
    partners = cocitation_partners(read_groups(examples_dir))
    for pid, negs in lines.items():
        assert pid not in negs and not set(negs) & partners.get(pid, set())
    assert set(first["dropped"]) >= {"partner"}


def test_options_a_method_does_not_read_are_refused(examples_dir, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"method 'random' does not use the option\(s\) \['margin'\]"):
        mine_hard_negatives(examples_dir, tmp_path / "o", HardNegativesConfig(method="random", margin=0.1))
    with pytest.raises(ValueError, match="method 'coverage' need an `encode` function"):
        mine_hard_negatives(examples_dir, tmp_path / "o", HardNegativesConfig(method="coverage", clusters=3))
    out = tmp_path / "svd"
    assert main(["hard-negatives", "--examples", str(examples_dir), "--out", str(out), "method=svd", "dim=2",
                 "k=1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["method"] == "svd" and report["dim"] == 2 and report["negatives_per_paper_mean"] <= 1
    assert main(["hard-negatives", "--examples", str(examples_dir), "--out", str(out), "method=svd",
                 "clusters=4"]) == 2
    assert "method 'svd' does not use the option(s) ['clusters']" in capsys.readouterr().err


def test_the_negatives_configs_load_and_name_a_method():
    from pathlib import Path

    from aspire.config import load_config
    from aspire.data.negatives import METHODS, check_config

    paths = sorted((Path(__file__).parents[1] / "configs").glob("negatives_*.yaml"))
    assert paths
    for path in paths:
        cfg = load_config(HardNegativesConfig, path)
        check_config(cfg)
        assert path.stem == f"negatives_{cfg.method}" and cfg.method in METHODS


def test_cli_encodes_through_the_vector_cache(examples_dir, tmp_path, tiny_model_dir, monkeypatch, capsys):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    args = ["hard-negatives", "--examples", str(examples_dir), f"model={tiny_model_dir}", "k=2"]
    assert main(args + ["method=coverage", "clusters=3", "--out", str(tmp_path / "a")]) == 0
    assert len(list((tmp_path / "cache" / "vectors").glob("*.pt"))) == 1
    assert main(args + ["method=nearest", "--out", str(tmp_path / "b")]) == 0
    assert len(list((tmp_path / "cache" / "vectors").glob("*.pt"))) == 1  # the same vectors, read back
    capsys.readouterr()
    near = _read_hard_negatives(tmp_path / "b" / "hard_negatives.jsonl")
    assert sorted(near) == PAPERS and all(len(n) == 2 for pid, n in near.items() if pid != "A")
