"""Round 76: `aspire evaluate reviewers` and `context2doc` from a user's view.

A rated submission missing from one of ten prediction files named the reviewer and paper but not the draw (the same
pair is in every file); a prediction for a reviewer of no rating or a paper outside the draw's submissions was dropped
unsaid; a context2doc results.json did not record the split file it scored (its checksum and source SHA-256), nor the
train / dev queries left out of the split as a test query's twins (dev: 262 of the committed 263).
"""

from __future__ import annotations

import json

import pytest
from test_benchmarks import make_reviewer_set

from aspire.benchmarks import context2doc as c2d
from aspire.benchmarks.reviewers import load_reviewer_set, reviewer_units, summarize
from aspire.cli.evaluate import main
from aspire.evaluate.context2doc_run import run_context2doc
from aspire.evaluate.options import Stages
from aspire.evaluate.reviewer_run import format_result
from tests.test_reliability_round41_c2dbench import _all_test_split, _write

FULL = {"r1": {"s1": 0.5, "s2": 0.6, "s3": 0.1}, "r2": {"s1": 0.3, "s4": 0.2}, "r3": {"s2": 0.9, "s3": 0.1}}


def _copy(pred: dict) -> dict:
    return {r: dict(s) for r, s in pred.items()}


def test_a_rated_submission_missing_from_one_draw_names_that_draw(tmp_path):
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=3))
    second = _copy(FULL)
    del second["r1"]["s2"]
    with pytest.raises(ValueError, match=r"^draw d_20_2: reviewer r1: no prediction for rated submission s2$"):
        reviewer_units(rset, [FULL, second, FULL])


def test_predictions_no_pair_reads_are_counted_and_printed_not_dropped(tmp_path):
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=2))
    odd = _copy(FULL)
    odd["r2"]["zz-paper"] = 0.7  # in no draw's submissions
    odd["nobody"] = {"s1": 0.1}  # rated nothing
    units, counts = reviewer_units(rset, [FULL, odd])
    assert counts["unrated_reviewers"] == ["nobody"]
    assert counts["unknown_papers"] == ["zz-paper"]
    clean = reviewer_units(rset, [FULL, FULL])
    assert units.value() == clean[0].value()  # the figure is unchanged: nothing of theirs was scored
    assert clean[1]["unrated_reviewers"] == [] and clean[1]["unknown_papers"] == []
    line = format_result(summarize(units, counts, n_boot=10))
    assert line.endswith("; predictions for 1 unrated reviewer (nobody) and 1 paper outside their draw's "
                         "submissions (zz-paper) not scored")
    assert "not scored" not in format_result(summarize(*clean, n_boot=10))


def test_the_predictions_command_records_and_prints_what_it_did_not_score(tmp_path, capsys):
    root = make_reviewer_set(tmp_path / "rm", draws=2)
    folder = tmp_path / "preds"
    folder.mkdir()
    for d, pred in enumerate([FULL, {**_copy(FULL), "~ghost": {"s1": 1.0}}], start=1):
        (folder / f"mine_d_20_{d}_ta.json").write_text(json.dumps(pred))
    out = tmp_path / "out"
    assert main(["reviewers", "--data", str(root), "--predictions", f"{folder}:mine", "--out", str(out), "-q"]) == 0
    assert "predictions for 1 unrated reviewer (ghost) not scored" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["unrated_reviewers"] == ["ghost"] and results["unknown_papers"] == []


def test_context2doc_results_record_the_split_scored_and_its_left_out_queries(tmp_path):
    source = _write(tmp_path)
    meta, split = _all_test_split(tmp_path, source)
    bench = c2d.load_context2doc(tmp_path, "test", split)
    bench.left_out = ["L9"]  # as a dev split's twin of a test query is left out
    results = run_context2doc(bench, tmp_path / "out", "bm25", stages=Stages(bm25=True))
    want = {"name": "test", "split_file": str(split), "checksum": meta["checksum"],
            "source_sha256": meta["source_sha256"], "left_out": ["L9"]}
    assert results["split"] == want
    assert json.loads((tmp_path / "out" / "results.json").read_text())["split"] == want


@pytest.mark.slow
def test_the_committed_dev_split_records_its_checksum_and_the_query_it_leaves_out(shared_data):
    committed = c2d.load_split()
    bench = c2d.load_context2doc(shared_data / "cocite-acl", "dev")
    assert bench.provenance == {"split_file": str(c2d.SPLIT_FILE), "checksum": committed["checksum"],
                                "source_sha256": committed["source_sha256"]}
    # the committed dev split lists 263 queries; one is a test query's twin and left out, now on record
    assert committed["splits"]["dev"]["n_queries"] == len(bench.queries) + len(bench.left_out) == 263
    assert bench.left_out == ["L1317"]
