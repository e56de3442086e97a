"""Round 56: config merging. A mapping-typed field (`loss.term_scale: dict[str, float]`) is one value, replaced
whole by a child file or an override (as a list is), never merged into so a base's key survives unasked;
sections (dataclasses) still merge key by key."""

from dataclasses import dataclass, field

import pytest

from aspire.config import ConfigError, apply_overrides, load_config
from tests.test_config import Optim


@dataclass
class Loss:
    kind: str = "mnrl"
    term_scale: dict[str, float] = field(default_factory=dict)
    options: dict | None = None


@dataclass
class Cfg:
    loss: Loss = field(default_factory=Loss)
    optim: Optim = field(default_factory=Optim)
    tags: list[str] = field(default_factory=list)


def _files(tmp_path):
    (tmp_path / "base.yaml").write_text("loss:\n  kind: ts\n  term_scale: {aligned: 5.0, ot: 2.0}\n"
                                        "optim: {lr: 0.1}\ntags: [a, b]\n")
    (tmp_path / "run.yaml").write_text("base: base.yaml\nloss:\n  term_scale: {ot: 3.0}\noptim: {steps: 4}\n")
    return tmp_path / "run.yaml"


def test_a_child_file_replaces_a_mapping_field_but_merges_sections(tmp_path):
    cfg = load_config(Cfg, _files(tmp_path))
    assert cfg.loss.term_scale == {"ot": 3.0}  # the old code kept the base's aligned: 5.0
    assert cfg.loss.kind == "ts" and cfg.optim == Optim(lr=0.1, steps=4) and cfg.tags == ["a", "b"]


def test_an_override_replaces_a_mapping_field_and_can_empty_it(tmp_path):
    run = _files(tmp_path)
    assert load_config(Cfg, run, ["loss.term_scale={aligned: 1}"]).loss.term_scale == {"aligned": 1.0}
    assert load_config(Cfg, run, ["loss.term_scale={}"]).loss.term_scale == {}
    assert load_config(Cfg, run, ["loss.term_scale.aligned=4"]).loss.term_scale == {"aligned": 4.0}
    # given twice on the command line: the later mapping is the value, not a union of both
    assert load_config(Cfg, run, ["loss.term_scale={a: 1}", "loss.term_scale={b: 2}"]).loss.term_scale == {"b": 2.0}
    # an optional mapping field can be cleared with null
    (tmp_path / "opt.yaml").write_text("loss: {options: {tau: 1.0}}\n")
    assert load_config(Cfg, tmp_path / "opt.yaml", ["loss.options=null"]).loss.options is None
    assert load_config(Cfg, tmp_path / "opt.yaml", ["loss.options={x: 2}"]).loss.options == {"x": 2}
    # sections still merge key by key, and a section emptied by null is still refused
    assert load_config(Cfg, run, ["optim={lr: 0.5}"]).optim == Optim(lr=0.5, steps=4)
    with pytest.raises(ConfigError, match="optim: a section with nothing under it"):
        load_config(Cfg, run, ["optim=null"])


def test_apply_overrides_replaces_a_mapping_field():
    cfg = Cfg(loss=Loss(term_scale={"aligned": 5.0, "ot": 2.0}))
    assert apply_overrides(cfg, ["loss.term_scale={ot: 1}"]).loss.term_scale == {"ot": 1.0}
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['loss.nope'\]"):
        apply_overrides(cfg, ["loss.nope=1"])


def test_lists_replace_unknown_keys_are_named_and_a_base_cycle_is_refused(tmp_path):
    run = _files(tmp_path)
    assert load_config(Cfg, run, ["tags=[c]"]).tags == ["c"]
    with pytest.raises(ConfigError, match=r"loss\.term_scal"):
        load_config(Cfg, run, ["loss.term_scal={a: 1}"])
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match="lead back"):
        load_config(Cfg, tmp_path / "a.yaml")


def test_shipped_hybrid_ts_config_term_scale_is_replaced_by_an_override():
    from pathlib import Path

    from aspire.train.config import Config

    path = Path(__file__).resolve().parents[1] / "configs" / "hybrid_ts_distill_t256.yaml"
    assert load_config(Config, path).loss.term_scale == {"aligned": 5.0}
    assert load_config(Config, path, ["loss.term_scale={}"]).loss.term_scale == {}
