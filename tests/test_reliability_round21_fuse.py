"""Round 21, run fusion and the scripts around it: `fuse-runs` of CSFCube folders loaded the CSFCube pools twice
(the judged-set check, then the scoring) and read each input's `results.json` twice (the protocol, then the check);
`mix_rerank`'s tie rule (document id, not first-stage rank) pinned as its docstring now spells it out;
`experiments/hybrid_weights_context2doc.py` had no `--calibration-file`, so it could not calibrate on the file its
sibling `experiments/aspect_model.py` was scored with (a machine without the ACL data could not run it)."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from aspire.benchmarks import csfcube as bench_csfcube
from aspire.benchmarks.runs import read_run, write_run
from aspire.data.papers import Paper, write_papers
from aspire.evaluate import fuse
from aspire.paths import DATA
from tests.test_reliability_round7_hybrid import _script  # an experiments script as a module

CSF = DATA / "csfcube"
needs_csfcube = pytest.mark.skipif(not (CSF / "sample_ranked_pools").is_dir(),
                                   reason="the CSFCube data is not in ../shared/data")
FACETS = ("background", "method", "result")


# ---- fuse-runs of CSFCube folders: the pools loaded once, each results.json read once ---------------------------------

def _csfcube_folders(tmp_path):
    """Two CSFCube results folders scored on `CSF` (`csfcube --ranked`): SPECTER's sample distances, and the same with
    every third candidate's distance halved, so their fusion differs from both."""
    ranked = tmp_path / "ranked"
    ranked.mkdir()
    for facet in FACETS:
        src = json.loads((CSF / "sample_ranked_pools" / f"test-pid2pool-csfcube-specter-{facet}-ranked.json")
                         .read_text(encoding="utf-8"))
        other = {q: sorted(([c, s / 2 if i % 3 == 0 else s] for i, (c, s) in enumerate(lst)), key=lambda cs: cs[1])
                 for q, lst in src.items()}
        for exp, lists in (("a", src), ("b", other)):
            (ranked / f"test-pid2pool-csfcube-{exp}-{facet}-ranked.json").write_text(json.dumps(lists),
                                                                                      encoding="utf-8")
    folders = [tmp_path / exp for exp in ("a", "b")]
    for f in folders:
        bench_csfcube.write_ranked_dir_results(f, CSF, ranked, f.name)
    return folders


@needs_csfcube
def test_fuse_runs_of_csfcube_folders_loads_the_pools_once_and_reads_each_results_file_once(tmp_path, monkeypatch):
    """The CLI's `fuse-runs` of two CSFCube folders loaded `load_csfcube` twice and read each input's results.json
    twice; now once each. The folder it writes is byte for byte the one the old path (check, fuse, then score on a
    fresh load) writes."""
    from aspire.cli import evaluate as evaluate_cli

    folders = _csfcube_folders(tmp_path)
    loads, reads = [], collections.Counter()
    real_load, real_read = bench_csfcube.load_csfcube, fuse.read_json

    def counting_load(root):
        loads.append(Path(root))
        return real_load(root)

    def counting_read(path, *args, **kwargs):
        reads[Path(path)] += 1
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(bench_csfcube, "load_csfcube", counting_load)
    monkeypatch.setattr(fuse, "read_json", counting_read)
    out = tmp_path / "fused"
    assert evaluate_cli.main(["fuse-runs", *map(str, folders), "--out", str(out)]) == 0
    assert loads == [CSF]
    assert {p: n for p, n in reads.items() if p.name == "results.json"} == {f / "results.json": 1 for f in folders}
    monkeypatch.undo()

    # the old path, step by step: the check (which loads the pools), the fusion, the scoring on a second load
    old = tmp_path / "old"
    fuse.check_csfcube_data(folders, CSF)
    paths = [f / "run.trec" for f in folders]
    fused = fuse.fuse_runs([read_run(p) for p in paths], None, "z", names=[str(p) for p in paths])
    write_run(old / "run.trec", fused, "fused")
    fuse._csfcube_fused(fused, old, {"fused_from": [str(p) for p in paths], "fusion": "z", "weights": "equal",
                                     "data": str(CSF)})
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(old) for p in old.rglob("*") if p.is_file()) and len(files) >= 5
    for name in files:
        assert (out / name).read_bytes() == (old / name).read_bytes(), name


def test_check_csfcube_data_takes_the_results_already_read_and_returns_the_pools_it_loaded(tmp_path, monkeypatch):
    """The check reads no results.json the caller hands it, still reads those it is not handed, and returns the pool
    set it loaded (None when no input records a judged set, so `root` is not read)."""
    folders = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"benchmark": "csfcube"}), encoding="utf-8")
        folders.append(tmp_path / name)
    reads = []
    real_read = fuse.read_json
    monkeypatch.setattr(fuse, "read_json", lambda path, *a, **k: reads.append(Path(path)) or real_read(path, *a, **k))
    docs = {folders[0]: {"benchmark": "csfcube"}}
    assert fuse.check_csfcube_data(folders, tmp_path / "no-such-folder", docs) is None
    assert reads == [folders[1] / "results.json"]

    loaded = SimpleNamespace(fingerprint=lambda: "abc")  # a pool set of judged set abc
    monkeypatch.setattr(bench_csfcube, "load_csfcube", lambda root: loaded)
    docs = {f: {"benchmark": "csfcube", "judged_set": "abc"} for f in folders}
    assert fuse.check_csfcube_data(folders, tmp_path, docs) is loaded
    assert reads == [folders[1] / "results.json"]  # none read again


# ---- mix_rerank: equal mixes by document id (the documented rule, pinned) ------------------------------------------------

def test_mix_rerank_orders_equal_mixes_by_id_as_its_docstring_says():
    """Pinned, not changed: at weight 1 cross-encoder scores all equal order the whole head by id (d3, first in the
    first stage, falls to third); at 0.5 two documents both lists tie are ordered by id; weight 0 keeps the first
    stage's order; the head is `fuse_ranked` of the two lists; the tail keeps its order."""
    from aspire.scoring.crossencoder import mix_rerank
    from aspire.scoring.fusion import fuse_ranked

    first = [("d3", 0.9), ("d1", 0.8), ("d2", 0.7), ("d0", 0.1)]
    flat = {"d3": 1.0, "d1": 1.0, "d2": 1.0}
    assert [d for d, _ in mix_rerank(first, flat, 3, 1.0)] == ["d1", "d2", "d3", "d0"]
    assert [d for d, _ in mix_rerank(first, flat, 3, 0.5)] == ["d3", "d1", "d2", "d0"]  # the first stage decides
    tied = [("b", 1.0), ("a", 1.0), ("c", 0.2)]
    cross = {"b": 0.3, "a": 0.3, "c": 0.0}
    assert [d for d, _ in mix_rerank(tied, cross, 3, 0.5)] == ["a", "b", "c"]
    assert [d for d, _ in mix_rerank(tied, cross, 3, 0.0)] == ["b", "a", "c"]
    for weight in (0.3, 1.0):
        want = fuse_ranked([cross, dict(tied)], [weight, 1.0 - weight], "z")
        assert mix_rerank(tied, cross, 3, weight) == want


# ---- hybrid_weights_context2doc.py: --calibration-file as aspect_model.py has it -------------------------------------


def _stub_study(monkeypatch, c2d, tmp_path):
    """The script's model, data and calibration fit replaced by small stand-ins; returns what they saw."""
    seen = {"samples": [], "sample_args": []}
    gen = torch.Generator().manual_seed(0)
    cands = [Paper(f"p{i}", f"title {i}", [f"sentence {i}."]) for i in range(5)]

    def split_terms(encoder, split, cache_dir):
        queries = {f"{split}{q}": "text" for q in range(6)}
        bench = SimpleNamespace(candidates=cands, queries=queries,
                                qrels={q: {f"p{i % 5}": 1} for i, q in enumerate(queries)})
        return bench, {t: torch.rand(6, 5, generator=gen) for t in ("whole", "facet", "minl2", "ot")}

    def fit_calibration(encoder, sample, cache_dir):
        seen["samples"].append([p.paper_id for p in sample])
        return {t: (0.0, 1.0) for t in ("whole", "facet", "minl2", "ot")}

    real_sample = c2d.calibration_sample

    def calibration_sample(n, seed=0, papers_file=None):
        seen["sample_args"].append((n, papers_file))
        if papers_file is None:
            return [Paper(f"acl{i}", "t", ["s."]) for i in range(n)]
        return real_sample(n, seed, papers_file)

    monkeypatch.setattr(c2d, "load_encoder", lambda model: SimpleNamespace(fingerprint=lambda: "v2-stub"))
    monkeypatch.setattr(c2d, "default_cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(c2d, "split_terms", split_terms)
    monkeypatch.setattr(c2d, "fit_calibration", fit_calibration)
    monkeypatch.setattr(c2d, "calibration_sample", calibration_sample)
    return seen


@pytest.mark.slow
def test_hybrid_weights_context2doc_calibrates_on_a_calibration_file(tmp_path, monkeypatch, capsys):
    """`--calibration-file` (aspect_model.py's: papers JSONL to calibrate on instead of an ACL sample) was an unknown
    option, so the study could not calibrate on the file its CSFCube sibling was scored with. Now the file's papers
    are the sample, and the report names it; without it the 200-paper ACL sample, as before; with
    `--calibration-papers` beside it, an error (the count would be dropped)."""
    c2d = _script("hybrid_weights_context2doc")
    seen = _stub_study(monkeypatch, c2d, tmp_path)
    papers = [Paper(f"cal{i}", f"Calibration {i}", ["One sentence.", "Two sentences."]) for i in range(4)]
    write_papers(tmp_path / "calibration.jsonl", papers)
    out = tmp_path / "report.json"
    monkeypatch.setattr(sys, "argv", ["hybrid_weights_context2doc.py", "--calibration-file",
                                      str(tmp_path / "calibration.jsonl"), "--out", str(out)])
    c2d.main()
    assert seen["samples"] == [[p.paper_id for p in papers]]
    assert seen["sample_args"] == [(200, tmp_path / "calibration.jsonl")]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["calibration_sample"] == str(tmp_path / "calibration.jsonl")
    assert report["chosen"] in report["every_weighting_dev"]

    monkeypatch.setattr(sys, "argv", ["hybrid_weights_context2doc.py", "--out", str(tmp_path / "acl.json")])
    c2d.main()
    assert seen["sample_args"][-1] == (200, None) and len(seen["samples"][-1]) == 200
    assert json.loads((tmp_path / "acl.json").read_text(encoding="utf-8"))["calibration_sample"] == \
        "200 ACL papers (seed 0)"

    monkeypatch.setattr(sys, "argv", ["hybrid_weights_context2doc.py", "--calibration-file",
                                      str(tmp_path / "calibration.jsonl"), "--calibration-papers", "50",
                                      "--out", str(tmp_path / "both.json")])
    with pytest.raises(SystemExit) as exit_info:
        c2d.main()
    assert exit_info.value.code == 2 and "give one" in capsys.readouterr().err
    assert not (tmp_path / "both.json").exists()
