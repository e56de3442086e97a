"""Round 69: a task without `sources` takes the sources it can read (`aspire.train.config.default_sources`): `acl` for
an `author` or `distill` task, whose shared default `cocite` was refused when the config loaded, so `sources: [acl]`
had to be written out; `cocite`, as before, for every other task. A `sources` given is checked as before, and the
resolved list, never None, is what a saved config records and what the run's checks read."""

from __future__ import annotations

import pytest
import yaml

from aspire.config import ConfigError, apply_overrides, load_config, save_config
from aspire.train.config import TASK_SOURCES, Config, TaskConfig, check_inputs, default_sources

TEACHER = ", teacher_dir: runs/teacher"


def _load(*overrides: str) -> Config:
    return load_config(Config, None, ["loss.kind=mnrl", *overrides])


@pytest.mark.parametrize("name, extra", [("author", ""), ("distill", TEACHER)])
def test_an_acl_only_task_without_sources_loads_with_acl(name, extra):
    cfg = _load(f"tasks=[{{name: {name}, benchmarks_dir: null{extra}}}]")
    assert cfg.tasks[0].sources == ["acl"]
    assert TaskConfig(name=name, teacher_dir="t" if extra else None).sources == ["acl"]
    assert default_sources(name) == list(TASK_SOURCES[name])  # the one rule: what the task can read


def test_an_author_task_given_cocite_is_still_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"author task: unknown source\(s\) \['cocite'\] in tasks\[\]\.sources="
                                          r"\['cocite'\]; valid: \['acl'\]"):
        _load("tasks=[{name: author, sources: [cocite], benchmarks_dir: null}]")
    with pytest.raises(ConfigError, match=r"distill task: unknown source\(s\) \['cocite'\]"):
        _load(f"tasks=[{{name: distill, sources: [acl, cocite]{TEACHER}}}]")
    with pytest.raises(ConfigError, match=r"tasks\[0\]\.sources: expected a list, got None"):  # null is no default
        _load("tasks=[{name: author, sources: null}]")


def test_an_author_task_without_sources_reads_max_papers_of_its_acl_source():
    """`max_papers` was refused beside the default sources ("for the acl source only")."""
    assert _load("tasks=[{name: author, max_papers: 5, benchmarks_dir: null}]").tasks[0].max_papers == 5


@pytest.mark.parametrize("name", ["cocite", "context2doc", "crop", "title"])
def test_the_other_tasks_keep_cocite_as_their_default(name):
    assert _load(f"tasks=[{{name: {name}}}]").tasks[0].sources == ["cocite"] == TaskConfig(name=name).sources
    assert _load(f"tasks=[{{name: {name}, sources: [cocite]}}]").tasks[0].sources == ["cocite"]


def test_a_task_reading_no_source_still_refuses_another():
    with pytest.raises(ConfigError, match=r"tasks\[\]: a cocite task does not read sources"):
        TaskConfig(name="cocite", sources=["acl"])
    with pytest.raises(ConfigError, match=r"a context2doc task does not read sources"):
        _load("tasks=[{name: context2doc, sources: [acl]}]")


def test_a_saved_config_records_the_resolved_sources_and_loads_back_the_same(tmp_path):
    cfg = _load(f"tasks=[{{name: author, benchmarks_dir: null}}, {{name: distill{TEACHER}}}, {{name: crop}}]")
    save_config(cfg, tmp_path / "config.yaml")
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert [t["sources"] for t in saved["tasks"]] == [["acl"], ["acl"], ["cocite"]]
    assert load_config(Config, tmp_path / "config.yaml") == cfg
    assert apply_overrides(cfg, ["train.seed=3"]).tasks == cfg.tasks


def test_the_input_check_reads_the_default_acl_source_of_an_author_task(tmp_path):
    """An author task alone reads the ACL file, not the co-citation examples (neither exists here)."""
    cfg = _load(f"tasks=[{{name: author, benchmarks_dir: null, acl_path: {tmp_path / 'none.jsonl'}}}]",
                f"data.examples_dir={tmp_path / 'none'}")
    with pytest.raises(OSError, match=r"tasks\[0\]\.acl_path"):
        check_inputs(cfg)
