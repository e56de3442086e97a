"""Round 42: `aspire.evaluate.csfcube` (run files, results.json against the benchmark's protocol, ensemble fusion,
compare_runs) and `aspire.demo`'s option checks, on a cut CSFCube (`small_csfcube`) and a tiny random model."""

from __future__ import annotations

import json
import shutil

import pytest

from aspire.benchmarks import csfcube as bench_csfcube
from aspire.benchmarks.pools import ranked_path
from aspire.evaluate import csfcube
from aspire.evaluate.options import EvalOptions, Member


def _opts(cache):
    return EvalOptions(cache_dir=str(cache), batch_size=8)


def test_run_files_hold_every_pool_and_results_match_the_protocol(small_csfcube, tiny_model_dir, cache, tmp_path):
    out = tmp_path / "run"
    results = csfcube.run_csfcube(small_csfcube, str(tiny_model_dir), "minl2", out, exp="t", options=_opts(cache))
    pool_set = bench_csfcube.load_csfcube(small_csfcube)
    for facet, pools in pool_set.pools.items():
        ranked = json.loads(ranked_path(out, "csfcube", "t", facet).read_text())
        assert set(ranked) == set(pools), facet
        for q, pool in pools.items():
            got = [c for c, _ in ranked[q]]
            assert sorted(got) == sorted(pool), (facet, q)
            sims = [s for _, s in ranked[q]]
            assert sims == sorted(sims, reverse=True), (facet, q)
    again, _ = bench_csfcube.evaluate_ranked_dir(small_csfcube, out, "t")
    saved = json.loads((out / "results.json").read_text())
    for key in ("test", "dev", "folds", "judged_set"):
        assert saved[key] == again[key] == results[key], key


def test_ensemble_fuses_each_facet_and_query_over_the_pool(small_csfcube, tiny_model_dir, cache, tmp_path):
    members = [Member("a", str(tiny_model_dir), "minl2", _opts(cache)),
               Member("b", str(tiny_model_dir), "abstract", _opts(cache))]
    seen = []

    def fuse(runs):  # a plain sum of the two members' similarities, best first
        seen.append(runs)
        return {q: sorted(((c, sum(dict(r[q])[c] for r in runs)) for c, _ in runs[0][q]), key=lambda x: -x[1])
                for q in runs[0]}

    out = tmp_path / "ens"
    rows = csfcube.ensemble_rows(bench_csfcube_bench(), small_csfcube, members, out, {}, fuse)
    assert rows
    pool_set = bench_csfcube.load_csfcube(small_csfcube)
    assert len(seen) == len(pool_set.pools)
    for facet, runs in zip(bench_csfcube.FACETS, seen):
        assert len(runs) == 2
        for run in runs:
            assert set(run) == set(pool_set.pools[facet])
            for q, pool in pool_set.pools[facet].items():
                assert sorted(c for c, _ in run[q]) == sorted(pool)
        ranked = json.loads(ranked_path(out / "csfcube", "csfcube", "ensemble", facet).read_text())
        assert ranked == {q: [list(x) for x in r] for q, r in fuse(runs).items()}
    again, _ = bench_csfcube.evaluate_ranked_dir(small_csfcube, out / "csfcube", "ensemble")
    saved = json.loads((out / "csfcube" / "results.json").read_text())
    assert saved["test"] == again["test"] and saved["folds"] == again["folds"]


def bench_csfcube_bench():
    from aspire.benchmarks import BENCHMARKS

    return BENCHMARKS["csfcube"]


def test_compare_runs_refuses_folders_of_different_pools(small_csfcube, tiny_model_dir, cache, tmp_path):
    a = tmp_path / "a"
    csfcube.run_csfcube(small_csfcube, str(tiny_model_dir), "minl2", a, exp="t", options=_opts(cache))
    b = tmp_path / "b"
    shutil.copytree(a, b)
    doc = json.loads((b / "results.json").read_text())
    doc["judged_set"] = "0123456789ab"  # scored on other pools: the same queries and folds, other candidates
    (b / "results.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="judged set") as err:
        csfcube.compare_runs(str(a), str(b), n_perm=20)
    assert str(a) in str(err.value) and str(b) in str(err.value)
    assert set(csfcube.compare_runs(str(a), str(a), n_perm=20)) >= {"MAP", "NDCG%20 method"}
