"""Round 6 on the training tools: exported, interpolated and souped models and teacher vectors replace an earlier
output whole (or leave it as it was) and never the model they read; their JSON files are named when unreadable; a
sequential mix refuses the ratios it would ignore."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aspire.train.document_model import MODEL_FILE
from aspire.train.export import main as export_main
from aspire.train.interpolate import RECORD_FILE, interpolate, soup
from aspire.train.interpolate import main as interpolate_main
from aspire.train.trainer import build_model
from tests.test_distill import acl_file  # noqa: F401  (a fixture)
from tests.test_formats import perturb_adapters
from tests.test_interpolate import tuned_model
from tests.test_train import tiny_config


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def adapted_model(tiny_model_dir, examples_dir, path: Path) -> Path:
    model = build_model(tiny_config(tiny_model_dir, examples_dir, path / "run", "model.kind=abstract",
                                    "model.adapter.kind=lora"))
    perturb_adapters(model.encoder)
    model.save_pretrained(path / "adapted")
    return path / "adapted"


# ---- outputs that are the inputs ------------------------------------------------------------------------------
def test_export_refuses_an_out_that_is_the_model_it_reads(tiny_model_dir, examples_dir, tmp_path, capsys):
    """Every saved model holds the encoder settings file export's --out check looks for: `--out` the model itself
    overwrote the adapted model with its merged weights."""
    model = adapted_model(tiny_model_dir, examples_dir, tmp_path)
    before = files(model)
    for more in ([], ["--adapter-only", str(tiny_model_dir)]):
        assert export_main(["--model", str(model), *more, "--out", str(model), "--quiet"]) == 2
        assert f"--out {model} would replace the model {model} it reads" in capsys.readouterr().err
    assert files(model) == before


def test_interpolation_and_soup_refuse_an_out_that_is_a_model_they_read(tiny_model_dir, examples_dir, tmp_path,
                                                                         capsys):
    """An interpolation holds the marker --out is checked for: given as both --model and --out it was replaced."""
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path / "a")
    half = interpolate(tuned, 0.5, tmp_path / "half")
    other = tuned_model(tiny_model_dir, examples_dir, tmp_path / "b")
    before = files(half)
    assert interpolate_main(["--model", str(half), "--alpha", "0.5", "--base", str(tiny_model_dir),
                             "--out", str(half), "--quiet"]) == 2
    assert f"--out {half} would replace the model {half} it reads" in capsys.readouterr().err
    with pytest.raises(ValueError, match=f"would replace the model {half} it reads"):
        soup([other, half], half)
    assert files(half) == before


# ---- an earlier output is replaced whole ----------------------------------------------------------------------
def test_an_interpolation_over_an_earlier_one_leaves_none_of_its_files(tiny_model_dir, examples_dir, tmp_path):
    """The earlier interpolation's document_model.json stayed beside the new weights of a plain encoder, so the
    folder loaded as the earlier model's kind."""
    from aspire.encoders import ContextualSentenceEncoder

    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    out = interpolate(tuned, 0.5, tmp_path / "out")
    assert (out / MODEL_FILE).is_file()
    ContextualSentenceEncoder.from_pretrained(tuned).save_pretrained(tmp_path / "plain")  # weights only
    interpolate(tmp_path / "plain", 0.5, out, base=str(tiny_model_dir))
    assert not (out / MODEL_FILE).exists()
    assert json.loads((out / RECORD_FILE).read_text())["model"] == str(tmp_path / "plain")


def test_a_merged_export_over_an_earlier_one_leaves_none_of_its_files(tiny_model_dir, examples_dir, tmp_path):
    from aspire.encoders import ContextualSentenceEncoder
    from aspire.train.export import export_merged

    model = adapted_model(tiny_model_dir, examples_dir, tmp_path)
    out = export_merged(model, tmp_path / "merged")
    assert (out / MODEL_FILE).is_file()
    ContextualSentenceEncoder.from_pretrained(model).save_pretrained(tmp_path / "encoder")  # adapters, no model file
    export_merged(tmp_path / "encoder", out)
    assert not (out / MODEL_FILE).exists()


def test_a_failed_teacher_build_leaves_the_earlier_teacher_whole(tiny_model_dir, acl_file, tmp_path,  # noqa: F811
                                                                   monkeypatch, capsys):
    """The files were written one by one into the earlier build's folder: a write that failed (a full disk) left
    the new build's sentence vectors beside the earlier build's vectors, ids and metadata."""
    import numpy as np

    from aspire.train.teacher import SENTENCES, VECTORS, main

    out = tmp_path / "teacher"
    args = ["--teacher", str(tiny_model_dir), "--out", str(out), "--acl-path", str(acl_file), "--sentences",
            "--benchmarks-dir", "", "--max-length", "32", "--quiet", "--max-papers"]
    assert main([*args, "6"]) == 0
    before = files(out)
    assert SENTENCES in before

    save = np.save

    def fail(path, *rest, **kwargs):
        if Path(path).name == VECTORS:
            raise OSError("the disk is full")
        return save(path, *rest, **kwargs)

    monkeypatch.setattr(np, "save", fail)
    assert main([*args, "8"]) == 2
    assert "the disk is full" in capsys.readouterr().err
    assert files(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["teacher"]  # no staged folder left beside it


# ---- unreadable JSON is named ---------------------------------------------------------------------------------
def test_an_unreadable_document_model_or_interpolation_record_is_named(tiny_model_dir, examples_dir, tmp_path):
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path / "a")
    half = interpolate(tuned, 0.5, tmp_path / "half")
    (half / RECORD_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=rf"{half / RECORD_FILE}: not JSON: the interpolation record"):
        soup([tuned, half], tmp_path / "soup")
    (tuned / MODEL_FILE).write_text("[1, 2]")
    with pytest.raises(ValueError, match=rf"{tuned / MODEL_FILE}: the {MODEL_FILE} holds a JSON list, not an object"):
        interpolate(tuned, 0.5, tmp_path / "out")
    assert not (tmp_path / "soup").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, text, message", [
    ("teacher.json", "{", r"teacher\.json: not JSON: the teacher's metadata"),
    ("ids.json", "", r"ids\.json: not JSON: the teacher's paper ids"),
    ("ids.json", '{"A1": 0, "A2": 1, "A3": 2}', r"ids\.json holds a JSON dict, not a list of paper ids"),
])
def test_load_teacher_names_an_unreadable_json_file(name, text, message, tmp_path):
    import numpy as np

    from aspire.train.teacher import load_teacher

    np.save(tmp_path / "vectors.npy", np.eye(3, 4, dtype=np.float32))
    (tmp_path / "ids.json").write_text(json.dumps(["A1", "A2", "A3"]))
    (tmp_path / "teacher.json").write_text("{}")
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        load_teacher(tmp_path)


# ---- mixing ---------------------------------------------------------------------------------------------------
def test_a_sequential_mix_refuses_the_ratios_it_would_ignore():
    from aspire.train.mixing import MixSampler

    with pytest.raises(ValueError, match=r"tasks\[\]\.ratio: mix\.mode sequential .* reads no ratio, got \[3\.0, 1\.0\]"):
        MixSampler([20, 20], [0, 20], "sequential", [3.0, 1.0], 4, seed=0, epoch=0, stage_batches=[3, 2])
    assert len(MixSampler([20, 20], [0, 20], "sequential", [1.0, 1.0], 4, seed=0, epoch=0, stage_batches=[3, 2])) == 5


# ---- teacher, cross-encoder and self-training settings ---------------------------------------------------------
def test_a_teacher_of_no_paper_is_refused_and_nothing_written(tiny_model_dir, tmp_path, capsys):
    """Every record rejected (or removed as a benchmark paper): an empty teacher was written as if complete."""
    from aspire.train.teacher import main

    path = tmp_path / "acl.jsonl"
    path.write_text(json.dumps({"paper_id": "A1", "title": "", "abstract": []}) + "\n")
    assert main(["--teacher", str(tiny_model_dir), "--out", str(tmp_path / "t"), "--acl-path", str(path),
                 "--benchmarks-dir", "", "--max-papers", "0", "--max-length", "32", "--quiet"]) == 2
    assert ("acl.jsonl: no paper to encode (1 read, 0 removed as benchmark papers, 1 rejected); nothing written"
            in capsys.readouterr().err)
    assert not (tmp_path / "t").exists()


def test_self_training_refuses_a_rerank_weight_that_no_round_reads():
    from aspire.config import ConfigError
    from aspire.train.self_training import SelfTrainingConfig

    with pytest.raises(ConfigError, match=r"rerank_weight=0\.5 is never read: one round labelled by the first stage"):
        SelfTrainingConfig(rounds=1, rerank_weight=0.5).check()
    for read in (SelfTrainingConfig(rounds=2, rerank_weight=0.5), SelfTrainingConfig(rounds=1, label_with_start=True,
                                                                                     rerank_weight=0.5)):
        assert read.check() is read


def test_dev_check_ranks_the_first_stage_as_deep_as_it_reranks(tmp_path, tiny_model_dir, monkeypatch):
    """The dev first stage was cut at 100 documents: a dev_top_n of 150 reranked 100 and reported 150."""
    import numpy as np
    from test_benchmarks import tiny_context2doc

    import aspire.benchmarks.context2doc as c2d
    import aspire.evaluate.context2doc_rerank as rerank
    import aspire.evaluate.context2doc_run as c2d_run
    from aspire.scoring.crossencoder import load_cross_encoder
    from aspire.train.crossencoder import CrossEncoderConfig, dev_check

    bench = tiny_context2doc(tmp_path)
    depths, to_run = [], c2d_run.to_run
    monkeypatch.setattr(c2d, "load_context2doc", lambda *args, **kwargs: bench)
    monkeypatch.setattr(rerank, "first_stage_scores", lambda b, alpha, model: np.zeros((len(b.queries),
                                                                                        len(b.candidates))))
    monkeypatch.setattr(c2d_run, "to_run", lambda b, scores, depth: depths.append(depth) or to_run(b, scores, depth))
    cfg = CrossEncoderConfig(max_length=32, dev_top_n=150)
    report = dev_check(load_cross_encoder(str(tiny_model_dir), 32), tmp_path, cfg)
    assert report["top_n"] == 150 and depths == [150]
