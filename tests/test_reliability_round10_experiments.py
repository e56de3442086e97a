"""Round 10: the experiment scripts (`experiments/`), against what their docstrings and the results files say: every
script answers `--help`; the studies' re-implemented stages and truths equal the package's and brute force; options
that were accepted and then not used (or used on the wrong data) are refused by name."""

from __future__ import annotations

import importlib.util
import json
import re
import resource
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"
SCRIPTS = sorted(p.name for p in EXPERIMENTS.glob("*.py"))  # check_known_answers.py too: --help runs nothing


def _script(name: str):
    """An experiment script as a module (its folder on sys.path while it loads: they import each other by name)."""
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        spec = importlib.util.spec_from_file_location(f"round10_{name}", EXPERIMENTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXPERIMENTS))


class Loaded(Exception):
    """Raised by a stand-in for a costly step (encoding, loading data) that a refused option must never reach."""


# ---- every script -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_imports_and_answers_help(name, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    module = _script(name.removesuffix(".py"))
    if not hasattr(module, "main"):  # a library of the scale benchmarks
        assert name == "scale_common.py"
        return
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    with pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(p.name for p in EXPERIMENTS.glob("*.sh")))
def test_every_shell_script_parses(name):
    done = subprocess.run(["bash", "-n", str(EXPERIMENTS / name)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# ---- search_pipelines_context2doc.py ------------------------------------------------------------------------------


def test_search_pipelines_context2doc_refuses_a_depth_below_r100_before_encoding(shared_data, monkeypatch, capsys,
                                                                                 tmp_path):
    """`--depth 10` once ran and reported "R@100" of 10 papers a query (the benchmark's own runner refuses it)."""
    module = _script("search_pipelines_context2doc")

    def load_encoder(*args, **kwargs):
        raise Loaded("the encoder was loaded")

    monkeypatch.setattr(module, "load_encoder", load_encoder)
    monkeypatch.setattr(sys, "argv", ["search_pipelines_context2doc.py", "--depth", "10", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 2
    assert "context2doc depth 10 is below 100" in capsys.readouterr().err


def test_search_pipelines_name_the_file_they_write(monkeypatch, capsys):
    """Both scripts wrote the committed JSON whatever was asked (`--split dev` replaced the committed test rows, and
    no run could write elsewhere); `--results` names the file, the committed one by default."""
    for name in ("search_pipelines_context2doc", "search_pipelines_csfcube"):
        monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
        with pytest.raises(SystemExit):
            _script(name).main()
        assert "--results RESULTS" in capsys.readouterr().out


# ---- bench_search.py ----------------------------------------------------------------------------------------------


def _corpus(n_papers: int = 60, dim: int = 8, seed: int = 0):
    from aspire.index import EncodedCorpus

    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 7, n_papers)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    topics = rng.standard_normal((6, dim))
    vectors = topics[rng.integers(0, 6, n_papers)].repeat(lengths, 0) + 0.8 * rng.standard_normal((offsets[-1], dim))
    return EncodedCorpus(vectors.astype(np.float32), offsets, [f"p{i}" for i in range(n_papers)], [""] * n_papers,
                         [[f"s{j}" for j in range(n)] for n in lengths])


def test_bench_search_truth_cache_is_keyed_by_the_query_set():
    """The corpus is recombined from the pool's papers that are not queries, so another query set (`--queries 30`
    after `--queries 50`) is another corpus; the cached exhaustive-OT truth was keyed by papers, seed, truth count and
    pool only, and the first run's truth scored the second run's recall."""
    from aspire.index import IndexBuildConfig

    module = _script("bench_search")
    pool, config = _corpus(), IndexBuildConfig()
    fifty, thirty = list(range(10)), list(range(6))
    corpora = [module.recombined_corpus(pool, np.setdiff1d(np.arange(len(pool)), q), 200, 0) for q in (fifty, thirty)]
    assert not np.array_equal(corpora[0].vectors[:50], corpora[1].vectors[:50])  # another corpus indeed
    assert module.cache_tag(pool, config, fifty) != module.cache_tag(pool, config, thirty)
    assert module.cache_tag(pool, config, fifty) == module.cache_tag(pool, config, list(fifty))


def test_the_recall_truths_equal_brute_force_on_a_small_flat_index():
    """`bench_search.exact_ot_top` (pruned by the min-L2 bound) and `scale_common.exact_pipeline_tops` (exact first
    stage, chunked) against scoring every paper with the searcher's own OT and min-L2 scorers."""
    from aspire.batch import DocBatch
    from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
    from aspire.search import Searcher

    bench_search, scale_common = _script("bench_search"), _script("scale_common")
    corpus = _corpus(200, 16, seed=1)
    index = SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "t", "t")
    searcher = Searcher(index)
    everyone = np.arange(index.n_papers)
    ot, minl2 = searcher.scorer("ot", searcher.config), searcher.scorer("minl2", searcher.config)
    rng = np.random.default_rng(2)
    for _ in range(3):
        query = DocBatch.from_list([torch.from_numpy(rng.standard_normal((int(rng.integers(2, 5)), 16)).astype(np.float32))])
        brute = np.argsort(ot.dist(query, index.gather(everyone))[0].numpy(), kind="stable")[:10]
        np.testing.assert_array_equal(bench_search.exact_ot_top(searcher, query, 10, step=32), brute)
        tops, pipeline = scale_common.exact_pipeline_tops(searcher, [query], 40, 10, rows_per_step=97)
        nearest = np.argsort(minl2.dist(query, index.gather(everyone))[0].numpy(), kind="stable")[:40]
        assert set(tops[0].tolist()) == set(nearest[:10].tolist())
        reranked = nearest[np.argsort(ot.dist(query, index.gather(nearest))[0].numpy(), kind="stable")[:10]]
        assert set(pipeline[0].tolist()) == set(reranked.tolist())


# ---- scale_common.py / bench_million.py: recall with its interval ------------------------------------------------------


def test_recall_rows_carry_a_bootstrap_interval_over_the_truth_queries():
    """bench_million.md reports recall@10 0.955 [0.915, 0.983] over 40 queries, but the scripts wrote the mean only;
    the interval is the benchmarks' bootstrap over the queries with a truth."""
    from aspire.benchmarks.stats import UnitScores

    scale_common = _script("scale_common")
    truth = [np.arange(10) + 10 * i for i in range(4)]
    found = [truth[0], truth[1][:5], np.arange(100, 110), truth[3][:8], np.arange(200, 210)]  # a fifth: no truth
    timing = {"wall": {"m": [0.01] * 5}, "cpu": {"m": [0.01] * 5}, "found": {"m": found}}
    row = scale_common.latency_rows(timing, truth, "recall")[0]
    values = {"a": 1.0, "b": 0.5, "c": 0.0, "d": 0.8}
    assert row["recall"] == pytest.approx(np.mean(list(values.values())))
    assert row["recall_ci95"] == pytest.approx(list(UnitScores.means(values).bootstrap()))
    assert row["recall_ci95"][0] < row["recall"] < row["recall_ci95"][1]
    mean, ci = scale_common.mean_recall(found, [])
    assert np.isnan(mean) and all(np.isnan(ci))


def test_bench_million_report_gives_recall_intervals(tmp_path, capsys):
    module = _script("bench_million")
    for name, doc in (("corpus", {}), ("build", {}), ("truth", {
            "query_ids": ["a", "b", "c"], "exact_pipeline_top10": [[1, 2], [3, 4], [5, 6]],
            "exact_minl2_top10": [[1, 9], [0, 9], [5, 0]], "s": 1.0})):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    found = [[1, 2], [3, 7], [8, 9], [0, 0]]  # a fourth query beyond the truth's three
    (tmp_path / "serve-plain.json").write_text(json.dumps({"query_ids": ["a", "b", "c", "d"], "runs": {"32": {
        "found": {"(c)": found}, "wall_s": {"(c)": [0.01] * 4}, "cpu_s": {"(c)": [0.01] * 4},
        "load_average_1min": [0, 0], "memory_mb": {}}}}))
    module.report(SimpleNamespace(work=str(tmp_path), out=str(tmp_path / "out.json")))
    row = json.loads((tmp_path / "out.json").read_text())["rows"][0]
    assert row["recall_at_10_vs_exact_pipeline"] == pytest.approx(0.5)  # (1 + 0.5 + 0) / 3
    assert row["recall_at_10_vs_exact_minl2"] == pytest.approx(1 / 6)  # (0.5 + 0 + 0) / 3
    lo, hi = row["recall_at_10_vs_exact_pipeline_ci95"]
    assert 0.0 <= lo < 0.5 < hi <= 1.0


# ---- crossencoder_rerank.py ---------------------------------------------------------------------------------------


def _crossencoder_main(monkeypatch, tmp_path, *args):
    module = _script("crossencoder_rerank")

    def load_context2doc(*a, **k):
        raise Loaded("context2doc was loaded and its first stage encoded")

    monkeypatch.setattr(module, "load_context2doc", load_context2doc)
    monkeypatch.setattr(sys, "argv", ["crossencoder_rerank.py", *args, "--out", str(tmp_path / "out.json")])
    return module


@pytest.mark.parametrize("saved, args, message", [
    ({"model": "runs/ce-a", "top": 20}, ["--model", "runs/ce-b"], "model 'runs/ce-a' \\(this run: 'runs/ce-b'\\)"),
    ({"model": "runs/ce-b", "top": 10}, ["--model", "runs/ce-b"], "top 10 scored, --max-top 20 asked"),
    ({"model": "runs/ce-b", "top": 20, "split": "dev"}, ["--model", "runs/ce-b", "--split", "test", "--apply", "5:0.5",
                                                         "--run-dir", "x"], "split 'dev' \\(this run: 'test'\\)"),
])
def test_crossencoder_rerank_refuses_scores_saved_by_another_run(monkeypatch, tmp_path, capsys, saved, args, message):
    """A scores file beside --out was reused whatever model, depth or split wrote it: a run then reported one
    cross-encoder's logits under another's name. Refused, naming the file, before anything is encoded."""
    path = tmp_path / "scores.json"
    path.write_text(json.dumps({**saved, "scores": {"L1": {"a": 1.0}}}))
    module = _crossencoder_main(monkeypatch, tmp_path, *args, "--scores", str(path))
    with pytest.raises(SystemExit) as exc:
        module.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "scores.json holds other cross-encoder scores" in err
    assert re.search(message, err), err
    # the same run's file passes the check and goes on to the data
    path.write_text(json.dumps({"model": "runs/ce-b", "top": 20, "scores": {}}))
    with pytest.raises(Loaded):
        _crossencoder_main(monkeypatch, tmp_path, "--model", "runs/ce-b", "--scores", str(path)).main()


def test_crossencoder_rerank_refuses_a_top_deeper_than_it_scores_before_encoding(monkeypatch, tmp_path, capsys):
    module = _crossencoder_main(monkeypatch, tmp_path, "--model", "m", "--max-top", "10", "--tops", "5,20")
    with pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 2 and "top 20 is deeper than --max-top 10" in capsys.readouterr().err


# ---- eval_sentence_split.py ---------------------------------------------------------------------------------------


def test_eval_sentence_split_refuses_a_compare_pair_it_does_not_evaluate(shared_data, tmp_path, capsys):
    """`--compare A,B` with B not among --splitters (or misspelt) was dropped without a word: the run wrote its
    tables and no comparison."""
    module = _script("eval_sentence_split")
    with pytest.raises(SystemExit) as exc:
        module.main(["--limit", "2", "--splitters", "pysbd,pysbd_guarded", "--compare", "pysbd,pysbd_rule_guarded",
                     "--out-dir", str(tmp_path)])
    assert exc.value.code == 2 and "--compare takes two different splitters of --splitters" in capsys.readouterr().err
    assert not (tmp_path / "sentence_split.md").exists()


# ---- fusion_sweep.py ----------------------------------------------------------------------------------------------


def test_fusion_sweep_checks_select_before_fusing_the_grid(monkeypatch, tmp_path, capsys):
    module = _script("fusion_sweep")

    def fuse_csfcube(*a, **k):
        raise Loaded("a weight vector was fused")

    monkeypatch.setattr(module, "fuse_csfcube", fuse_csfcube)
    monkeypatch.setattr(sys, "argv", ["fusion_sweep.py", "--run", "a:x", "--run", "b:y", "--grid", "0.5,0.5",
                                      "--select", "all:MRR", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 2 and "--select must be GROUP:METRIC" in capsys.readouterr().err


# ---- pipeline_stages.py -------------------------------------------------------------------------------------------


def test_pipeline_stages_chooses_on_dev_runs_only(tmp_path, monkeypatch, capsys):
    """`--choose` picks window and beta; pointed at test runs it tuned on test without a word."""
    module = _script("pipeline_stages")
    for name in ("bm25", "abstract"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"benchmark": "context2doc-test"}))
    monkeypatch.setattr(sys, "argv", ["pipeline_stages.py", "--runs", str(tmp_path), "--choose"])
    with pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 2 and "a context2doc-test run; --choose chooses on context2doc dev runs only" in \
        capsys.readouterr().err
    for name in ("bm25", "abstract"):
        (tmp_path / name / "results.json").write_text(json.dumps({"benchmark": "context2doc-dev"}))
    module.check_dev_runs(tmp_path)


def test_pipeline_stages_rerank_orders_as_the_search_maxpassage_stage(monkeypatch):
    """The study composes the max-passage stage itself from run files; it must order the shortlist as
    `aspire.retrieval.rerank`'s stage does (z over the first 100, the rest below), ties included."""
    import aspire.retrieval.rerank as rerank

    module = _script("pipeline_stages")
    rng = np.random.default_rng(1)
    for beta in (0.0, 0.3, 0.9, 1.0):
        n = 150
        first = np.sort(rng.standard_normal(n))[::-1].round(1)  # ties in the first stage
        own = rng.standard_normal(n).round(1)
        docs = [f"d{i}" for i in range(n)]
        mine = module.rerank_shortlist({"q": list(zip(docs, first.tolist()))}, {"q": list(zip(docs, own.tolist()))},
                                       100, beta)["q"]
        monkeypatch.setitem(rerank.RERANK_STAGES, "maxpassage", lambda s, q, papers, cfg, own=own: (own[papers], None))
        final, _ = rerank._passage_mix(None, None, np.arange(n), first.astype(np.float64),
                                       SimpleNamespace(passage_depth=100, passage_beta=beta))
        assert [d for d, _ in mine] == [docs[i] for i in np.argsort(-final, kind="stable")]


# ---- bench_scorer_memory.py / bench_worst_paper.py: peak memory of a child ------------------------------------------


def test_a_child_reports_its_own_peak_memory_not_its_parents():
    """Both scripts read the child's peak as `ru_maxrss`, which Linux carries over exec: a child started by a process
    whose peak was higher reported that peak. `PEAK_RSS` reads VmHWM, the child's own."""
    bench_worst_paper, bench_scorer_memory = _script("bench_worst_paper"), _script("bench_scorer_memory")
    assert bench_worst_paper.CHILD.startswith(bench_worst_paper.PEAK_RSS)
    assert bench_scorer_memory.CHILD.startswith(bench_worst_paper.PEAK_RSS)
    parent = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # this process imported torch: > 100 MB
    code = bench_worst_paper.PEAK_RSS + (
        "import json, resource\n"
        "print(json.dumps([peak_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))")
    own, inherited = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                               check=True).stdout)
    assert own < parent / 2, (own, parent)
    if inherited >= parent * 0.9:  # this kernel carries the parent's peak over exec: the reading the scripts dropped
        assert own < inherited / 2


def test_bench_scorer_memory_child_runs_a_small_case():
    """The child program (its peak now read by `PEAK_RSS`) on 2 queries and 3 candidates, chunked, compared."""
    module = _script("bench_scorer_memory")
    row = module.run(2, 3, 0, "chunked", 64 << 20, True, 1)
    assert set(row) == {"peak_rss_mb", "seconds", "max_abs_diff"}, row
    assert 10 < row["peak_rss_mb"] < 4096 and row["max_abs_diff"] < 1e-3
