"""Hostile run folders and settings for the trainer: a damaged `latest` pointer, trainer state, metrics log or
document_model.json, a deleted best checkpoint, leftovers of an earlier run and an infinite loss.term_scale are each
refused naming the file or key, before any training, instead of a traceback, a silent drop or the wrong model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from aspire.config import ConfigError
from aspire.train import checkpoint as ckpt
from aspire.train.document_model import MODEL_FILE, DocumentModel
from aspire.train.state import METRICS, trim_metrics
from aspire.train.trainer import run
from tests.test_train import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


@pytest.fixture(scope="module")
def finished_run(tiny_model_dir, examples_dir, tmp_path_factory) -> Path:
    """A run stopped at step 4 of 6: checkpoints 3 (best) and 4 (latest)."""
    out = tmp_path_factory.mktemp("runs") / "run"
    run(tiny_config(tiny_model_dir, examples_dir, out, "train.stop_after=4"))
    assert ckpt.read_pointer(out)["step"] == 4 and ckpt.read_pointer(out, ckpt.BEST)["step"] == 3
    return out


@pytest.fixture
def copy_of_run(finished_run, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    return out


def resume(tiny_model_dir, examples_dir, out: Path) -> dict:
    return run(tiny_config(tiny_model_dir, examples_dir, out), resume=True)


# ---- the `latest` pointer ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ['{"checkpoint": "checkp', "[]", '{"step": 4}', '{"checkpoint": "checkpoint-000004"}',
                                  '{"checkpoint": "checkpoint-000004", "step": 3}',
                                  '{"checkpoint": "../elsewhere/checkpoint-000004", "step": 4}'])
def test_a_damaged_latest_pointer_is_named_not_a_traceback(copy_of_run, tiny_model_dir, examples_dir, text):
    # it was a TypeError / KeyError traceback, or "invalid JSON: ..." naming no file; a step that disagrees with
    # the checkpoint's name trimmed the metrics to the wrong step
    (copy_of_run / ckpt.LATEST).write_text(text)
    with pytest.raises(ValueError, match=r"run/latest: damaged `latest` pointer"):
        resume(tiny_model_dir, examples_dir, copy_of_run)


# ---- the trainer state -------------------------------------------------------------------------------------
def test_a_truncated_trainer_state_is_named(copy_of_run, tiny_model_dir, examples_dir):
    state = copy_of_run / "checkpoint-000004" / ckpt.STATE_FILE
    state.write_bytes(state.read_bytes()[:1000])
    metrics = (copy_of_run / METRICS).read_text()
    with pytest.raises(ValueError, match=r"checkpoint-000004/trainer_state\.pt: damaged trainer state"):
        resume(tiny_model_dir, examples_dir, copy_of_run)
    assert (copy_of_run / METRICS).read_text() == metrics  # refused before the folder is changed


def test_a_trainer_state_without_its_keys_is_named(copy_of_run, tiny_model_dir, examples_dir):
    torch.save({"step": 4}, copy_of_run / "checkpoint-000004" / ckpt.STATE_FILE)  # was "error: world_size"
    with pytest.raises(ValueError, match=r"trainer_state\.pt: not a whole trainer state \(no optimizer, scheduler"):
        resume(tiny_model_dir, examples_dir, copy_of_run)


# ---- the metrics log ---------------------------------------------------------------------------------------
def test_a_bad_line_inside_the_metrics_log_is_named_not_dropped(tmp_path):
    lines = ['{"step": 1, "loss": 1.0}', '{"step": 2, "loss"', '{"step": 3, "loss": 0.5}']
    (tmp_path / METRICS).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"metrics\.jsonl, line 2: not a metrics record"):
        trim_metrics(tmp_path, 3)  # it was dropped silently, with the metrics of step 2
    assert (tmp_path / METRICS).read_text().splitlines() == lines
    (tmp_path / METRICS).write_text('{"step": 1}\n[1, 2]\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"line 2: not a metrics record"):  # was an AttributeError traceback
        trim_metrics(tmp_path, 3)


def test_a_torn_last_line_of_the_metrics_log_is_still_dropped(tmp_path, caplog):
    (tmp_path / METRICS).write_text('{"step": 1, "loss": 1.0}\n\n{"step": 2, "loss": 0.5}\n{"step": 3, "lo')
    trim_metrics(tmp_path, 2)
    assert (tmp_path / METRICS).read_text() == '{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n'
    assert "dropping its torn last line 4" in caplog.text


# ---- the best checkpoint and leftovers ---------------------------------------------------------------------
def test_a_deleted_best_checkpoint_is_refused_before_training(copy_of_run, tiny_model_dir, examples_dir):
    # it trained to the end, wrote checkpoint 6, then failed at its first prune, leaving no end record
    shutil.rmtree(copy_of_run / "checkpoint-000003")
    with pytest.raises(FileNotFoundError, match=r"run/best points at checkpoint-000003, which has no trainer_state"):
        resume(tiny_model_dir, examples_dir, copy_of_run)
    assert ckpt.read_pointer(copy_of_run)["step"] == 4 and not (copy_of_run / "checkpoint-000006").exists()


def test_a_fresh_run_refuses_checkpoints_of_an_earlier_run_without_latest(copy_of_run, tiny_model_dir, examples_dir):
    # with `latest` deleted, a fresh run trained beside them and `best` went on naming the earlier run's model
    (copy_of_run / ckpt.LATEST).unlink()
    with pytest.raises(FileExistsError, match=r"holds checkpoint-000003, checkpoint-000004, best of an earlier run"):
        run(tiny_config(tiny_model_dir, examples_dir, copy_of_run))
    assert ckpt.read_pointer(copy_of_run, ckpt.BEST)["step"] == 3


# ---- document_model.json -----------------------------------------------------------------------------------
def edit_meta(model_dir: Path, change) -> None:
    meta = json.loads((model_dir / MODEL_FILE).read_text())
    change(meta)
    (model_dir / MODEL_FILE).write_text(json.dumps(meta))


@pytest.mark.parametrize("change, error", [
    (lambda m: m.clear() or m.update(kind="ts"), r"damaged, no `model` section"),
    (lambda m: m.update(kind="ot"), r"kind 'ot' disagree\(s\) with its model.kind 'ts'"),  # loaded as ts, silently
    (lambda m: m.update(inference_scorer="ot"), r"inference_scorer 'ot' disagree"),
    (lambda m: m.update(tasks="cocite"), r"`tasks` must be a non-empty list"),  # was split into letters
    (lambda m: m.update(tasks=[]), r"`tasks` must be a non-empty list"),
    (lambda m: m.update(abstract={"joiner": " ", "pool": "max"}), r"in `abstract`: unknown config key"),  # TypeError
    (lambda m: m.update(abstract=[1]), r"`abstract` must be a JSON object"),
    (lambda m: m["model"].update(ot_eps=-1.0), r"document_model\.json: in `model`: .*ot_eps"),  # unread by ts, too
])
def test_a_damaged_document_model_json_is_named(finished_run, tmp_path, change, error):
    model_dir = tmp_path / "model"
    shutil.copytree(finished_run / "checkpoint-000004" / ckpt.MODEL_DIR, model_dir)
    edit_meta(model_dir, change)
    with pytest.raises(ValueError, match=error) as err:
        DocumentModel.from_pretrained(model_dir)
    assert str(model_dir / MODEL_FILE) in str(err.value)


def test_a_document_model_json_that_is_not_json_is_named(finished_run, tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(finished_run / "checkpoint-000004" / ckpt.MODEL_DIR, model_dir)
    (model_dir / MODEL_FILE).write_text('{"kind": "ts", "mod')
    with pytest.raises(ValueError, match=r"model/document_model\.json: damaged, not JSON"):
        DocumentModel.from_pretrained(model_dir)


def test_a_damaged_scorers_file_is_named(finished_run, tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(finished_run / "checkpoint-000004" / ckpt.MODEL_DIR, model_dir)
    (model_dir / "scorers.pt").write_bytes(b"not torch")
    with pytest.raises(ValueError, match=r"model/scorers\.pt: not the scorers' weights"):
        DocumentModel.from_pretrained(model_dir)


def test_resume_refuses_a_checkpoint_model_of_another_kind(copy_of_run, tiny_model_dir, examples_dir):
    # config.yaml says ts, the model's document_model.json says max: it resumed training a max model, silently
    edit_meta(copy_of_run / "checkpoint-000004" / ckpt.MODEL_DIR,
              lambda m: m.update(kind="max", model={**m["model"], "kind": "max"}))
    with pytest.raises(ValueError, match=r"a kind 'max' model, but the run's config .* says model.kind='ts'"):
        resume(tiny_model_dir, examples_dir, copy_of_run)


# ---- loss.term_scale ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_a_non_finite_term_scale_is_refused_when_the_config_loads(tiny_model_dir, examples_dir, tmp_path, value):
    # inf passed the `> 0` check and failed only once the data and model were loaded
    with pytest.raises(ConfigError, match=r"loss\.term_scale\.aligned must be a finite number > 0"):
        tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=hybrid+ts", "loss.kind=mnrl",
                    f"loss.term_scale={{aligned: {value}}}")
