"""CSFCube evaluator against the known answer: the shipped SPECTER ranked pools."""

from __future__ import annotations

import json
import shutil

import pytest

from aspire.benchmarks import csfcube
from aspire.cli.evaluate import main
from aspire.jsonsafe import strict_loads  # results files must be strict JSON: no bare NaN

# data README: SPECTER sample pools, test protocol, MAP / NDCG%20
SPECTER = {
    "background": (43.95, 66.70),
    "method": (22.44, 37.41),
    "result": (36.79, 56.67),
    "all": (34.23, 53.28),
}


@pytest.fixture(scope="module")
def specter(shared_data):
    root = shared_data / "csfcube"
    return root, csfcube.evaluate_ranked_dir(root, root / "sample_ranked_pools", "specter")


@pytest.mark.slow
def test_specter_known_answer(specter):
    _, (results, per_query) = specter
    for group, (map_, ndcg) in SPECTER.items():
        assert results["test"][group]["MAP"] == pytest.approx(map_, abs=0.005), group
        assert results["test"][group]["NDCG%20"] == pytest.approx(ndcg, abs=0.005), group
    assert len(per_query) == 50
    assert results["self_in_pool_removed"] == ["8781666_background", "8781666_result"]


@pytest.mark.slow
def test_protocol_structure(specter):
    root, (results, per_query) = specter
    pool_set = csfcube.load_csfcube(root)
    for group in csfcube.GROUPS:
        folds = results["folds"][group]
        assert results["test"][group]["MAP"] == pytest.approx((folds["fold1_test"]["MAP"] + folds["fold2_test"]["MAP"]) / 2)
        assert results["dev"][group] == folds["fold1_dev"]
        assert set(results["test"][group]) == set(csfcube.METRICS)
    # `all` is the mean over every facet-query of the fold, not the mean of the facet means
    keys = pool_set.splits["all/fold1_test"]
    assert results["folds"]["all"]["fold1_test"]["MAP"] == pytest.approx(
        100 * sum(per_query[k]["MAP"] for k in keys) / len(keys)
    )


@pytest.mark.slow
def test_cli_writes_outputs_and_rejects_incomplete_ranking(shared_data, tmp_path, capsys):
    root = shared_data / "csfcube"
    out = tmp_path / "out"
    assert main(["csfcube", "--data", str(root), "--ranked", str(root / "sample_ranked_pools"),
                 "--exp", "specter", "--out", str(out)]) == 0
    assert "all: 34.23 / 53.28" in capsys.readouterr().out
    saved = strict_loads((out / "results.json").read_text())
    assert saved["test"]["method"]["MAP"] == pytest.approx(22.44, abs=0.005)
    lines = (out / "test-pid2pool-csfcube-specter-perq.csv").read_text().splitlines()
    assert len(lines) == 51 and lines[0].startswith("query,paper_id,facet,test_fold")

    # a ranked file missing one pool candidate is a clear error naming the query
    bad = tmp_path / "bad"
    shutil.copytree(root / "sample_ranked_pools", bad)
    path = bad / "test-pid2pool-csfcube-specter-method-ranked.json"
    ranked = strict_loads(path.read_text())
    qid = next(iter(ranked))
    ranked[qid] = ranked[qid][:-1]
    path.write_text(json.dumps(ranked))
    assert main(["csfcube", "--data", str(root), "--ranked", str(bad), "--exp", "specter", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"query {qid}_method: ranking misses 1" in err

    # an unknown candidate id
    ranked[qid] = ranked[qid] + [["not-a-paper", 0.0]]
    path.write_text(json.dumps(ranked))
    assert main(["csfcube", "--data", str(root), "--ranked", str(bad), "--exp", "specter", "--out", str(out)]) == 2
    assert "outside the pool" in capsys.readouterr().err


@pytest.mark.slow
def test_model_run_on_real_data_rescoring_reads_the_cache(small_csfcube, tmp_path, tiny_model_dir):
    common = ["csfcube", "--data", str(small_csfcube), "--model", str(tiny_model_dir),
              "--cache-dir", str(tmp_path / "cache"), "--batch-size", "16"]
    assert main(common + ["--scorer", "minl2", "--exp", "tiny", "--out", str(tmp_path / "a")]) == 0
    assert main(common + ["--scorer", "ot", "--tau", "5000", "--exp", "tiny", "--out", str(tmp_path / "b")]) == 0
    first = strict_loads((tmp_path / "a" / "results.json").read_text())
    second = strict_loads((tmp_path / "b" / "results.json").read_text())
    assert first["timings_s"]["encode_from_cache"] is False
    assert second["timings_s"]["encode_from_cache"] is True
    assert second["scorer_options"] == {"tau": 5000.0}
    for facet in csfcube.FACETS:
        ranked = strict_loads((tmp_path / "a" / f"test-pid2pool-csfcube-tiny-{facet}-ranked.json").read_text())
        assert len(ranked) == len(strict_loads((small_csfcube / f"test-pid2anns-csfcube-{facet}.json").read_text()))
        scores = [s for r in ranked.values() for s in [x[1] for x in r]]
        assert all(len(r) == 8 for r in ranked.values())
        assert all(a >= b for r in ranked.values() for a, b in zip([x[1] for x in r], [x[1] for x in r][1:]))
        assert len(set(scores)) > 1
    for split in ("test", "dev"):
        assert set(first[split]) == set(csfcube.GROUPS)
        assert all(0.0 <= v <= 100.0 for g in first[split].values() for v in g.values())


@pytest.mark.slow
def test_facet_query_text_on_real_data(small_csfcube, tmp_path, tiny_model_dir, capsys):
    """Every CSFCube query has sentences of its facet; the facet text changes the query, not the candidates."""
    common = ["csfcube", "--data", str(small_csfcube), "--model", str(tiny_model_dir), "--scorer", "abstract",
              "--cache-dir", str(tmp_path / "cache"), "--batch-size", "16", "--max-length", "128", "--normalize",
              "--joiner", " "]
    assert main(common + ["--exp", "whole", "--out", str(tmp_path / "a")]) == 0
    assert main(common + ["--query-text", "facet", "--out", str(tmp_path / "b")]) == 0
    assert "CSFCube test MAP / NDCG%20" in capsys.readouterr().out
    results = strict_loads((tmp_path / "b" / "results.json").read_text())
    assert results["query_text"] == "facet" and results["timings_s"]["encode_from_cache"] is True
    exp = f"{tiny_model_dir.name}-abstract-abstract-query-facet-encode-joiner-%20-encode-max-length-128-encode-normalize-true"
    changed = 0
    for facet in csfcube.FACETS:
        whole = strict_loads((tmp_path / "a" / f"test-pid2pool-csfcube-whole-{facet}-ranked.json").read_text())
        ranked = strict_loads((tmp_path / "b" / f"test-pid2pool-csfcube-{exp}-{facet}-ranked.json").read_text())
        assert set(ranked) == set(whole)
        assert all(sorted(c for c, _ in ranked[q]) == sorted(c for c, _ in whole[q]) for q in whole)
        changed += sum(ranked[q] != whole[q] for q in whole)
    assert changed > 0


@pytest.mark.slow
def test_facet_candidates_on_real_data(small_csfcube, tmp_path, tiny_model_dir):
    """Candidates narrowed to the query's facet: same pools, changed rankings, fallbacks counted from the labels."""
    common = ["csfcube", "--data", str(small_csfcube), "--model", str(tiny_model_dir), "--scorer", "ot", "--tau", "1",
              "--cache-dir", str(tmp_path / "cache"), "--batch-size", "16"]
    assert main(common + ["--exp", "all", "--out", str(tmp_path / "a")]) == 0
    assert main(common + ["--exp", "cf", "--cand-sentences", "facet", "--out", str(tmp_path / "b")]) == 0
    results = strict_loads((tmp_path / "b" / "results.json").read_text())
    assert results["cand_sentences"] == "facet" and results["timings_s"]["encode_from_cache"] is True
    labels = {}
    with open(small_csfcube / "abstracts-csfcube-preds.jsonl") as fh:
        for line in fh:
            rec = strict_loads(line)
            labels[rec["paper_id"]] = {csfcube.LABEL_TO_FACET.get(lab) for lab in rec["pred_labels"]}
    changed = 0
    for facet in csfcube.FACETS:
        whole = strict_loads((tmp_path / "a" / f"test-pid2pool-csfcube-all-{facet}-ranked.json").read_text())
        ranked = strict_loads((tmp_path / "b" / f"test-pid2pool-csfcube-cf-{facet}-ranked.json").read_text())
        assert {q: sorted(c for c, _ in r) for q, r in ranked.items()} == {
            q: sorted(c for c, _ in r) for q, r in whole.items()}
        pooled = {c for r in whole.values() for c, _ in r}
        assert results["cands_kept_whole"][facet] == sum(facet not in labels[c] for c in pooled)
        changed += sum(ranked[q] != whole[q] for q in whole)
    assert changed > 0


def test_csfcube_through_aspire_search_equals_its_own_min_l2_run(small_csfcube, tmp_path, tiny_model_dir, capsys):
    """`csfcube --search-pipeline stages=ann rerank=minl2`: each pool searched by the Searcher gives the figures of
    the benchmark's own min-L2 run (pools cut to 8 candidates; a tiny model)."""
    common = ["csfcube", "--data", str(small_csfcube), "--model", str(tiny_model_dir),
              "--cache-dir", str(tmp_path / "cache"), "--batch-size", "16"]
    assert main(common + ["--scorer", "minl2", "--out", str(tmp_path / "own")]) == 0
    assert main(common + ["--search-pipeline", "stages=ann", "rerank=minl2", "--out", str(tmp_path / "search")]) == 0
    assert "CSFCube test MAP / NDCG%20" in capsys.readouterr().out
    own = strict_loads((tmp_path / "own" / "results.json").read_text())
    searched = strict_loads((tmp_path / "search" / "results.json").read_text())
    assert searched["search"]["overrides"] == ["stages=ann", "rerank=minl2"]
    for group in csfcube.GROUPS:
        for metric in ("MAP", "NDCG%20"):
            assert searched["test"][group][metric] == pytest.approx(own["test"][group][metric], abs=1e-9)
    with pytest.raises(SystemExit):
        main(common + ["--scorer", "minl2", "--search-pipeline", "--out", str(tmp_path / "x")])
    assert "leave out --scorer" in capsys.readouterr().err
