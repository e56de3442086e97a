"""Round 76: what `aspire evaluate` prints of a context2doc split, and what a re-run leaves in its `--out` folder.

`context2doc --split dev` printed "262 queries" where the committed dev split lists 263, not saying that one (L1317,
a test query's twin) is left out. A re-run into its own results folder (the same benchmark and experiment, which
`check_out` accepts) wrote its files over the earlier run's but left those it did not write: a
`crossencoder_scores.json` of a run with `--rerank`, a stage's ranked files, a model run's predictions, beside a
`results.json` of another run. A successful re-run now removes them, naming them; a user's own files stay.
"""

from __future__ import annotations

import json
import os

import pytest
from test_benchmarks import make_reviewer_set

from aspire.benchmarks import context2doc as c2d
from aspire.cli.evaluate import main
from aspire.paths import DATA
from tests.test_reliability_round41_c2dbench import _all_test_split, _write

CSF = DATA / "csfcube"


def _toy_bench(tmp_path, left_out):
    source = _write(tmp_path)
    _, split = _all_test_split(tmp_path, source)
    bench = c2d.load_context2doc(tmp_path, "test", split)
    bench.left_out = list(left_out)  # as a train / dev split leaves out a test query's twin
    return bench


@pytest.mark.parametrize("left_out, words", [
    (["L9"], "(2 queries; 1 left out as a test query's twin: L9) bm25: MRR "),
    (["L9", "L7", "L8", "L6"], "(2 queries; 4 left out as test queries' twins: L6, L7, L8 (and 1 more)) bm25: MRR "),
    ([], "(2 queries) bm25: MRR "),
])
def test_context2doc_prints_the_queries_its_split_left_out(tmp_path, monkeypatch, capsys, left_out, words):
    bench = _toy_bench(tmp_path, left_out)
    monkeypatch.setattr(c2d, "load_context2doc", lambda data, split: bench)
    assert main(["context2doc", "--bm25", "--out", str(tmp_path / "out")]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("context2doc test " + words), line


def test_a_rerun_without_rerank_removes_the_cross_encoders_scores(tmp_path, tiny_cross_encoder_dir, capsys):
    root = make_reviewer_set(tmp_path / "rm", draws=2)
    out = tmp_path / "out"
    common = ["reviewers", "--data", str(root), "--bm25", "--exp", "mine", "--out", str(out)]
    assert main([*common, "--rerank", str(tiny_cross_encoder_dir), "--rerank-top", "2"]) == 0
    assert (out / "crossencoder_scores.json").is_file()
    (out / "notes.txt").write_text("mine")  # the user's own file: not a run's
    capsys.readouterr()
    assert main(common) == 0
    said = capsys.readouterr().out
    assert f"removed from {out} the earlier run's files this run did not write: crossencoder_scores.json\n" in said
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "predictions", "results.json"]
    assert "rerank" not in json.loads((out / "results.json").read_text())
    assert main(common) == 0  # the same run again writes every file it left: nothing to remove
    assert "removed" not in capsys.readouterr().out
    assert (out / "notes.txt").read_text() == "mine"


def test_scoring_given_predictions_into_a_model_runs_folder_removes_its_predictions(tmp_path, capsys):
    root = make_reviewer_set(tmp_path / "rm", draws=2)
    out, given = tmp_path / "out", tmp_path / "given"
    assert main(["reviewers", "--data", str(root), "--bm25", "--exp", "mine", "--out", str(out)]) == 0
    given.mkdir()
    for path in (out / "predictions").iterdir():
        given.joinpath(path.name).write_text(path.read_text())
    capsys.readouterr()
    assert main(["reviewers", "--data", str(root), "--predictions", f"{given}:mine", "--out", str(out)]) == 0
    assert ("the earlier run's files this run did not write: predictions/mine_d_20_1_ta.json, "
            "predictions/mine_d_20_2_ta.json\n") in capsys.readouterr().out
    assert sorted(os.listdir(out)) == ["results.json"]  # predictions/, emptied, goes too


def test_a_failed_rerun_removes_nothing(tmp_path, tiny_cross_encoder_dir, monkeypatch):
    root = make_reviewer_set(tmp_path / "rm", draws=1)
    out = tmp_path / "out"
    common = ["reviewers", "--data", str(root), "--bm25", "--exp", "mine", "--out", str(out)]
    assert main([*common, "--rerank", str(tiny_cross_encoder_dir), "--rerank-top", "2"]) == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    import aspire.evaluate.reviewer_run as reviewer_run

    def fail(*args, **kwargs):
        raise ValueError("scoring failed")

    monkeypatch.setattr(reviewer_run, "run_reviewers", fail)
    assert main(common) != 0
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


@pytest.mark.skipif(not CSF.is_dir(), reason="no shared data")
def test_csfcube_scored_from_ranked_files_removes_a_staged_runs_ranked_files(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["csfcube", "--bm25", "--exp", "specter", "--out", str(out)]) == 0
    staged = sorted(p.name for p in out.glob("*-ranked.json"))
    assert len(staged) == 6  # bm25's and the last stage's (specter) three facets each
    capsys.readouterr()
    assert main(["csfcube", "--ranked", str(CSF / "sample_ranked_pools"), "--exp", "specter", "--out", str(out)]) == 0
    assert f"did not write: {', '.join(staged)}\n" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["qrels.trec", "results.json", "run.trec",
                                                      "test-pid2pool-csfcube-specter-perq.csv"]


@pytest.mark.slow
def test_the_committed_dev_split_prints_the_query_it_leaves_out(shared_data, tmp_path, capsys):
    assert main(["context2doc", "--split", "dev", "--bm25", "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.startswith("context2doc dev (262 queries; 1 left out as a test query's twin: L1317) ")


def test_a_probes_comparison_goes_with_the_run_that_made_it(tmp_path, capsys):
    """`venue --compare DIR` writes compare.json; a re-run without --compare left it beside results it never read."""
    from argparse import Namespace

    from aspire.cli.evaluate_out import remove_unwritten, run_files
    from aspire.io import write_json

    out = tmp_path / "out"
    write_json(out / "results.json", {"format": "venue"})
    write_json(out / "compare.json", {"against": "other", "tests": {}})
    (out / "notes.json").write_text("{}")  # not a name a run writes: the user's
    args = Namespace(command="venue", out=str(out))
    earlier = run_files(args)
    assert sorted(p.name for p in earlier) == ["compare.json", "results.json"]
    assert remove_unwritten(args, earlier) == []  # results.json not written again: no run replaced this one
    write_json(out / "results.json", {"format": "venue"})
    assert remove_unwritten(args, earlier) == ["compare.json"]
    assert sorted(p.name for p in out.iterdir()) == ["notes.json", "results.json"]
    assert run_files(Namespace(command="suite", out=str(out))) == {}  # a suite re-runs some benchmarks' folders


def test_a_run_folder_nested_in_out_is_not_the_re_runs_to_remove(tmp_path, capsys):
    """A user's `--out runs/a/ablation` below `runs/a`: re-running `runs/a` does not own the nested run's files."""
    from argparse import Namespace

    from aspire.cli.evaluate_out import remove_unwritten, run_files
    from aspire.io import write_json

    out = tmp_path / "a"
    for folder in (out, out / "ablation", out / "ablation" / "deeper"):
        write_json(folder / "results.json", {"format": "venue"})
        write_json(folder / "compare.json", {"against": "other", "tests": {}})
    write_json(out / "ablation" / "predictions" / "x_ta.json", {})
    args = Namespace(command="venue", out=str(out))
    earlier = run_files(args)
    assert sorted(p.relative_to(out).as_posix() for p in earlier) == ["compare.json", "results.json"]
    write_json(out / "results.json", {"format": "venue"})
    assert remove_unwritten(args, earlier) == ["compare.json"]
    assert (out / "ablation" / "compare.json").is_file() and (out / "ablation" / "deeper" / "results.json").is_file()
    assert (out / "ablation" / "predictions" / "x_ta.json").is_file()
