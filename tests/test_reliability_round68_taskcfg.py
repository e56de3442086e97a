"""Round 68: task settings that could never make a task's pairs are refused when the training config loads
(`aspire.train.config.task_problem` / `tasks_problem`), naming the key; each was found only once the model had loaded
and the data been read (an author task on the default `sources: [cocite]`: 28 s; a distill task under
`loss.kind: multi_similarity`: 23 s with minilm)."""

from __future__ import annotations

import pytest

from aspire.config import ConfigError, load_config
from aspire.train import config as train_config
from aspire.train.config import Config, LossConfig, TaskConfig
from aspire.train.tasks import build_tasks

DISTILL = "name: distill, sources: [acl], teacher_dir: runs/teacher, benchmarks_dir: null"


def _load(*overrides: str) -> Config:
    return load_config(Config, None, ["loss.kind=mnrl", *overrides])


@pytest.mark.parametrize("name", ["author", "distill"])
def test_a_task_reading_acl_alone_refuses_a_cocite_source_when_the_config_loads(name):
    """Given: since round 69 a task without `sources` takes its own default, `acl` here (that round's tests)."""
    extra = ", teacher_dir: runs/teacher" if name == "distill" else ""
    with pytest.raises(ConfigError, match=rf"{name} task: unknown source\(s\) \['cocite'\] in tasks\[\]\.sources=\['cocite'\]; "
                                          r"valid: \['acl'\]"):
        _load(f"tasks=[{{name: {name}, sources: [cocite], benchmarks_dir: null{extra}}}]")
    assert _load(f"tasks=[{{name: {name}, sources: [acl], benchmarks_dir: null{extra}}}]").tasks[0].sources == ["acl"]
    assert train_config.TASK_SOURCES[name] == ("acl",)  # the one list, which aspire.train.tasks reads


def test_an_empty_or_unknown_source_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"crop task: tasks\[\]\.sources is empty; valid: \['acl', 'cocite'\]"):
        TaskConfig(name="crop", sources=[])
    with pytest.raises(ConfigError, match=r"title task: unknown source\(s\) \['s2orc'\] in tasks\[\]\.sources"):
        TaskConfig(name="title", sources=["cocite", "s2orc"])
    assert TaskConfig(name="title", sources=["cocite", "acl"]).sources == ["cocite", "acl"]


@pytest.mark.parametrize("loss", [["loss.kind=multi_similarity"], ["loss.kind=triplet"], ["loss.symmetric=true"]])
def test_a_distill_task_under_a_loss_other_than_plain_mnrl_is_refused_when_the_config_loads(loss):
    with pytest.raises(ConfigError, match=r"distill task: needs loss\.kind mnrl without symmetric, got "
                                          r".*set loss\.kind=mnrl and loss\.symmetric=false"):
        _load(f"tasks=[{{{DISTILL}}}]", *loss)
    assert _load(f"tasks=[{{{DISTILL}}}]").loss.kind == "mnrl"


def test_distill_views_neighbours_and_teacher_are_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match=r"distill task: views=4 > neighbours=3: .*lower tasks\[\]\.views or raise "
                                          r"tasks\[\]\.neighbours"):
        _load(f"tasks=[{{{DISTILL}, views: 4, neighbours: 3}}]")
    assert _load(f"tasks=[{{{DISTILL}, views: 3, neighbours: 3}}]").tasks[0].views == 3  # every neighbour, once
    with pytest.raises(ConfigError, match=r"near_negatives needs neighbours >= 2 .*got neighbours=1; raise "
                                          r"tasks\[\]\.neighbours"):
        TaskConfig(name="distill", sources=["acl"], teacher_dir="t", neighbours=1, near_negatives=True)
    with pytest.raises(ConfigError, match=r"distill task: tasks\[\]\.teacher_dir is required"):
        _load("tasks=[{name: distill, sources: [acl], benchmarks_dir: null}]")


def test_a_crop_span_max_below_span_min_is_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match=r"crop task: span_max 2 < span_min 3; raise tasks\[\]\.span_max"):
        _load("tasks=[{name: crop, span_min: 3, span_max: 2, benchmarks_dir: null}]")
    assert TaskConfig(name="crop", span_min=3, span_max=3).span_max == 3


def test_a_task_named_twice_is_refused_by_the_config():
    with pytest.raises(ConfigError, match=r"tasks: each task may appear once, got \['cocite', 'crop', 'cocite'\]"):
        Config(tasks=[TaskConfig(), TaskConfig(name="crop"), TaskConfig()])


def test_build_tasks_refuses_a_task_changed_after_loading_naming_its_index_before_reading_data(tmp_path):
    """The rules stay one: `build_tasks` asks `tasks_problem` too, before any file is read (none exists here)."""
    cfg = Config(loss=LossConfig(kind="mnrl"), tasks=[TaskConfig(), TaskConfig(
        name="distill", sources=["acl"], teacher_dir=str(tmp_path / "none"), acl_path=str(tmp_path / "none.jsonl"))])
    cfg.tasks[1].views = 11
    with pytest.raises(ValueError, match=r"tasks\[1\]: distill task: views=11 > neighbours=10"):
        build_tasks(cfg, "train")
    cfg.tasks[1].views, cfg.tasks[1].sources = 1, ["cocite"]
    with pytest.raises(ValueError, match=r"tasks\[1\]: distill task: unknown source\(s\) \['cocite'\]"):
        build_tasks(cfg, "train")
