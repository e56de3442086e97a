"""`aspire evaluate ... --rerank MODEL` took any model `check_model` takes: a plain encoder (`minilm`, a document
model's folder or training run) then got a fresh random one-logit head from `load_cross_encoder` and re-ranked the
benchmark by noise, recorded as a cross-encoder's result. `aspire search --cross-encoder` refuses such a model
(`check_trained_cross_encoder`); evaluate now refuses it too, before any data or torch loads, naming --rerank."""

from __future__ import annotations

import time

import pytest

from aspire.cli.evaluate import check_cross_encoder
from aspire.cli.evaluate import main as evaluate_main


@pytest.mark.parametrize("name", ["minilm", "tiny"])
def test_evaluate_refuses_a_plain_encoder_as_its_cross_encoder(name, tiny_model_dir, tmp_path, capsys):
    model = str(tiny_model_dir) if name == "tiny" else name
    start = time.perf_counter()
    status = evaluate_main(["context2doc", "--bm25", "--rerank", model, "--out", str(tmp_path / "out")])
    assert status == 2
    err = capsys.readouterr().err
    assert f"--rerank {model}: cross-encoder" in err and "not a trained cross-encoder" in err, err
    assert "python -m aspire.train.crossencoder" in err
    assert not (tmp_path / "out").exists()
    assert time.perf_counter() - start < 30  # refused before the benchmark or a model loads


def test_a_trained_cross_encoder_passes_the_check(tiny_cross_encoder_dir):
    check_cross_encoder(str(tiny_cross_encoder_dir))  # no error: a one-logit sequence-classification model


def test_a_document_models_training_run_is_refused(tiny_model_dir, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run / "checkpoint-000001" / "model")
    (run / "best").write_text('{"checkpoint": "checkpoint-000001", "step": 1}')
    with pytest.raises(ValueError, match=r"--rerank .*run: cross-encoder .*not a trained cross-encoder"):
        check_cross_encoder(str(run))
