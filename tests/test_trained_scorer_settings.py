"""A document model is scored as it was trained: `model.ot_tau` / `ot_eps` (kinds `ot`, `ts+ot`) and `att_tau` (kind
`att`) recorded in its document_model.json are the defaults of `aspire evaluate ... --scorer ot`, of an ensemble
member's scorer and of the search config `aspire index build` saves (which `aspire search --rerank ot` and the page
read). They were the scorer's defaults (tau 1, eps 0.05), without a word. A flag or key given still wins; a model
without the file, or trained at the defaults, is scored as before."""

from __future__ import annotations

import inspect
import json
import logging
import shutil

import pytest

from aspire.cli.evaluate import build_parser
from aspire.cli.evaluate_options import SCORER_OPTION_READERS, eval_options
from aspire.encoders.trained import KEYWORD_READERS, SCORER_SETTINGS, TRAINED_SCORER, trained_defaults
from aspire.index.__main__ import main as index_main
from aspire.train.config import KINDS, ModelConfig, kind_reads


def make_run(root, tiny_model_dir, **model):
    """A training run's folder whose best checkpoint's document_model.json records `model` (kind ot unless given)."""
    folder = root / "checkpoint-000002" / "model"
    shutil.copytree(tiny_model_dir, folder)
    settings = {"kind": "ot", "ot_tau": 1.0, "ot_eps": 0.05, **model}
    kind = settings["kind"]
    meta = {"kind": kind, "inference_scorer": KINDS[kind][1], "tasks": ["cocite"], "model": settings}
    (folder / "document_model.json").write_text(json.dumps(meta))
    (root / "best").write_text(json.dumps({"checkpoint": "checkpoint-000002", "step": 2}))
    return root


@pytest.fixture
def run(tmp_path, tiny_model_dir):
    return make_run(tmp_path / "run", tiny_model_dir, ot_tau=0.5)


def options(model, *flags, scorer="ot"):
    args = build_parser().parse_args(["csfcube", "--model", str(model), "--scorer", scorer, "--out", "x", *flags])
    return eval_options(args).scorer_options


def test_evaluate_scores_with_the_settings_the_model_was_trained_with(run, caplog):
    with caplog.at_level(logging.INFO, logger="aspire"):
        assert options(run) == {"tau": 0.5}  # was {}: the scorer's tau 1
    said = [r.getMessage() for r in caplog.records if "trained with" in r.getMessage()]
    assert len(said) == 1 and "--tau 0.5" in said[0] and str(run / "checkpoint-000002" / "model" /
                                                               "document_model.json") in said[0]
    assert options(run / "best") == {"tau": 0.5}  # the pointer file stands for the same checkpoint
    assert options(run, "--tau", "2") == {"tau": 2.0}  # a flag given wins
    assert options(run, "--eps", "0.1") == {"tau": 0.5, "eps": 0.1}  # each setting on its own
    assert options(run, scorer="minl2") == {}  # a scorer that reads no tau takes none


def test_models_trained_at_the_defaults_or_without_the_file_are_scored_as_before(tmp_path, tiny_model_dir):
    assert options(tiny_model_dir) == {}  # no document_model.json
    assert options("aspire-minilm", scorer="hybrid") == {}  # the shipped model records ot_tau 1, ot_eps 0.05
    assert options(make_run(tmp_path / "plain", tiny_model_dir)) == {}  # kind ot at the defaults


def test_attention_and_the_shared_tau_of_fused_scorers(tmp_path, tiny_model_dir):
    att = make_run(tmp_path / "att", tiny_model_dir, kind="att", ot_tau=1.0, att_tau=0.25)
    assert options(att, scorer="attention") == {"tau": 0.25}
    assert options(att, scorer="ot") == {}  # its att_tau is no OT setting
    # reviewers fuse scorers that share --tau: the trained attention tau would move the OT scorer's too
    assert trained_defaults(att, ["attention", "ot"], {}) == {}
    assert trained_defaults(att, ["attention", "minl2"], {}) == {"tau": 0.25}


def test_a_damaged_setting_is_named(tmp_path, tiny_model_dir):
    bad = make_run(tmp_path / "bad", tiny_model_dir, ot_tau="half")
    with pytest.raises(ValueError, match=r"document_model.json: model.ot_tau must be a finite number > 0"):
        options(bad)


def test_the_index_build_saves_the_trained_settings_as_its_search_defaults(run, tmp_path):
    from aspire.search import Searcher
    from tests.test_reliability_round33_indexbuild import write_corpus

    corpus = write_corpus(tmp_path / "papers.jsonl", 4)
    build = ["build", "--model", str(run), "--corpus", str(corpus), "index.kind=flat", "--quiet"]
    assert index_main([*build, "--out", str(tmp_path / "a")]) == 0
    searcher = Searcher.open(tmp_path / "a", ["rerank=ot"])  # `aspire search --rerank ot`, the page
    assert (searcher.config.ot_tau, searcher.config.ot_eps) == (0.5, 0.05)  # was 1.0
    assert searcher.scorer("ot", searcher.config).tau == 0.5
    assert index_main([*build, "--out", str(tmp_path / "b"), "search.ot_tau=2"]) == 0  # a key given wins
    assert Searcher.open(tmp_path / "b").config.ot_tau == 2.0


def test_the_tables_agree_with_training_and_the_scorers():
    from aspire.scoring import SCORERS

    for kind in KINDS:  # the scorer whose settings a kind records: those it reads in training
        recorded = SCORER_SETTINGS.get(TRAINED_SCORER.get(kind), {})
        assert set(recorded) == set(kind_reads(kind)) & {"ot_tau", "ot_eps", "att_tau"}, kind
    defaults = {f: getattr(ModelConfig(), f) for f in ("ot_tau", "ot_eps", "att_tau")}
    for scorer, settings in SCORER_SETTINGS.items():
        signature = inspect.signature(SCORERS[scorer])
        for key, (keyword, default) in settings.items():
            assert signature.parameters[keyword].default == default == defaults[key]
    assert KEYWORD_READERS == {flag[2:]: readers for flag, readers in SCORER_OPTION_READERS.items() if flag != "--window"}


def test_the_results_record_the_trained_settings_the_run_scored_with(run, small_csfcube, tmp_path):
    from aspire.cli.evaluate import main

    out = tmp_path / "out"
    assert main(["csfcube", "--data", str(small_csfcube), "--model", str(run), "--scorer", "ot", "--no-cache",
                 "--out", str(out), "--quiet"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["scorer_options"] == {"tau": 0.5}  # was {}, scored at tau 1
    assert results["experiment"] == "run-contextual-ot-tau0.5"  # a run of its own, not the tau-1 run's name


def test_ensemble_members_and_search_pipelines_take_them_too(run, tmp_path):
    from aspire.evaluate.ensemble import load_ensemble
    from aspire.evaluate.search_run import pipeline_config

    config = tmp_path / "ensemble.yaml"
    config.write_text(f"members:\n  - {{name: ot, model: {run}, scorer: ot}}\n"
                      f"  - {{name: given, model: {run}, scorer: ot, scorer_options: {{tau: 2.0}}}}\n")
    assert [m.scorer_options for m in load_ensemble(config).members] == [{"tau": 0.5}, {"tau": 2.0}]
    assert pipeline_config(["rerank=ot"], model=str(run)).ot_tau == 0.5  # `--search-pipeline rerank=ot`
    assert pipeline_config(["rerank=ot", "ot_tau=3"], model=str(run)).ot_tau == 3.0
