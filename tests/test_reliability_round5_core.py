"""Round 5, core utilities: config overrides and files, strict JSON of numpy values, cache records."""

from dataclasses import dataclass

import numpy as np
import pytest
from test_config import Cfg as BaseCfg

from aspire.config import ConfigError, load_config
from aspire.jsonsafe import dumps, strict_loads
from aspire.storage import check_record, write_record


@dataclass
class Cfg(BaseCfg):  # test_config's, with an optional text key
    path: str | None = None


def test_an_infinite_integer_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"optim\.steps: expected int, got inf"):
        load_config(Cfg, None, ["optim.steps=.inf"])


@pytest.mark.parametrize("raw, said", [("null", "got null"), ("yes", "got the boolean true"), ("off", "got the boolean false")])
def test_null_or_a_boolean_for_a_string_key_is_an_error_not_its_python_spelling(raw, said):
    with pytest.raises(ConfigError, match=f"name: expected a string, {said}"):
        load_config(Cfg, None, [f"name={raw}"])
    assert load_config(Cfg, None, ["path=null", "name='yes'"]) == Cfg(name="yes")  # optional: null; quoted: text


def test_a_section_mapping_after_a_dotted_override_keeps_that_override():
    cfg = load_config(Cfg, None, ["optim.lr=0.5", "optim={steps: 3}"])
    assert (cfg.optim.lr, cfg.optim.steps) == (0.5, 3)
    assert load_config(Cfg, None, ["optim.lr=0.5", "optim.lr=0.25"]).optim.lr == 0.25  # the later one wins


def test_a_mapping_for_a_single_value_says_it_is_not_a_section(tmp_path):
    (tmp_path / "a.yaml").write_text("optim:\n  lr: 0.001\n")
    with pytest.raises(ConfigError, match=r"optim\.lr: is one value \(float 0\.001\), not a section"):
        load_config(Cfg, tmp_path / "a.yaml", ["optim.lr.x=1"])


@pytest.mark.parametrize("base, said", [("a.yaml", "its base files lead back to it"),
                                        ("b.yaml", "its base files lead back to it"),
                                        ("5", "base: expected the name of a YAML file, got 5"),
                                        ("[x.yaml]", "base: expected the name of a YAML file"),
                                        ("gone.yaml", "base: config file not found")])
def test_a_bad_base_is_a_config_error_naming_the_file(tmp_path, base, said):
    (tmp_path / "a.yaml").write_text(f"base: {base}\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match=said) as err:
        load_config(Cfg, tmp_path / "a.yaml")
    assert str(err.value).startswith(str(tmp_path))


def test_a_quoted_broken_flow_list_is_a_config_error_naming_the_key(tmp_path):
    (tmp_path / "a.yaml").write_text("tags: '[a, b'\n")
    with pytest.raises(ConfigError, match=r"^tags:1:6: "):
        load_config(Cfg, tmp_path / "a.yaml")
    with pytest.raises(ConfigError, match="tags: expected a list, got ''"):
        load_config(Cfg, None, ["tags="])


@pytest.mark.parametrize("text, key", [("1: 2\n", "'1'"), ("optim:\n  7: 2\n", "'optim.7'")])
def test_a_number_as_a_key_is_an_unknown_key(tmp_path, text, key):
    (tmp_path / "a.yaml").write_text(text)
    with pytest.raises(ConfigError, match=f"unknown config key\\(s\\) \\[{key}\\]"):
        load_config(Cfg, tmp_path / "a.yaml")


def test_numpy_scalars_and_arrays_are_strict_json_with_their_non_finite_paths():
    text = dumps({"score": np.float32("nan"), "n": np.int64(3), "ok": np.bool_(True),
                  "hits": [{"s": np.array([1.0, np.inf])}]})
    assert strict_loads(text) == {"score": None, "n": 3, "ok": True, "hits": [{"s": [1.0, None]}],
                                  "non_finite": {"score": "nan", "hits.0.s.1": "inf"}}


def test_a_cache_file_removed_or_replaced_by_a_folder_after_its_record_is_reported(tmp_path):
    path = tmp_path / "c.bin"
    path.write_bytes(b"abc")
    write_record(path)
    path.unlink()
    assert check_record(path) == "it is missing"
    path.mkdir()
    assert check_record(path) == "it is not a file"
