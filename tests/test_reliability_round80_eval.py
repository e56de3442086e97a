"""Round 80, evaluation: `aspire evaluate pools` ended in a TypeError when a metric was undefined for every query of a
group (its mean is None); `fuse-runs` and `compare` refused at threshold 1 the queries with no relevant document that the pools
evaluator had left out (`--skip-no-relevant`), where the docs say it leaves them out too; `read_run` / `read_qrels`
read a UTF-8 byte-order mark into the first query id (a query of its own: a wrong figure where run and qrels both
carried one) and named no file or line for a byte that is not UTF-8; fuse-runs refused at scoring left files that
blocked a re-run into its --out."""

from __future__ import annotations

import json

import pytest

from aspire.benchmarks.runs import mean_scores, per_query, read_qrels, read_run
from aspire.cli.evaluate import main
from aspire.evaluate.fuse import fuse_run_files
from aspire.evaluate.pool_run import run_pools
from aspire.paths import DATA
from tests.test_evaluate_pools import POOLS, write_toy

RANKED = {"p1": [["p4", 0.9], ["p2", 0.8], ["p3", 0.7], ["p5", 0.1]],
          "p6": [["p2", -1.0], ["p7", -2.0], ["p3", -3.0], ["p8", -4.0]]}


def _toy(tmp_path, p6_grades):
    """The toy pool set with p6's grades replaced, its ranked file (experiment `manual`) and a split of one query
    each (`splits.json`)."""
    root = write_toy(tmp_path / "toy")
    pools = json.loads(json.dumps(POOLS))
    pools["p6"]["relevance_adju"] = p6_grades
    (root / "test-pid2anns-toy.json").write_text(json.dumps(pools))
    (root / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(RANKED))
    (root / "splits.json").write_text(json.dumps({"dev": ["p1"], "test": ["p6"]}))
    return root


def test_pools_prints_a_group_whose_metric_is_undefined_for_every_query(tmp_path, capsys):
    # p6's pool is all relevant: bpref undefined for it, so split:test (p6 alone) has no bpref mean
    root = _toy(tmp_path, [1, 1, 2, 1])
    code = main(["pools", "--data", str(root), "--name", "toy", "--ranked", str(root), "--exp", "manual",
                 "--splits", str(root / "splits.json"), "--metrics", "MAP,bpref", "--out", str(tmp_path / "o")])
    assert code == 0
    rows = {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()}
    assert rows["split:test"][3] == "n/a" and rows["split:dev"][3] != "n/a"
    summary = json.loads((tmp_path / "o" / "results.json").read_text())["summary"]
    assert summary["split:test"]["bpref"] is None and float(rows["split:test"][2]) == pytest.approx(
        summary["split:test"]["MAP"], abs=0.005)


def test_fuse_runs_leaves_out_at_threshold_1_the_queries_pools_left_out(tmp_path):
    root = _toy(tmp_path, [0, 0, 0, 0])  # p6: nothing relevant, left out by --skip-no-relevant
    folders = [tmp_path / name for name in ("a", "b")]
    for folder in folders:
        res = run_pools(root, "toy", folder, metrics=("MAP", "MRR"), ranked_dir=root, exp="manual",
                        skip_no_relevant=True)
    assert res["skipped_no_relevant"] == ["p6"] and res["relevance_threshold"] == 1
    fused = fuse_run_files(folders, tmp_path / "fused", metrics=["MAP", "MRR"])
    assert fused["relevance_threshold"] == 1 and fused["skipped_no_relevant"] == ["p6"]
    for m in ("MAP", "MRR"):  # two copies of one run fuse to its ranking: the pools evaluator's figures
        assert 100 * fused["metrics"][m] == pytest.approx(res["summary"]["all"][m])


BOM = b"\xef\xbb\xbf"


def test_a_byte_order_mark_is_no_part_of_the_first_query_id(tmp_path):
    run, qrels = tmp_path / "run.trec", tmp_path / "qrels.trec"
    run.write_bytes(BOM + b"q1 Q0 d3 1 0.9 x\nq1 Q0 d1 2 0.5 x\nq1 Q0 d5 3 0.1 x\nq2 Q0 d4 1 0.3 x\n")
    qrels.write_bytes(BOM + b"q1 0 d3 1\nq1 0 d5 1\nq2 0 d4 1\n")
    ranked, judged = read_run(run), read_qrels(qrels)
    assert list(ranked) == ["q1", "q2"] and [d for d, _ in ranked["q1"]] == ["d3", "d1", "d5"]
    assert judged == {"q1": {"d3": 1, "d5": 1}, "q2": {"d4": 1}}
    # q1: d3 at 1, d5 at 3 -> (1 + 2/3) / 2; q2: 1 (a BOM once split q1 in two queries: MAP (1 + 1/2 + 1) / 3)
    assert mean_scores(per_query(judged, ranked, ["MAP"]))["MAP"] == pytest.approx(((1 + 2 / 3) / 2 + 1) / 2)


@pytest.mark.parametrize("reader, text", [(read_run, b"q1 Q0 d\xe91 1 0.9 x\n"), (read_qrels, b"q1 0 d\xe91 1\n")])
def test_a_byte_that_is_not_utf8_names_the_file_and_line(tmp_path, reader, text):
    path = tmp_path / "f.trec"
    path.write_bytes(b"\n" + text)
    with pytest.raises(ValueError, match=rf"^{path}:2: not UTF-8 text \(byte 0xe9 at column \d+\)"):
        reader(path)


def test_compare_leaves_out_at_threshold_1_the_queries_pools_left_out(tmp_path):
    """`compare` kept the rule fuse-runs had (left out above threshold 1 only): two folders `pools
    --skip-no-relevant` scored at threshold 1 were refused, "1 queries have no relevant document"."""
    from aspire.evaluate.compare import compare

    root = _toy(tmp_path, [0, 0, 0, 0])  # p6: nothing relevant, left out by --skip-no-relevant
    for name in ("a", "b"):
        res = run_pools(root, "toy", tmp_path / name, metrics=("MAP",), ranked_dir=root, exp="manual",
                        skip_no_relevant=True)
    out = compare(str(tmp_path / "a"), str(tmp_path / "b"), metrics=["MAP"], n_perm=100)
    assert set(out["MAP"]["per_unit_delta"]) == {"p1"}  # p6 left out, as the pools evaluator left it out
    assert out["MAP"]["per_unit_delta"]["p1"] == 0.0 and res["skipped_no_relevant"] == ["p6"]


def test_fuse_runs_refused_at_scoring_writes_nothing_and_the_same_out_is_taken_again(tmp_path, capsys):
    """fuse-runs wrote run.trec and qrels.trec before scoring: a refusal there (qrels judging other queries) left
    them without results.json, and a re-run into the same --out was refused ("holds files but no readable
    results.json") until the folder was removed by hand."""
    root = _toy(tmp_path, [1, 0, 0, 2])
    folders = [str(tmp_path / name) for name in ("a", "b")]
    for folder in folders:
        run_pools(root, "toy", folder, metrics=("MAP",), ranked_dir=root, exp="manual")
    other = tmp_path / "other.qrels"
    other.write_text("q9 0 p2 1\n")
    out = tmp_path / "fused"
    assert main(["fuse-runs", *folders, "--qrels", str(other), "--out", str(out)]) != 0
    assert "disagree" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())  # nothing written
    assert main(["fuse-runs", *folders, "--out", str(out)]) == 0  # the same --out, taken
    assert {p.name for p in out.iterdir()} == {"run.trec", "qrels.trec", "results.json"}


@pytest.mark.skipif(not (DATA / "csfcube" / "sample_ranked_pools").is_dir(), reason="no CSFCube data in ../shared/data")
def test_fuse_runs_of_csfcube_folders_refused_at_scoring_writes_nothing(tmp_path, monkeypatch):
    """The CSFCube branch wrote run.trec before the CSFCube evaluator scored (and `write_trec` wrote it again after):
    a refusal there left run.trec without results.json, a folder a re-run into it refused."""
    from aspire.benchmarks import csfcube as bench_csfcube
    from tests.test_reliability_round21_fuse import _csfcube_folders

    folders = _csfcube_folders(tmp_path)

    def refuse(*args, **kwargs):
        raise ValueError("no rankings for facet 'method'")

    monkeypatch.setattr(bench_csfcube, "evaluate_csfcube_rankings", refuse)
    out = tmp_path / "fused"
    with pytest.raises(ValueError, match="no rankings for facet"):
        fuse_run_files(folders, out)
    assert not out.exists() or not any(out.iterdir())
