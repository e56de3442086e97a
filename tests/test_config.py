"""Nested-dataclass configs: YAML with a base file, dotted overrides, unknown keys refused."""

from dataclasses import dataclass, field

import pytest

from aspire.config import ConfigError, apply_overrides, load_config, save_config


@dataclass
class Optim:
    lr: float = 1e-3
    steps: int = 10


@dataclass
class Cfg:
    name: str = "x"
    optim: Optim = field(default_factory=Optim)
    tags: list[str] = field(default_factory=list)
    flag: bool = False


def test_base_file_then_overrides(tmp_path):
    (tmp_path / "base.yaml").write_text("name: base\noptim:\n  lr: 0.1\n")
    (tmp_path / "run.yaml").write_text("base: base.yaml\noptim:\n  steps: 5\n")
    cfg = load_config(Cfg, tmp_path / "run.yaml", ["--optim.lr=0.5", "flag=true", "tags=[a, b]"])
    assert cfg == Cfg(name="base", optim=Optim(lr=0.5, steps=5), tags=["a", "b"], flag=True)
    save_config(cfg, tmp_path / "out" / "config.yaml")
    assert load_config(Cfg, tmp_path / "out" / "config.yaml") == cfg


def test_unknown_keys_and_wrong_types_are_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"optim\.lrr"):
        load_config(Cfg, None, ["optim.lrr=1"])
    with pytest.raises(ConfigError, match="expected int"):
        load_config(Cfg, None, ["optim.steps=many"])
    with pytest.raises(ConfigError, match="expected an integer"):
        load_config(Cfg, None, ["optim.steps=1.5"])
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(Cfg, None, ["optim.steps"])


def test_apply_overrides_to_a_loaded_config():
    cfg = apply_overrides(Cfg(), ["optim.steps=3"])
    assert cfg.optim.steps == 3 and Cfg().optim.steps == 10
    with pytest.raises(ConfigError, match="unknown"):
        apply_overrides(cfg, ["nope=1"])
