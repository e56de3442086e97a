"""`evaluate fuse-runs` says which documents some of its runs do not rank: such a document adds nothing from those
runs (under z, their mean score), which was done without a word."""

from __future__ import annotations

import json
import logging

import pytest

from aspire.benchmarks.runs import read_run
from aspire.evaluate.fuse import fuse_run_files

QRELS = "q1 0 d1 1\nq1 0 d2 0\nq1 0 d3 1\nq2 0 d4 1\nq2 0 d5 0\n"
# a's top 3 and b's top 2 of q1: d3 is a's worst, and b does not rank it; q2: both rank the same documents
RUN_A = "q1 Q0 d1 1 3.0 a\nq1 Q0 d2 2 2.0 a\nq1 Q0 d3 3 1.0 a\nq2 Q0 d4 1 2.0 a\nq2 Q0 d5 2 1.0 a\n"
RUN_B = "q1 Q0 d2 1 5.0 b\nq1 Q0 d1 2 4.0 b\nq2 Q0 d5 1 2.0 b\nq2 Q0 d4 2 1.0 b\n"


@pytest.fixture()
def two_runs(tmp_path):
    (tmp_path / "qrels.trec").write_text(QRELS)
    (tmp_path / "a.trec").write_text(RUN_A)
    (tmp_path / "b.trec").write_text(RUN_B)
    return tmp_path


@pytest.mark.parametrize("fusion", ["z", "minmax", "rrf"])
def test_fuse_runs_says_which_documents_a_run_does_not_rank(two_runs, fusion, caplog):
    """d3 (q1) is ranked by a only: it adds nothing from b, which results.json and a warning now say (two
    context2doc BM25 top-100 runs: 11,558 of the 52,079 fused pairs, unsaid)."""
    a, b = str(two_runs / "a.trec"), str(two_runs / "b.trec")
    with caplog.at_level(logging.WARNING, logger="aspire.evaluate.fuse"):
        results = fuse_run_files([a, b], two_runs / "out", fusion=fusion, qrels=two_runs / "qrels.trec")
    assert results["unranked"]["pairs"] == 1
    assert results["unranked"]["of"] == 5
    assert results["unranked"]["by_run"] == {b: 1}
    assert results["unranked"]["scored"].startswith("0 from that run")
    assert json.loads((two_runs / "out" / "results.json").read_text())["unranked"] == results["unranked"]
    assert "1 of the fused run's 5 (query, document) pairs are not ranked by every input" in caplog.text
    assert f"{b} leaves out 1" in caplog.text


def test_fuse_runs_of_runs_ranking_the_same_documents_says_nothing(two_runs, caplog):
    a = str(two_runs / "a.trec")
    (two_runs / "c.trec").write_text(RUN_A.replace(" a\n", " c\n").replace("3.0", "9.0"))
    with caplog.at_level(logging.WARNING, logger="aspire.evaluate.fuse"):
        results = fuse_run_files([a, str(two_runs / "c.trec")], two_runs / "out", qrels=two_runs / "qrels.trec")
    assert "unranked" not in results
    assert "not ranked by every input" not in caplog.text
    assert {d for d, _ in read_run(two_runs / "out" / "run.trec")["q1"]} == {"d1", "d2", "d3"}
