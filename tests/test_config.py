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


def test_training_sections_refuse_a_key_their_kind_does_not_read(tmp_path):
    """The `tasks` and `loss` sections are flat mappings; each task name and loss kind reads its own keys, and a
    key of another kind is refused by name instead of ignored; every shipped training config still loads."""
    from pathlib import Path

    from aspire.train.config import TASK_KEYS, Config

    run = tmp_path / "run.yaml"
    run.write_text("tasks:\n  - {name: crop, span_min: 2, views: 3}\n  - {name: cocite, span_max: 4}\n")
    with pytest.raises(ConfigError, match=r"a cocite task does not read span_max \(it reads no key beside name"):
        load_config(Config, run)
    run.write_text("tasks:\n  - {name: title, sources: [acl], teacher_dir: runs/t}\n")
    with pytest.raises(ConfigError, match="a title task does not read teacher_dir"):
        load_config(Config, run)
    with pytest.raises(ConfigError, match=r"kind mnrl does not read margin, negatives \(it reads scale"):
        load_config(Config, None, ["loss.kind=mnrl", "loss.margin=0.3", "loss.negatives=all"])
    crop = load_config(Config, None, ["loss.kind=mnrl", "loss.scale=30"]).loss
    assert (crop.kind, crop.scale) == ("mnrl", 30.0)
    assert set(TASK_KEYS) == {"cocite", "context2doc", "crop", "title", "author", "distill"}
    loaded = 0
    for path in sorted(Path("configs").glob("*.yaml")):
        try:
            load_config(Config, path)
            loaded += 1
        except ConfigError as err:  # the index, ensemble, negatives and other commands' configs have other sections
            assert "valid keys under the top level" in str(err), f"{path}: {err}"
    assert loaded >= 20
