"""Round 69, a review of round 68: training's input check before the model loads (`aspire.train.config.check_inputs`)
read a data folder left by a stage stopped before it finished (its `.stage-started` marker, no report) as a missing
file: `No such file or directory (data.examples_dir): .../examples.train.jsonl`, a file the stopped stage never wrote.
The reader's own diagnosis (`aspire.train.data.load_split`: the stage, stopped, to rerun), which training gave before
round 68 (after the model had loaded), could no longer be reached. It is given first now, by the one check both use
(`aspire.data.cocite.stages.check_finished`)."""

from __future__ import annotations

import shutil

import pytest

from aspire.data.cocite.stages import STAGE_MARKER
from tests.test_reliability_round46_trainproc import _no_model
from tests.test_reliability_round66_trainerr import train


def _stopped(folder, stage: str, *keep: str, source=None) -> None:
    """`folder` as `stage` leaves it when stopped: its marker, the files in `keep` (copied from `source`), no report."""
    folder.mkdir(parents=True)
    (folder / STAGE_MARKER).write_text(f"{stage}\n")
    for name in keep:
        shutil.copy(source / name, folder / name)


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


def test_an_examples_folder_of_a_stopped_stage_is_named_as_one_before_a_model_loads(examples_dir, tmp_path,
                                                                                     monkeypatch, capsys):
    _no_model(monkeypatch)  # a model loaded fails the test
    stopped = tmp_path / "5_examples"
    _stopped(stopped, "examples", "abstracts.jsonl", source=examples_dir)  # stopped before examples.train.jsonl
    assert train(stopped, tmp_path / "run") == 2
    err = _error(capsys)
    assert f"data.examples_dir: {stopped} holds the output of stage 'examples' stopped before it finished" in err
    assert "examples.train.jsonl" not in err  # not a file it was never to have yet


def test_a_hard_negatives_file_of_a_stopped_stage_is_named_as_one_before_a_model_loads(examples_dir, tmp_path,
                                                                                       monkeypatch, capsys):
    _no_model(monkeypatch)
    stopped = tmp_path / "hard"
    _stopped(stopped, "hard-negatives")  # stopped before hard_negatives.jsonl was written
    assert train(examples_dir, tmp_path / "run", f"data.hard_negatives={stopped / 'hard_negatives.jsonl'}") == 2
    assert f"data.hard_negatives: {stopped} holds the output of stage 'hard-negatives' stopped before it finished" \
        in _error(capsys)


def test_a_finished_folder_and_a_missing_one_read_as_before(examples_dir, tmp_path, monkeypatch, capsys):
    _no_model(monkeypatch)
    with pytest.raises(AssertionError, match="a model was loaded"):  # no marker: the check passes it
        train(examples_dir, tmp_path / "run")
    assert train(tmp_path / "missing", tmp_path / "run2") == 2
    err = _error(capsys)
    assert "(data.examples_dir)" in err and str(tmp_path / "missing") in err and "stopped" not in err
