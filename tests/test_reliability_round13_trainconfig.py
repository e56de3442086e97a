"""Round 13, training config, checkpoints and export: every setting reaches what claims to read it, a resumed run
continues the uninterrupted one, and an export loads back as the model it was made from."""

from __future__ import annotations

import json
import logging
import re

import pytest
import torch
from test_formats import PAPERS, perturb_adapters
from test_train import read_metrics, tiny_config
from torch import nn

from aspire.config import ConfigError, load_config
from aspire.train.config import KINDS, AbstractConfig, AdapterConfig, Config, LossConfig, ModelConfig, TaskConfig
from aspire.train.document_model import DocumentModel
from aspire.train.trainer import build_model, run

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
# a value other than the default for each scorer setting
CHANGED = {"ot_eps": 0.3, "ot_tau": 2.0, "ot_tol": 1e-3, "ot_max_iter": 17, "ot_grad": "autograd", "att_tau": 3.0}


# ---- settings read by nothing --------------------------------------------------------------------------
def test_teacher_scale_without_a_distill_task_is_refused_naming_it():
    """It scales a distill task's soft targets alone: with no distill task it was accepted and never read."""
    with pytest.raises(ConfigError, match=r"loss\.teacher_scale=5\.0 without a distill task"):
        Config(loss=LossConfig(kind="mnrl", teacher_scale=5.0))
    with pytest.raises(ConfigError, match=r"loss\.teacher_scale"):
        load_config(Config, None, ["loss.kind=mnrl", "loss.teacher_scale=5.0", "tasks=[{name: cocite}]"])
    distill = TaskConfig(name="distill", sources=["acl"], teacher_dir="teacher")
    assert Config(loss=LossConfig(kind="mnrl", teacher_scale=5.0), tasks=[distill]).loss.teacher_scale == 5.0
    assert Config(loss=LossConfig(kind="mnrl", teacher_scale=20.0)).loss.teacher_scale == 20.0  # the default: fine


def test_abstract_section_with_another_kind_is_refused_naming_it():
    """Only kind `abstract` encodes a paper as one text: its joiner / normalize were accepted for every kind."""
    with pytest.raises(ConfigError, match=r"abstract\.joiner, abstract\.normalize with model\.kind=ts"):
        Config(abstract=AbstractConfig(joiner=". ", normalize=False))
    with pytest.raises(ConfigError, match=r"abstract\.normalize with model\.kind=hybrid"):
        load_config(Config, None, ["model.kind=hybrid", "abstract.normalize=false"])
    assert load_config(Config, None, ["model.kind=abstract", "abstract.normalize=false"]).abstract.normalize is False


def test_ia3_adapter_refuses_lora_settings():
    """peft's IA3 has no rank, scale or dropout: `r`, `alpha`, `dropout` were accepted and never read."""
    for key, value in (("r", 4), ("alpha", 8.0), ("dropout", 0.1)):
        with pytest.raises(ConfigError, match=rf"kind ia3 does not read {key}\b"):
            AdapterConfig(kind="ia3", **{key: value})
        assert getattr(AdapterConfig(kind="lora", **{key: value}), key) == value
    assert AdapterConfig(kind="ia3", target_modules=["query"], per_task=True).per_task


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_scorer_settings_reach_the_model_exactly_for_the_kinds_that_read_them(kind):
    """Each `ot_*` / `att_tau` setting changes the scorers a kind's DocumentModel builds where `kind_reads` says the
    kind reads it, and is refused naming it where not (kind `hybrid` got `ot_tau`/`ot_eps` into an OT term that
    training never weights, and `ts` / `max` / ... took every one silently)."""
    from aspire.train.config import SCORER_KEYS, kind_reads

    def scorers(**changed) -> str:
        return repr(DocumentModel(nn.Identity(), ModelConfig(kind=kind, **changed))._scorers)

    plain = scorers()
    for key in [k for keys in SCORER_KEYS.values() for k in keys]:
        if key in kind_reads(kind):
            assert scorers(**{key: CHANGED[key]}) != plain, (kind, key)
        else:
            with pytest.raises(ConfigError, match=rf"model\.{key}=.*not read by model\.kind {re.escape(kind)}"):
                ModelConfig(kind=kind, **{key: CHANGED[key]})
        assert scorers(**{key: ModelConfig().__getattribute__(key)}) == plain, (kind, key)  # the default: fine


def test_kind_reads_names_the_kinds_whose_terms_or_scorer_hold_the_setting():
    from aspire.train.config import kind_reads

    assert {k for k in KINDS if "ot_eps" in kind_reads(k)} == {"ot", "ts+ot"}
    assert {k for k in KINDS if "att_tau" in kind_reads(k)} == {"att"}


def test_every_training_config_loads_without_a_refusal_or_an_unread_setting(caplog):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "configs"
    loaded = []
    with caplog.at_level(logging.INFO, logger="aspire.train.config"):
        for path in sorted(root.glob("*.yaml")):
            try:
                loaded.append(load_config(Config, path))
            except ConfigError as err:  # the other configs (index, data, ensembles) are not training configs
                assert "unknown config key" in str(err), (path, err)
    assert len(loaded) >= 30
    assert [r.getMessage() for r in caplog.records] == []


# ---- resume ----------------------------------------------------------------------------------------------
def test_resume_mid_run_continues_the_uninterrupted_run(tiny_model_dir, examples_dir, tmp_path):
    """Stopped between evaluations with gradient accumulation and dropout: the resumed run logs the same records,
    ends in the same weights, names the same best checkpoint and keeps the same checkpoints (keep_checkpoints=1:
    the newest plus `best`)."""
    overrides = ["model.kind=ts", "train.grad_accum=2", "train.max_steps=7", "train.eval_every=2",
                 "train.save_every=0", "train.keep_checkpoints=1"]
    straight = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "a", *overrides))
    part = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", *overrides, "train.stop_after=3"))
    assert part["step"] == 3
    resumed = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", *overrides), resume=True)
    assert resumed["weights_digest"] == straight["weights_digest"]
    assert resumed["best_dev_loss"] == straight["best_dev_loss"]

    def records(run_dir):
        return [{k: v for k, v in r.items() if k != "triples_per_s"} for r in read_metrics(run_dir)]

    assert records(tmp_path / "b") == records(tmp_path / "a")
    best = json.loads((tmp_path / "a" / "best").read_text())
    assert json.loads((tmp_path / "b" / "best").read_text()) == best
    kept = sorted(p.name for p in (tmp_path / "a").glob("checkpoint-*"))
    assert kept == sorted({best["checkpoint"], "checkpoint-000007"})
    assert sorted(p.name for p in (tmp_path / "b").glob("checkpoint-*")) == kept


# ---- export ----------------------------------------------------------------------------------------------
def test_low_rank_export_of_a_per_task_adapter_model_loads_and_encodes_as_trained(tiny_model_dir, examples_dir,
                                                                                  tmp_path):
    """Its document_model.json kept `per_task: true` beside the one adapter `default` it writes: the export did not
    load ("no adapter for task 'cocite'"). The merged export of the same model encodes as it too."""
    from aspire.train.export import export_low_rank, export_merged

    model = build_model(tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "model.kind=max",
                                    "model.adapter.kind=lora", "model.adapter.per_task=true"))
    perturb_adapters(model.encoder)
    model.save_pretrained(tmp_path / "adapted")
    want = model.encode(PAPERS).emb
    export_merged(tmp_path / "adapted", tmp_path / "merged")
    torch.testing.assert_close(DocumentModel.from_pretrained(tmp_path / "merged").encode(PAPERS).emb, want,
                               atol=1e-5, rtol=1e-4)
    out, _, report = export_low_rank(tmp_path / "adapted", tmp_path / "low_rank", str(tiny_model_dir), rank=32)
    meta = json.loads((out / "document_model.json").read_text())["model"]["adapter"]
    assert meta | {"target_modules": None} == {"kind": "lora", "r": report["rank"], "alpha": float(report["rank"]),
                                               "dropout": 0.0, "target_modules": None, "per_task": False,
                                               "scope": "all"}
    loaded = DocumentModel.from_pretrained(out)
    assert loaded.model_cfg.adapter.per_task is False
    torch.testing.assert_close(loaded.encode(PAPERS).emb, want, atol=1e-5, rtol=1e-4)  # rank 32 = full: exact
