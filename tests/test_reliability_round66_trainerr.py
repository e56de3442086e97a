"""Round 66: `python -m aspire.train` on a broken config. A missing input path or an `out_dir` that is a file is
reported naming its setting before a model loads or any data is read (`aspire.train.trainer.run`,
`aspire.train.config.check_inputs`; a missing ACL file or teacher folder was found after minutes), and a
`loss.term_scale` term the kind lacks when the config loads (once only as the model was built)."""

import pytest

from aspire.config import ConfigError, load_config
from aspire.train.__main__ import main
from aspire.train.config import Config
from tests.test_reliability_round46_trainproc import _no_model
from tests.test_train import REPO

CONFIG = str(REPO / "configs" / "ts_aspire.yaml")


def train(examples, out, *overrides):
    return main(["--config", CONFIG, f"data.examples_dir={examples}", f"train.out_dir={out}", "-q", *overrides])


TEACHER_TASK = "tasks=[{name: distill, sources: [acl], acl_path: ACL, benchmarks_dir: null, teacher_dir: T}]"


@pytest.mark.parametrize("broken, setting", [
    ("data.examples_dir=MISSING", "data.examples_dir"),
    ("data.examples_dir=EMPTY", "data.examples_dir"),  # a folder without abstracts.jsonl
    ("data.examples_dir=FILE", "data.examples_dir"),
    ("data.hard_negatives=MISSING", "data.hard_negatives"),
    ("train.out_dir=FILE", "train.out_dir"),
    ("train.out_dir=FILE/run", "train.out_dir"),
    ("tasks=[{name: cocite}, {name: context2doc, data_dir: MISSING, benchmarks_dir: null}]", "tasks[1].data_dir"),
    ("tasks=[{name: crop, sources: [acl], acl_path: MISSING, benchmarks_dir: null}]", "tasks[0].acl_path"),
    ("tasks=[{name: title, sources: [cocite], benchmarks_dir: MISSING}]", "tasks[0].benchmarks_dir"),
    (TEACHER_TASK.replace("teacher_dir: T", "teacher_dir: MISSING"), "tasks[0].teacher_dir"),
])
def test_a_broken_path_is_named_before_a_model_loads(broken, setting, examples_dir, tmp_path, monkeypatch, capsys):
    _no_model(monkeypatch)  # a model loaded (the data is read after it) fails the test
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "acl.jsonl").write_text("{}\n")
    paths = {"MISSING": tmp_path / "missing", "EMPTY": tmp_path / "empty", "FILE": tmp_path / "file",
             "ACL": tmp_path / "acl.jsonl", "T": tmp_path / "empty"}
    for name, path in paths.items():
        broken = broken.replace(name, str(path))
    overrides = [broken, "loss.kind=mnrl"] if broken.startswith("tasks=") else [broken]
    assert train(examples_dir, tmp_path / "run", *overrides) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and (f"({setting})" in err or f" {setting} " in err)
    assert str(tmp_path) in err


def test_a_run_with_its_inputs_there_goes_on_to_load_its_model(examples_dir, tmp_path, monkeypatch):
    _no_model(monkeypatch)
    with pytest.raises(AssertionError, match="a model was loaded"):
        train(examples_dir, tmp_path / "run")
    (tmp_path / "acl.jsonl").write_text("{}\n")
    (tmp_path / "teacher").mkdir()
    # a task reading only the ACL file leaves data.examples_dir unread: a missing one is no error
    task = TEACHER_TASK.replace("ACL", str(tmp_path / "acl.jsonl")).replace("T}", f"{tmp_path / 'teacher'}}}")
    with pytest.raises(AssertionError, match="a model was loaded"):
        train(tmp_path / "missing", tmp_path / "run2", task, "loss.kind=mnrl")


def test_term_scale_of_a_term_the_kind_lacks_is_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match=r"loss.term_scale names \['bogus'\], not terms of kind 'ts' \['aligned'\]"):
        load_config(Config, CONFIG, ["loss.kind=mnrl", "loss.term_scale={bogus: 2}"])
    cfg = load_config(Config, CONFIG, ["loss.kind=mnrl", "loss.term_scale={aligned: 2}"])
    assert cfg.loss.term_scale == {"aligned": 2.0}
