"""Round 74: a result made with `--model RUN_FOLDER` (a training run's folder, which loads its `best` checkpoint, else
its `latest`) records which checkpoint it loaded (`aspire.encoders.pretrained.checkpoint_record`): the record named the
folder alone, and a resumed run that moved `best` left it naming other weights. Tiny random models, no network."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_benchmarks import make_reviewer_set, tiny_context2doc

from aspire.encoders.pretrained import checkpoint_record, resolve_model
from aspire.train import checkpoint as ckpt


def _run_folder(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """A training run's folder with checkpoints 1 and 2 (the tiny model), `best` at 1 and `latest` at 2."""
    run = tmp_path / "run"
    for step in (1, 2):
        shutil.copytree(tiny_model_dir, run / ckpt.checkpoint_name(step) / "model")
    ckpt.write_pointer(run, ckpt.BEST, {"checkpoint": ckpt.checkpoint_name(1), "step": 1, "dev_loss": 0.5})
    ckpt.write_pointer(run, ckpt.LATEST, {"checkpoint": ckpt.checkpoint_name(2), "step": 2})
    return run


def _loaded(run: Path, step: int, pointer: str = "best") -> dict:
    return {"path": str((run / ckpt.checkpoint_name(step) / "model").absolute()), "pointer": pointer, "step": step}


def _move_best(run: Path) -> None:
    """What a resumed run does once a later checkpoint has the lower dev loss."""
    ckpt.write_pointer(run, ckpt.BEST, {"checkpoint": ckpt.checkpoint_name(2), "step": 2, "dev_loss": 0.1})


def test_checkpoint_record_names_the_checkpoint_resolve_model_loads(tmp_path, tiny_model_dir, monkeypatch):
    run = _run_folder(tmp_path, tiny_model_dir)
    assert checkpoint_record(run) == {"checkpoint": _loaded(run, 1)}
    assert Path(checkpoint_record(run)["checkpoint"]["path"]) == resolve_model(run).absolute()
    monkeypatch.chdir(tmp_path)  # a relative folder is recorded absolute
    assert checkpoint_record("run") == {"checkpoint": _loaded(run, 1)}
    (run / "best").unlink()
    assert checkpoint_record(run) == {"checkpoint": _loaded(run, 2, "latest")}
    (run / "latest").write_text(json.dumps({"checkpoint": ckpt.checkpoint_name(2)}))  # a pointer without a step
    assert checkpoint_record(run)["checkpoint"]["step"] is None
    # a short name and a model folder name their weights themselves
    assert checkpoint_record("minilm") == {} and checkpoint_record(tiny_model_dir) == {}
    (run / "latest").write_text("NaN")
    with pytest.raises(ValueError, match="latest: not a training run's pointer"):
        checkpoint_record(run)


def test_evaluate_csfcube_of_a_run_folder_records_the_checkpoint_it_loaded(tmp_path, tiny_model_dir, small_csfcube):
    from aspire.cli.evaluate import main

    run = _run_folder(tmp_path, tiny_model_dir)
    out = tmp_path / "out"
    assert main(["csfcube", "--data", str(small_csfcube), "--model", str(run), "--scorer", "abstract", "--out",
                 str(out), "--no-cache", "--backend", "torch", "-q"]) == 0
    _move_best(run)
    saved = json.loads((out / "results.json").read_text())
    assert saved["model"] == str(run) and saved["checkpoint"] == _loaded(run, 1)


def test_every_runner_of_a_run_folder_records_the_checkpoint(tmp_path, tiny_model_dir, small_csfcube):
    from aspire.benchmarks.reviewers import load_reviewer_set
    from aspire.evaluate.context2doc_run import run_context2doc
    from aspire.evaluate.csfcube import run_csfcube_search
    from aspire.evaluate.reviewer_run import run_reviewers
    from aspire.evaluate.search_run import run_reviewers_search, run_search_pipeline

    run = _run_folder(tmp_path, tiny_model_dir)
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm"))
    bench = tiny_context2doc(tmp_path / "c2d")
    model = str(run)
    results = {
        "reviewers": run_reviewers(rset, model, ["abstract"], tmp_path / "r", "r", "max"),
        "reviewers search": run_reviewers_search(rset, tmp_path / "rs", "rs", model, ["rerank=minl2"], "max"),
        "context2doc": run_context2doc(bench, tmp_path / "c", "c", model, "abstract"),
        "context2doc search": run_search_pipeline(bench, tmp_path / "cs", "cs", model, ["rerank=minl2"]),
        "csfcube search": run_csfcube_search(small_csfcube, model, ["rerank=minl2"], tmp_path / "cf", exp="s"),
    }
    assert {name: result.get("checkpoint") for name, result in results.items()} == dict.fromkeys(results, _loaded(run, 1))
    assert json.loads((tmp_path / "cs" / "results.json").read_text())["checkpoint"] == _loaded(run, 1)
    assert "checkpoint" not in run_context2doc(bench, tmp_path / "m", "m", str(tiny_model_dir), "abstract")


def test_probe_features_suite_and_ensemble_of_a_run_folder_record_the_checkpoint(tmp_path, tiny_model_dir,
                                                                                 monkeypatch):
    from aspire.evaluate import suite
    from aspire.evaluate.ensemble import EnsembleConfig, EnsembleMember, as_run
    from aspire.evaluate.probes import Features

    run = _run_folder(tmp_path, tiny_model_dir)
    assert Features(str(run), {}).loaded == {"checkpoint": _loaded(run, 1)}  # what a probe's results.json records

    def rows(bench, data, model, scorer, out, settings, options):
        _move_best(run)  # best moves while the suite runs: suite.json keeps what the suite began with
        return [], "fp"

    monkeypatch.setitem(suite.RUNNERS, "csfcube", suite.Runner(rows, None))
    written = suite.run_suite(str(run), "abstract", tmp_path / "suite", tmp_path, benchmarks=["csfcube"])
    assert written["checkpoint"] == _loaded(run, 1)
    assert json.loads((tmp_path / "suite" / "suite.json").read_text())["checkpoint"] == _loaded(run, 1)

    members = [EnsembleMember("a", str(run), "abstract"), EnsembleMember("b", str(tiny_model_dir), "minl2"),
               EnsembleMember("c", "bm25")]
    recorded = as_run(EnsembleConfig(members=members))["members"]
    assert recorded[0]["checkpoint"] == _loaded(run, 2) and "checkpoint" not in recorded[1] | recorded[2]
