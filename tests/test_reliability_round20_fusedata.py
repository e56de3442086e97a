"""Round 20, fusion's data and the CSFCube runners: `fuse-runs` of CSFCube folders scored them on `DATA/csfcube`
whatever `--data` they were made with (now on `--data`, and inputs made on other judgments are refused); a
facet-only query cut at `max_length` was named `text i` in the encoder's warning (now its paper and facet); the
suite's CSFCube runner loaded the pools three times and read back the ranked files it had just written."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from aspire.benchmarks import csfcube as bench_csfcube
from aspire.benchmarks.runs import write_qrels, write_run
from aspire.evaluate import fuse
from aspire.paths import DATA

CSF = DATA / "csfcube"
needs_csfcube = pytest.mark.skipif(not (CSF / "sample_ranked_pools").is_dir(),
                                   reason="the CSFCube data is not in ../shared/data")
FACETS = ("background", "method", "result")


# ---- fuse-runs: the CSFCube folder the inputs were made with -------------------------------------------------------

def _regraded_copy(root):
    """CSFCube with each query's first relevant candidate (of those with two or more) graded 0: the same pools, other
    judgments. Returns the queries regraded, `{(pid, facet)}`."""
    root.mkdir()
    for f in CSF.iterdir():
        if f.is_file() and not f.name.startswith("test-pid2anns-"):
            (root / f.name).symlink_to(f)
    regraded = set()
    for facet in FACETS:
        anns = json.loads((CSF / f"test-pid2anns-csfcube-{facet}.json").read_text(encoding="utf-8"))
        for qid, ann in anns.items():
            grades = ann["relevance_adju"]
            if sum(g >= 2 for g in grades) > 1:
                grades[next(i for i, g in enumerate(grades) if g >= 2)] = 0
                regraded.add((qid, facet))
        (root / f"test-pid2anns-csfcube-{facet}.json").write_text(json.dumps(anns), encoding="utf-8")
    return regraded


def _two_folders(tmp_path, data):
    """Two CSFCube results folders scored on `data` (`csfcube --ranked`): SPECTER's distances, and the same as
    similarities (negated), so their fusion ranks as each does and must score as each does."""
    ranked = tmp_path / "ranked"
    ranked.mkdir()
    for facet in FACETS:
        src = json.loads((CSF / "sample_ranked_pools" / f"test-pid2pool-csfcube-specter-{facet}-ranked.json")
                         .read_text(encoding="utf-8"))
        for exp, sign in (("dist", 1), ("sim", -1)):
            (ranked / f"test-pid2pool-csfcube-{exp}-{facet}-ranked.json").write_text(
                json.dumps({q: [[c, sign * s] for c, s in lst] for q, lst in src.items()}), encoding="utf-8")
    folders = [tmp_path / exp for exp in ("dist", "sim")]
    results = [bench_csfcube.write_ranked_dir_results(f, data, ranked, f.name) for f in folders]
    return folders, results


@needs_csfcube
def test_fused_csfcube_folders_are_scored_on_the_data_they_were_made_with(tmp_path):
    """Made with `--data COPY` (49 queries' first relevant candidate regraded 0), the fused folder was scored on
    `DATA/csfcube`: test MAP 34.23 where both inputs, ranking alike, score 34.40. Without `--data` they are now
    refused before anything is written; with it they score as the inputs do, on the copy's judged set."""
    copy = tmp_path / "copy"
    assert len(_regraded_copy(copy)) > 10
    folders, inputs = _two_folders(tmp_path, copy)
    assert inputs[0]["test"] == inputs[1]["test"]
    original = bench_csfcube.load_csfcube(CSF).fingerprint()
    assert inputs[0]["judged_set"] != original
    with pytest.raises(ValueError, match=rf"judged set {inputs[0]['judged_set']}, the CSFCube folder {CSF} holds "
                                         rf"{original} .*\(--data\)"):
        fuse.fuse_run_files(folders, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    results = fuse.fuse_run_files(folders, tmp_path / "fused", data=copy)
    assert results["judged_set"] == inputs[0]["judged_set"] and results["data"] == str(copy)
    for group in ("all", *FACETS):
        for metric in ("MAP", "NDCG%20"):
            assert results["test"][group][metric] == pytest.approx(inputs[0]["test"][group][metric], abs=1e-9)
    on_disk = json.loads((tmp_path / "fused" / "results.json").read_text(encoding="utf-8"))
    assert on_disk["data"] == str(copy) and on_disk["judged_set"] == inputs[0]["judged_set"]


@needs_csfcube
def test_the_cli_passes_data_to_fuse_runs(tmp_path, capsys):
    from aspire.cli import evaluate as evaluate_cli

    copy = tmp_path / "copy"
    _regraded_copy(copy)
    folders, inputs = _two_folders(tmp_path, copy)
    out = tmp_path / "fused"
    assert evaluate_cli.main(["fuse-runs", *map(str, folders), "--data", str(copy), "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text(encoding="utf-8"))["test"]["all"]["MAP"] == pytest.approx(
        inputs[0]["test"]["all"]["MAP"], abs=1e-9)


def test_inputs_of_two_judged_sets_are_refused_naming_both(tmp_path):
    run = {"1_background": [("a", 2.0), ("b", 1.0)]}
    folders = []
    for name, judged in (("a", "111111111111"), ("b", "222222222222")):
        write_run(tmp_path / name / "run.trec", run, name)
        (tmp_path / name / "results.json").write_text(json.dumps(
            {"benchmark": "csfcube", "relevance_threshold": 2, "judged_set": judged}), encoding="utf-8")
        folders.append(tmp_path / name)
    with pytest.raises(ValueError, match=rf"{folders[0]} and {folders[1]} were scored on different CSFCube .*"
                                         "judged set 111111111111 and 222222222222"):
        fuse.fuse_run_files(folders, tmp_path / "fused", data=tmp_path / "no-such-folder")
    assert not (tmp_path / "fused").exists()


def test_data_is_refused_for_folders_that_are_not_csfcube(tmp_path):
    run, qrels = {"q1": [("a", 2.0), ("b", 1.0)]}, {"q1": {"a": 1}}
    folders = []
    for name in ("a", "b"):
        write_run(tmp_path / name / "run.trec", run, name)
        write_qrels(tmp_path / name / "qrels.trec", qrels)
        folders.append(tmp_path / name)
    with pytest.raises(ValueError, match="--data is the CSFCube folder .* not CSFCube folders"):
        fuse.fuse_run_files(folders, tmp_path / "fused", data=CSF)
    assert not (tmp_path / "fused").exists()
    assert fuse.fuse_run_files(folders, tmp_path / "ok", metrics=["MRR"])["metrics"]["MRR"] == 1.0  # without it: as before


# ---- a facet-only query cut at max_length: its paper and facet named -------------------------------------------------

def test_a_cut_facet_query_is_named_by_its_paper_and_facet(tiny_model_dir, caplog):
    from aspire.benchmarks.csfcube import LABEL_TO_FACET
    from aspire.data import Paper
    from aspire.encoders import ContextualSentenceEncoder
    from aspire.evaluate.facets import facet_text_queries

    encoder = ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir))
    long = " ".join(["model"] * 200) + "."
    papers = [Paper("short-q", "a title", ["we propose a model.", "results improve."],
                    ["objective_label", "result_label"]),
              Paper("long-q", "the title", [long, "the results."], ["background_label", "result_label"])]
    with caplog.at_level(logging.WARNING, logger="aspire"):
        batch = facet_text_queries(encoder, papers, "background", LABEL_TO_FACET, "facet")
    (warning,) = [r.getMessage() for r in caplog.records if "cut at the limit" in r.getMessage()]
    assert "(paper long-q background sentences (203 pieces))" in warning and "text 1" not in warning and "short-q" not in warning
    # the vectors are those of the texts unnamed
    plain = encoder.embed_texts(["we propose a model.", long])
    assert batch.paper_ids == ["short-q", "long-q"]
    assert torch.equal(batch.emb[:, 0], plain)


def test_embed_texts_refuses_names_that_do_not_match_its_texts(tiny_model_dir):
    from aspire.encoders import ContextualSentenceEncoder

    encoder = ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir))
    with pytest.raises(ValueError, match="1 names for 2 texts"):
        encoder.embed_texts(["a text.", "the data."], names=["only one"])


# ---- the suite's CSFCube runner: the pools loaded once, nothing read back ---------------------------------------------

def test_suite_rows_load_the_pools_once_and_read_no_ranked_file_back(small_csfcube, tmp_path, monkeypatch):
    """`suite_rows` loaded the CSFCube pools three times (the run, the rows, the figures' reload) and read back every
    ranked file the run had just written. Reference: the rows as they were computed, from the files read back. The
    model's ranking is stood in for (each pool by the candidates' ids, written as `rank_pool_set` writes it)."""
    from aspire.benchmarks import BENCHMARKS, pools
    from aspire.benchmarks.stats import table_row
    from aspire.evaluate import csfcube, rank

    def ranked_by_id(pool_set, papers, model, scorer, out, exp, options, label_to_facet):
        rankings = {}
        for facet in pool_set.facets:
            ranked = {q: [(c, float(k)) for k, c in enumerate(sorted(pool, reverse=True))]
                      for q, pool in pool_set.pools[facet].items()}
            pools.write_ranked(pools.ranked_path(out, pool_set.name, exp, facet), ranked)
            rankings[facet] = {q: [c for c, _ in r] for q, r in ranked.items()}
        return rankings, {"experiment": exp, "encoder_fingerprint": "v2-0123456789abcdef"}

    bench = BENCHMARKS["csfcube"]
    loads = []
    real_load = bench_csfcube.load_csfcube

    def counted(root):
        loads.append(root)
        return real_load(root)

    def no_read_back(*args, **kwargs):
        raise AssertionError("a ranked file read back")

    monkeypatch.setattr(rank, "rank_pool_set", ranked_by_id)
    for module in (csfcube, bench_csfcube):
        monkeypatch.setattr(module, "load_csfcube", counted)
    monkeypatch.setattr(pools, "read_ranked_pool_set", no_read_back)
    rows, fingerprint = csfcube.suite_rows(bench, small_csfcube, "a-model", "minl2", tmp_path / "out", {})
    assert len(loads) == 1 and fingerprint == "v2-0123456789abcdef"
    monkeypatch.undo()
    pool_set = real_load(small_csfcube)
    exp = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["experiment"]
    _, per_query = bench_csfcube.evaluate_csfcube_rankings(
        small_csfcube, pools.read_ranked_pool_set(pool_set, tmp_path / "out", exp), pool_set)
    want = [table_row(bench.title, m, (u := bench_csfcube.test_units(pool_set, per_query, m)).value(), u.bootstrap(),
                      len(u.units), "") for m in bench.metrics]
    assert rows == want and 0 < rows[0]["value"] < 100
