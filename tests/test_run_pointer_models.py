"""A training run's pointer file as a model: `--model runs/X/best` (as configs' comments and users write it) was
"unknown model '.../best'"; it stands for the checkpoint the pointer names, `runs/X/latest` for the latest."""

from __future__ import annotations

import json
import shutil

import pytest

from aspire.encoders.pretrained import check_model, checkpoint_record, pinned_model, resolve_model
from aspire.paths import model_folder


@pytest.fixture
def run(tmp_path, tiny_model_dir):
    """A run folder of two checkpoints: `best` names the first, `latest` the second."""
    run = tmp_path / "run"
    for step in (1, 2):
        shutil.copytree(tiny_model_dir, run / f"checkpoint-{step:06d}" / "model")
    (run / "best").write_text(json.dumps({"checkpoint": "checkpoint-000001", "step": 1}))
    (run / "latest").write_text(json.dumps({"checkpoint": "checkpoint-000002", "step": 2}))
    return run


def test_a_runs_pointer_file_stands_for_the_checkpoint_it_names(run):
    first, second = run / "checkpoint-000001" / "model", run / "checkpoint-000002" / "model"
    assert resolve_model(run / "best") == first and resolve_model(str(run / "latest")) == second
    assert resolve_model(run) == first  # the run's folder: its best, as before
    check_model(str(run / "latest"))  # the commands' early check takes it
    assert checkpoint_record(run / "latest") == {"checkpoint": {"path": str(second.absolute()), "pointer": "latest",
                                                                "step": 2}}
    assert pinned_model(str(run / "best")) == str(first.absolute())  # an index records the weights, not the pointer
    assert model_folder(run / "latest") == second  # where document_model.json is read


def test_a_damaged_pointer_file_is_named(run):
    (run / "latest").write_text("{not json")
    with pytest.raises(ValueError, match=r"latest: not a training run's pointer"):
        resolve_model(run / "latest")
    other = run / "notes.txt"
    other.write_text("x")
    with pytest.raises(ValueError, match="unknown model .*RUN/best or RUN/latest"):
        resolve_model(other)  # another file is not a model
