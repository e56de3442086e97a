"""Round 4, evaluation tools: compare, two-fold selection, the suite and the reviewer runner on hostile inputs.

Each test pins one defect found by using the tools as a user would: bad input is an error naming the file,
line or key, and nothing is silently dropped or silently run with other settings than asked.
"""

from __future__ import annotations

import json
import logging

import pytest

from aspire.benchmarks import BENCHMARKS, Benchmark, register
from aspire.benchmarks.csfcube import GROUPS
from aspire.benchmarks.stats import table_row
from aspire.evaluate import suite, two_fold
from aspire.evaluate.compare import compare

QRELS = "q1 0 d1 2\nq1 0 d2 0\nq2 0 d3 1\nq2 0 d4 0\n"
RUN_A = "q1 Q0 d1 1 0.9 a\nq1 Q0 d2 2 0.5 a\nq2 Q0 d3 1 0.9 a\nq2 Q0 d4 2 0.1 a\n"


def _trec(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ------------------------------------------------------------------ compare: TREC runs and results folders


@pytest.mark.parametrize("line", ["q1 Q0 d1 1 nan b", "q1 Q0 d1 1 inf b", "q1 Q0 d1 0 0.9 b"])
def test_compare_refuses_a_run_line_with_a_non_finite_score_or_a_rank_below_one(tmp_path, line):
    # once, a NaN score (which `run_line` refuses to write) was read and compared without a word
    qrels = _trec(tmp_path, "q.trec", QRELS)
    a = _trec(tmp_path, "a.trec", RUN_A)
    b = _trec(tmp_path, "b.trec", line + "\nq1 Q0 d2 2 0.5 b\nq2 Q0 d4 1 0.9 b\nq2 Q0 d3 2 0.1 b\n")
    with pytest.raises(ValueError, match=r"b\.trec:1: ranks count from 1 and scores are finite"):
        compare(a, b, qrels, n_perm=10)


def test_compare_names_the_run_that_leaves_a_judged_query_out(tmp_path):
    qrels = _trec(tmp_path, "q.trec", QRELS)
    a = _trec(tmp_path, "a.trec", RUN_A)
    b = _trec(tmp_path, "short-run.trec", "q1 Q0 d1 1 0.9 b\nq1 Q0 d2 2 0.5 b\n")
    with pytest.raises(ValueError, match=r"short-run\.trec: run and qrels disagree: 1 judged queries not ranked"):
        compare(a, b, qrels, n_perm=10)


# the shared reader (aspire.evaluate.fuse.results_doc) says what is wrong: once "not a results file"
@pytest.mark.parametrize("text, why", [("{oops", "not JSON: the results file cannot be read"),
                                       ("[1, 2]", "a JSON list, not an object")])
def test_compare_names_a_results_json_that_is_not_a_results_object(tmp_path, text, why):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"benchmark": "csfcube"}))
    (tmp_path / "b" / "results.json").write_text(text)
    with pytest.raises(ValueError, match=rf"b/results\.json: .*{why}"):
        compare(str(tmp_path / "a"), str(tmp_path / "b"), n_perm=10)


# ------------------------------------------------------------------ two-fold selection


def _results(fold1: float, fold2: float) -> dict:
    halves = {"fold1_test": fold1, "fold2_test": fold2, "fold1_dev": fold2, "fold2_dev": fold1}
    return {"folds": {g: {h: {"MAP": v, "NDCG%20": v + 10} for h, v in halves.items()} for g in GROUPS}}


@pytest.mark.parametrize("damage", ["no fold2_dev", "fold2_dev MAP null", "no method group"])
def test_two_fold_selection_names_the_candidate_missing_a_figure(damage):
    broken = _results(20, 60)
    if damage == "no fold2_dev":
        del broken["folds"]["all"]["fold2_dev"]
    elif damage == "fold2_dev MAP null":
        broken["folds"]["all"]["fold2_dev"]["MAP"] = None
    else:
        del broken["folds"]["method"]
    candidates = {"good": _results(60, 20), "broken": broken}
    # once a KeyError or TypeError traceback (or, for a group the choice did not fall on, nothing at all)
    with pytest.raises(ValueError, match=r"broken: results\.json has no figure folds\.(all|method)\."):
        two_fold.select_two_fold(candidates)


def test_per_facet_selection_names_the_candidate_missing_a_facet():
    broken = _results(20, 60)
    del broken["folds"]["method"]
    with pytest.raises(ValueError, match=r"broken: results\.json has no figure folds\.method\.fold1_dev\.MAP"):
        two_fold.select_per_facet({"good": _results(60, 20), "broken": broken}, {})


def test_two_fold_names_a_results_json_that_is_not_json(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "results.json").write_text("{oops")
    with pytest.raises(ValueError, match=r"x/results\.json: not a results file"):
        two_fold.load(tmp_path / "x")


HEADER = "query,paper_id,facet,test_fold,pool_size,title,MAP,NDCG%20,P@20,R@20,R-precision,NDCG@20"


@pytest.mark.parametrize("row, match", [
    ("q2_method,q2,method,fold2_test,5,t,,70.0,0,0,0,0", r"perq\.csv:3: query 'q2_method': MAP, NDCG%20 must be numbers"),
    ("q2_method,q2,method,fold9_test,5,t,50.0,70.0,0,0,0,0", r"perq\.csv:3: query 'q2_method': .*test fold 'fold9_test'"),
    ("q1_method,q1,method,fold2_test,5,t,50.0,70.0,0,0,0,0", r"perq\.csv:3: query 'q1_method' is listed twice"),
])
def test_per_query_csv_errors_name_the_file_and_line(tmp_path, row, match):
    # once `could not convert string to float: ''` with no file, or a query of an unknown fold counted silently
    rows = [HEADER, "q1_method,q1,method,fold1_test,5,t,40.0,60.0,0,0,0,0", row]
    (tmp_path / "test-pid2pool-csfcube-x-perq.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=match):
        two_fold.load_per_query(tmp_path)


# ------------------------------------------------------------------ the suite


@pytest.fixture
def toy_suite(monkeypatch, tmp_path):
    """A toy benchmark with a model-only runner, registered for this test only; counts its runs."""
    from aspire import benchmarks

    monkeypatch.setattr(benchmarks, "BENCHMARKS", dict(BENCHMARKS))
    monkeypatch.setattr(suite, "BENCHMARKS", benchmarks.BENCHMARKS)
    bench = register(Benchmark("toy", "toy-data", "toy (2 queries)", ("accuracy",)))
    runs = []

    def rows(benchmark, data, model, scorer, out, settings, options):
        runs.append(benchmark.name)
        return [table_row(benchmark.title, benchmark.metrics[0], 0.5, (0.0, 1.0), 2)], None

    monkeypatch.setitem(suite.RUNNERS, "toy", suite.Runner(rows, lambda *a: []))
    return bench, runs


def test_suite_runs_a_benchmark_named_twice_once(toy_suite, tmp_path):
    _, runs = toy_suite
    result = suite.run_suite("m", "minl2", tmp_path / "out", tmp_path, benchmarks=["toy", "toy"])
    assert runs == ["toy"] and len(result["rows"]) == 1  # once two runs and two rows of one benchmark


def test_suite_with_bm25_warns_about_and_records_a_named_benchmark_it_skips(toy_suite, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="aspire"):
        result = suite.run_suite("bm25", None, tmp_path / "out", tmp_path, benchmarks=["toy"])
    assert result["rows"] == [] and result["skipped"] == ["toy"]  # once an empty table and not a word
    assert any("toy skipped" in r.getMessage() for r in caplog.records)
    assert json.loads((tmp_path / "out" / "suite.json").read_text())["skipped"] == ["toy"]


# ------------------------------------------------------------------ reviewer matching


def _spy_encodings(monkeypatch):
    """Record the encodings `run_reviewers` asks for, with no model: a fake encoder and unit vectors."""
    import torch

    from aspire.evaluate import reviewer_run
    from aspire.evaluate.encode import single_vector_batch

    asked = []

    class Encoder:
        def to(self, device):
            return self

        device = torch.device("cpu")
        loaded_checkpoint: dict = {}  # as `load_encoder` sets it: what the results record beside the model

        def fingerprint(self):
            return "fake"

    def encode_papers(encoder, papers, encoding, cache_dir, batch_size, options, record=None):
        asked.append(encoding)
        if record is not None:
            record.append({"encoding": encoding, "fingerprint": encoder.fingerprint()})
        return single_vector_batch(torch.eye(len(papers)), papers), False

    monkeypatch.setattr("aspire.encoders.load_encoder", lambda model, **kw: Encoder())
    monkeypatch.setattr(reviewer_run, "encode_papers", encode_papers)
    return asked


def test_reviewers_abstract_scorer_reads_the_pass_vector_when_asked(tmp_path, monkeypatch):
    from test_benchmarks import make_reviewer_set

    from aspire.benchmarks.reviewers import load_reviewer_set
    from aspire.evaluate.options import EvalOptions
    from aspire.evaluate.reviewer_run import run_reviewers

    asked = _spy_encodings(monkeypatch)
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=1))
    res = run_reviewers(rset, "fake", ["abstract"], tmp_path / "out", "x", options=EvalOptions(encoding="pass"))
    # once the separate whole-abstract encoding, while the results recorded encoding "pass"
    assert asked == ["pass"] and res["encodings"] == {"abstract": "pass"}
    with pytest.raises(ValueError, match="encoding 'pass' only goes with scorer 'abstract', not 'minl2'"):
        run_reviewers(rset, "fake", ["minl2"], tmp_path / "out2", "y", options=EvalOptions(encoding="pass"))
