"""Score fusion of ranked runs (ensembles)."""

from __future__ import annotations

import json
import shutil

import pytest

from aspire.evaluate.fuse import fuse_scores, read_scored


def test_fusion_follows_weights_and_normalises_scales():
    # run A prefers c1 > c2 > c3 on a tiny scale; run B prefers c3 > c2 > c1 on a huge one
    a = {"q": {"c1": 0.03, "c2": 0.02, "c3": 0.01}}
    b = {"q": {"c1": -300.0, "c2": -200.0, "c3": -100.0}}
    assert [c for c, _ in fuse_scores([a, b], weights=[1.0, 0.0])["q"]] == ["c1", "c2", "c3"]
    assert [c for c, _ in fuse_scores([a, b], weights=[0.0, 1.0])["q"]] == ["c3", "c2", "c1"]
    # z-scored, the two runs weigh the same whatever their scale: a 0.6 / 0.4 split follows run A
    assert [c for c, _ in fuse_scores([a, b], weights=[0.6, 0.4])["q"]] == ["c1", "c2", "c3"]
    # a candidate second in both runs beats one first in one run and last in the other
    c = {"q": {"x": 1.0, "y": 0.9, "z": 0.0}}
    d = {"q": {"x": 0.0, "y": 0.9, "z": 1.0}}
    assert fuse_scores([c, d])["q"][0][0] == "y"


def test_fusion_refuses_runs_over_different_pools():
    a = {"q1": {"c1": 1.0, "c2": 0.5}}
    with pytest.raises(ValueError, match="query q1: .* rank different candidates"):
        fuse_scores([a, {"q1": {"c1": 1.0, "c3": 0.5}}], names=["A", "B"])
    with pytest.raises(ValueError, match="rank different queries"):
        fuse_scores([a, {"q2": {"c1": 1.0, "c2": 0.5}}])
    with pytest.raises(ValueError, match="2 weights for 3 runs"):
        fuse_scores([a, a, a], weights=[0.5, 0.5])
    with pytest.raises(ValueError, match="at least two runs"):
        fuse_scores([a])


def test_read_scored_names_bad_entries(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"q": [["c1", 1.0], ["c1", 0.5]]}))
    with pytest.raises(ValueError, match="query q: candidate c1 is ranked twice"):
        read_scored(path)
    path.write_text(json.dumps({"q": [["c1", "high"]]}))
    with pytest.raises(ValueError, match="query q: entries must be"):
        read_scored(path)
    path.write_text('{"q": [["c1", NaN]]}')
    with pytest.raises(ValueError, match="non-finite score"):
        read_scored(path)


def test_fusing_specter_with_itself_keeps_its_known_answer(shared_data, tmp_path, tmp_path_factory, capsys):
    """CLI on the real CSFCube pools: a run fused with a copy of itself ranks as it did (34.23 / 53.28). (The same
    files given twice are refused: tests/test_reliability_round58_fuse.py.)"""
    from aspire.cli.evaluate import main

    root = shared_data / "csfcube"
    run = f"{root / 'sample_ranked_pools'}:specter"
    copy = f"{shutil.copytree(root / 'sample_ranked_pools', tmp_path_factory.mktemp('copy') / 'pools')}:specter"
    assert main(["fuse", "--data", str(root), "--run", run, "--run", copy, "--weights", "0.3,0.7",
                 "--exp", "specter2x", "--out", str(tmp_path)]) == 0
    assert "all: 34.23 / 53.28" in capsys.readouterr().out
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["fused_from"] == [run, copy]
    assert (tmp_path / "test-pid2pool-csfcube-specter2x-method-ranked.json").is_file()
    assert main(["fuse", "--data", str(root), "--run", run, "--run", "nowhere:x", "--exp", "e",
                 "--out", str(tmp_path / "e")]) == 2
    assert "no ranked file of experiment 'x' (background); the folder holds none of csfcube" in capsys.readouterr().err
    # a mistyped experiment names those the folder holds
    assert main(["fuse", "--data", str(root), "--run", run, "--run", f"{tmp_path}:specter2", "--exp", "e",
                 "--out", str(tmp_path / "again")]) == 2
    assert capsys.readouterr().err == (
        "error: no ranked file of experiment 'specter2' (background); the folder holds ['specter2x']: "
        f"{tmp_path / 'test-pid2pool-csfcube-specter2-background-ranked.json'}\n")


def test_read_scored_turns_distances_into_similarities(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"q": [["c1", 0.1], ["c2", 0.5]], "p": [["c2", 0.2], ["c1", 0.2]]}))
    assert read_scored(path) == {"q": {"c1": -0.1, "c2": -0.5}, "p": {"c2": -0.2, "c1": -0.2}}
    path.write_text(json.dumps({"q": [["c1", 0.9], ["c2", 0.5]]}))
    assert read_scored(path) == {"q": {"c1": 0.9, "c2": 0.5}}
    path.write_text(json.dumps({"q": [["c1", 0.9], ["c2", 0.5]], "p": [["c1", 0.1], ["c2", 0.5]]}))
    with pytest.raises(ValueError, match="neither fall"):
        read_scored(path)


@pytest.mark.parametrize("spec", ["nocolon", ":exp", "dir:"])
def test_a_run_spec_needs_a_folder_and_an_experiment(spec):
    from aspire.cli.evaluate import parse_run

    assert parse_run("runs/csfcube/a:b:exp") == ("runs/csfcube/a:b", "exp")
    with pytest.raises(ValueError, match="--run takes DIR:EXP"):
        parse_run(spec)


_RANX_FUSE = """
import json, sys
from ranx import Run, fuse
runs, weights = json.load(sys.stdin)
print(json.dumps({norm: fuse([Run(r) for r in runs], norm=norm, method="wsum", params={"weights": weights}).to_dict()
                  for norm in ("zmuv", "min-max")}))
"""


def test_fuse_scores_is_search_fusion_and_ranks_as_ranx_did():
    """The benchmarks' fusion is `aspire.scoring.fusion` (one implementation); on runs over the same
    candidates it ranks exactly as ranx's `fuse(norm=zmuv|min-max, method=wsum)`, which it replaced. ranx runs
    in a process of its own with numba's compiler off (NUMBA_DISABLE_JIT): the same code, read by Python, where
    compiling its fusion took about a minute of the test run (within 1e-15 of the compiled results)."""
    import os
    import subprocess
    import sys

    import numpy as np

    rng = np.random.default_rng(1)
    cands = [f"c{i}" for i in range(40)]
    runs = [{f"q{j}": {c: float(x) for c, x in zip(cands, rng.normal(size=40) * scale)} for j in range(5)}
            for scale in (1.0, 300.0)]
    done = subprocess.run([sys.executable, "-c", _RANX_FUSE], input=json.dumps([runs, [0.8, 0.2]]), text=True,
                          capture_output=True, env={**os.environ, "NUMBA_DISABLE_JIT": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    refs = json.loads(done.stdout)
    for mine_name, ranx_name in (("z", "zmuv"), ("minmax", "min-max")):
        ref = refs[ranx_name]
        assert set(ref) == {f"q{j}" for j in range(5)}
        for name in (mine_name, ranx_name):  # the older spelling reads the same
            mine = fuse_scores(runs, [0.8, 0.2], name)
            for q in ref:
                assert [c for c, _ in mine[q]] == sorted(ref[q], key=lambda c: (-ref[q][c], c))
                assert all(s == pytest.approx(ref[q][c], abs=1e-12) for c, s in mine[q])
    with pytest.raises(ValueError, match="unknown fusion 'max'; valid: z, minmax, rrf"):
        fuse_scores(runs, None, "max")


def test_fuse_runs_command_takes_fusion_and_reads_the_older_spelling(tmp_path, capsys):
    from aspire.benchmarks.runs import write_qrels, write_run
    from aspire.cli import main

    write_run(tmp_path / "a.trec", {"q": [("d1", 3.0), ("d2", 1.0)]}, "a")
    write_run(tmp_path / "b.trec", {"q": [("d2", 5.0), ("d3", 1.0)]}, "b")
    write_qrels(tmp_path / "qrels.trec", {"q": {"d2": 1}})
    runs = [str(tmp_path / "a.trec"), str(tmp_path / "b.trec"), "--qrels", str(tmp_path / "qrels.trec")]
    assert main(["evaluate", "fuse-runs", *runs, "--fusion", "rrf", "--out", str(tmp_path / "new")]) == 0
    assert main(["evaluate", "fuse-runs", *runs, "--method", "rrf", "--out", str(tmp_path / "old")]) == 0
    assert "'rrf' is read as --fusion rrf" in capsys.readouterr().err
    assert (tmp_path / "new" / "run.trec").read_text().replace("fused", "") == \
        (tmp_path / "old" / "run.trec").read_text().replace("fused", "")
    assert json.loads((tmp_path / "new" / "results.json").read_text())["fusion"] == "rrf"
    with pytest.raises(SystemExit):
        main(["evaluate", "fuse-runs", *runs, "--fusion", "z", "--norm", "zmuv", "--out", str(tmp_path / "x")])
    assert "give --fusion alone" in capsys.readouterr().err
