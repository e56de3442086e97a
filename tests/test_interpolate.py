"""WiSE-FT weight interpolation (aspire.train.interpolate) on a tiny random BERT."""

from __future__ import annotations

import json

import pytest
import torch
from test_formats import PAPERS, perturb_adapters
from test_train import tiny_config
from transformers import AutoModel, BertConfig, BertModel

from aspire.train.document_model import DocumentModel
from aspire.train.interpolate import RECORD_FILE, interpolate, main, soup
from aspire.train.trainer import build_model


def tuned_model(tiny_model_dir, examples_dir, path, *overrides):
    """A document model built from the tiny BERT with every encoder weight moved, saved to `path`."""
    model = build_model(tiny_config(tiny_model_dir, examples_dir, path / "run", "model.kind=abstract", *overrides))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.encoder.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    model.save_pretrained(path / "tuned")
    return path / "tuned"


def weights(path):
    return AutoModel.from_pretrained(path).state_dict()


def test_alpha_moves_every_weight_along_the_line_from_base_to_tuned(tiny_model_dir, examples_dir, tmp_path):
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    base, end = weights(tiny_model_dir), weights(tuned)
    for alpha in (0.0, 0.3, 1.0):
        got = weights(interpolate(tuned, alpha, tmp_path / f"a{alpha}"))  # base read from document_model.json
        moved = [name for name in end if end[name].is_floating_point() and not torch.equal(base[name], end[name])]
        assert len(moved) > 10
        for name in moved:
            assert torch.allclose(got[name], base[name] + alpha * (end[name] - base[name]), atol=1e-6), name
    record = json.loads((tmp_path / "a0.3" / RECORD_FILE).read_text())
    assert record == {"model": str(tuned), "base": str(tiny_model_dir), "alpha": 0.3}


def test_interpolated_model_loads_as_the_same_kind_of_document_model(tiny_model_dir, examples_dir, tmp_path):
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    half = DocumentModel.from_pretrained(interpolate(tuned, 0.5, tmp_path / "half"))
    whole = DocumentModel.from_pretrained(interpolate(tuned, 1.0, tmp_path / "whole"))
    original = DocumentModel.from_pretrained(tuned)
    assert half.inference_name == original.inference_name and half.tasks == original.tasks
    assert torch.allclose(whole.encode(PAPERS).emb, original.encode(PAPERS).emb, atol=1e-6)
    assert not torch.allclose(half.encode(PAPERS).emb, original.encode(PAPERS).emb, atol=1e-3)


def test_control_code_rows_are_kept_and_shared_rows_interpolated(tiny_model_dir, examples_dir, tmp_path):
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path, "model.control_codes=task")
    key = "embeddings.word_embeddings.weight"
    base, end = weights(tiny_model_dir)[key], weights(tuned)[key]
    assert end.shape[0] > base.shape[0]  # the code rows
    got = weights(interpolate(tuned, 0.5, tmp_path / "half"))[key]
    rows = base.shape[0]
    assert torch.allclose(got[:rows], (base + end[:rows]) / 2, atol=1e-6)
    assert torch.equal(got[rows:], end[rows:])


def test_an_adapted_model_is_merged_before_interpolation(tiny_model_dir, examples_dir, tmp_path):
    model = build_model(tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "model.kind=abstract",
                                    "model.adapter.kind=lora"))
    perturb_adapters(model.encoder)
    model.save_pretrained(tmp_path / "adapted")
    whole = DocumentModel.from_pretrained(interpolate(tmp_path / "adapted", 1.0, tmp_path / "whole"))
    assert whole.model_cfg.adapter.kind == "none"
    assert torch.allclose(whole.encode(PAPERS).emb, model.encode(PAPERS).emb, atol=1e-5)


def test_a_different_base_architecture_is_refused_naming_the_weight(tiny_model_dir, examples_dir, tmp_path):
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    wide = tmp_path / "wide"
    BertModel(BertConfig(**{**AutoModel.from_pretrained(tiny_model_dir).config.to_dict(), "intermediate_size": 48})
              ).save_pretrained(wide)
    with pytest.raises(ValueError, match=r"weight 'encoder\.layer\.0\.intermediate\.dense\.weight': shape"):
        interpolate(tuned, 0.5, tmp_path / "out", base=str(wide))


def test_cli_writes_the_model_and_rejects_alpha_outside_the_unit_interval(tiny_model_dir, examples_dir, tmp_path,
                                                                          capsys):
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    assert main(["--model", str(tuned), "--alpha", "0.5", "--out", str(tmp_path / "half"), "--quiet"]) == 0
    assert (tmp_path / "half" / "model.safetensors").is_file()
    assert main(["--model", str(tuned), "--alpha", "1.5", "--out", str(tmp_path / "bad"), "--quiet"]) == 2
    assert "alpha must lie in [0, 1], got 1.5" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    # again into its own output: replaced; into the model it reads (or any other folder): refused, left as it was
    assert main(["--model", str(tuned), "--alpha", "0.25", "--out", str(tmp_path / "half"), "--quiet"]) == 0
    before = sorted(p.name for p in tuned.iterdir())
    assert main(["--model", str(tuned), "--alpha", "0.5", "--out", str(tuned), "--quiet"]) == 2
    assert f"{tuned} exists and is not an earlier interpolation's folder" in capsys.readouterr().err
    assert sorted(p.name for p in tuned.iterdir()) == before


def test_a_soup_is_the_mean_of_its_models_and_loads_as_their_kind(tiny_model_dir, examples_dir, tmp_path):
    models = []
    for seed in range(3):
        models.append(tuned_model(tiny_model_dir, examples_dir, tmp_path / f"s{seed}"))
        model = AutoModel.from_pretrained(models[-1])
        gen = torch.Generator().manual_seed(100 + seed)  # tuned_model moves each the same way: make them differ
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        model.save_pretrained(models[-1])
    got = weights(soup(models, tmp_path / "soup"))
    each = [weights(m) for m in models]
    moved = [n for n in got if got[n].is_floating_point() and not torch.equal(each[0][n], each[1][n])]
    assert len(moved) > 10
    for name in moved:
        assert torch.allclose(got[name], sum(w[name] for w in each) / 3, atol=1e-6), name
    record = json.loads((tmp_path / "soup" / RECORD_FILE).read_text())
    assert record["soup"] == [str(m) for m in models] and record["members"] == {str(m): None for m in models}
    assert record["weights"] == pytest.approx({str(m): 1 / 3 for m in models})
    souped = DocumentModel.from_pretrained(tmp_path / "soup")
    assert souped.inference_name == DocumentModel.from_pretrained(models[0]).inference_name

    # a soup of that soup and a two-model soup: weights are the mean of the two soups', the record nests theirs
    pair = soup(models[:2], tmp_path / "pair")
    nested = weights(soup([tmp_path / "soup", pair], tmp_path / "nested"))
    for name in moved:
        want = (sum(w[name] for w in each) / 3 + (each[0][name] + each[1][name]) / 2) / 2
        assert torch.allclose(nested[name], want, atol=1e-6), name
    record = json.loads((tmp_path / "nested" / RECORD_FILE).read_text())
    assert record["members"][str(tmp_path / "soup")]["soup"] == [str(m) for m in models]
    assert record["weights"] == pytest.approx({str(models[0]): 5 / 12, str(models[1]): 5 / 12, str(models[2]): 1 / 6})


def test_a_soup_of_different_kinds_only_when_asked_described_by_its_first_member(tiny_model_dir, examples_dir,
                                                                              tmp_path, capsys):
    hybrid = tuned_model(tiny_model_dir, examples_dir, tmp_path / "h", "model.kind=hybrid")
    distilled = tuned_model(tiny_model_dir, examples_dir, tmp_path / "d", "model.max_length=32")
    model = AutoModel.from_pretrained(distilled)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1)  # tuned_model moves both the same way: make them differ
    model.save_pretrained(distilled)
    with pytest.raises(ValueError, match=rf"{distilled}: model\.kind is 'abstract', 'hybrid' in {hybrid} "
                                         r"\(give --mixed-kinds"):
        soup([hybrid, distilled], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    out = tmp_path / "mixed"
    assert main(["--model", str(hybrid), str(distilled), "--mixed-kinds", "--out", str(out), "--quiet"]) == 0
    got, a, b = weights(out), weights(hybrid), weights(distilled)
    moved = [n for n in got if got[n].is_floating_point()]
    assert moved and all(torch.allclose(got[n], (a[n] + b[n]) / 2, atol=1e-6) for n in moved)
    assert DocumentModel.from_pretrained(out).inference_name == DocumentModel.from_pretrained(hybrid).inference_name
    record = json.loads((out / RECORD_FILE).read_text())
    assert record["mixed"] == {str(distilled): {"kind": "abstract", "max_length": 32}}
    assert record["weights"] == pytest.approx({str(hybrid): 0.5, str(distilled): 0.5})
    assert main(["--model", str(hybrid), "--alpha", "0.5", "--mixed-kinds", "--out", str(tmp_path / "x"),
                 "--quiet"]) == 2
    assert "--mixed-kinds is for a soup of several models" in capsys.readouterr().err


def test_a_soup_refuses_models_of_another_kind_or_shape_naming_them(tiny_model_dir, examples_dir, tmp_path, capsys):
    first = tuned_model(tiny_model_dir, examples_dir, tmp_path / "a")
    coded = tuned_model(tiny_model_dir, examples_dir, tmp_path / "b", "model.control_codes=task")
    with pytest.raises(ValueError, match=rf"{coded}: model\.control_codes is 'task'"):
        soup([first, coded], tmp_path / "out")
    wide = tuned_model(tiny_model_dir, examples_dir, tmp_path / "c")  # the same kind, a wider feed-forward layer
    BertModel(BertConfig(**{**AutoModel.from_pretrained(wide).config.to_dict(), "intermediate_size": 48})
              ).save_pretrained(wide)
    with pytest.raises(ValueError, match=rf"{wide}: weight 'encoder\.layer\.0\.intermediate\.dense\.weight' has shape"):
        soup([first, wide], tmp_path / "out")
    with pytest.raises(ValueError, match="at least two models"):
        soup([first], tmp_path / "out")
    assert main(["--model", str(first), str(first), "--alpha", "0.5", "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert "a soup of several takes neither" in capsys.readouterr().err
    assert main(["--model", str(first), "--out", str(tmp_path / "y"), "--quiet"]) == 2
    assert "--alpha is required with one --model" in capsys.readouterr().err


def test_training_run_folders_soup_as_their_best_checkpoints_kinds_checked(tiny_model_dir, examples_dir, tmp_path):
    """A run folder reads as its best checkpoint's model, document_model.json too: runs of two kinds are refused
    unless asked, as their model folders are, and the record names the checkpoints."""
    import shutil

    def as_run(model_dir, run):
        (run / "checkpoint-000001").mkdir(parents=True)
        shutil.move(model_dir, run / "checkpoint-000001" / "model")
        (run / "best").write_text(json.dumps({"checkpoint": "checkpoint-000001", "step": 1, "dev_loss": 0.5}))
        return run / "checkpoint-000001" / "model"

    first = as_run(tuned_model(tiny_model_dir, examples_dir, tmp_path / "a", "model.kind=hybrid"), tmp_path / "run-a")
    other = as_run(tuned_model(tiny_model_dir, examples_dir, tmp_path / "b"), tmp_path / "run-b")
    with pytest.raises(ValueError, match=rf"{other}: model\.kind is 'abstract', 'hybrid' in {first} \(give --mixed"):
        soup([tmp_path / "run-a", tmp_path / "run-b"], tmp_path / "out")
    out = soup([tmp_path / "run-a", tmp_path / "run-b"], tmp_path / "out", mixed_kinds=True)
    record = json.loads((out / RECORD_FILE).read_text())
    assert record["soup"] == [str(first), str(other)] and record["mixed"] == {str(other): {"kind": "abstract"}}
    assert DocumentModel.from_pretrained(out).inference_name == DocumentModel.from_pretrained(first).inference_name


def test_low_rank_export_carries_linear_weights_and_biases_and_reports_the_rest(tiny_model_dir, examples_dir,
                                                                               tmp_path, capsys):
    from aspire.encoders import ContextualSentenceEncoder
    from aspire.train.export import LOW_RANK_REPORT, export_low_rank
    from aspire.train.export import main as export_main

    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path, "model.kind=hybrid")  # every weight moved
    base, end = weights(tiny_model_dir), weights(tuned)
    linear = [n[: -len(".weight")] for n in end if n.endswith(".weight") and end[n].dim() == 2
              and "embeddings" not in n]
    assert len(linear) > 10

    out, fingerprint, report = export_low_rank(tuned, tmp_path / "full", str(tiny_model_dir), rank=64)
    assert report["rank"] == 32  # the tiny model's width: a larger rank once stored zeros (37 MB at rank 9999)
    loaded = ContextualSentenceEncoder.from_pretrained(out)
    assert loaded.fingerprint() == fingerprint
    got = loaded.merged().model.state_dict()
    for name in linear:  # rank 64 >= every dimension of the tiny model: exact
        assert torch.allclose(got[f"{name}.weight"], end[f"{name}.weight"], atol=1e-5), name
        assert torch.allclose(got[f"{name}.bias"], end[f"{name}.bias"], atol=1e-6), name
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.0.output.LayerNorm.weight"):
        assert torch.equal(got[name], base[name]) and not torch.equal(base[name], end[name])  # left out, reported
    shares = {kind: r["left_out_of_difference"] for kind, r in report["relative_norms"].items()}
    assert shares["linear"] < 1e-5 and shares["bias"] == 0.0
    assert shares["embeddings"] == pytest.approx(1.0) and shares["layer_norm"] == pytest.approx(1.0)
    assert json.loads((out / LOW_RANK_REPORT).read_text()) == report
    assert DocumentModel.from_pretrained(out).inference_name == DocumentModel.from_pretrained(tuned).inference_name

    out1, _, report1 = export_low_rank(tuned, tmp_path / "r1", str(tiny_model_dir), rank=1)
    got1 = ContextualSentenceEncoder.from_pretrained(out1).merged().model.state_dict()
    name = "encoder.layer.0.attention.self.query.weight"
    u, s, vh = torch.linalg.svd((end[name] - base[name]).double())
    best = base[name].double() + s[0] * torch.outer(u[:, 0], vh[0])  # Eckart-Young: the best rank-1 move
    assert torch.allclose(got1[name].double(), best, atol=1e-5)
    assert 0.1 < report1["relative_norms"]["linear"]["left_out_of_difference"] < 1.0

    assert export_main(["--model", str(tuned), "--rank", "4", "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert "--rank needs --adapter-only BASE" in capsys.readouterr().err
    assert export_main(["--model", str(tuned), "--adapter-only", str(tiny_model_dir), "--half", "--out",
                        str(tmp_path / "h"), "--quiet"]) == 2
    assert "--half stores a low-rank adapter in float16: it needs --rank" in capsys.readouterr().err
    assert not (tmp_path / "h").exists()
    with pytest.raises(ValueError, match="rank must be at least 1"):
        export_low_rank(tuned, tmp_path / "r0", str(tiny_model_dir), rank=0)
    capsys.readouterr()
    assert export_main(["--model", str(tuned), "--out", str(tmp_path / "m"), "--quiet"]) == 2  # nothing to merge
    assert "has no adapter to merge: it is a plain model already" in capsys.readouterr().err  # was "merged(): ..."


def test_low_rank_export_in_float16_loads_as_the_rounded_model_at_half_the_size(tiny_model_dir, examples_dir,
                                                                               tmp_path):
    from safetensors import safe_open

    from aspire.encoders import ContextualSentenceEncoder
    from aspire.train.export import export_low_rank

    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path, "model.kind=hybrid")
    full, _, _ = export_low_rank(tuned, tmp_path / "f32", str(tiny_model_dir), rank=4)
    half, fingerprint, report = export_low_rank(tuned, tmp_path / "f16", str(tiny_model_dir), rank=4, half=True)
    files = [d / "adapter" / "adapter_model.safetensors" for d in (full, half)]
    stored = []
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            stored.append([f.get_tensor(k) for k in f.keys()])
    assert {t.dtype for t in stored[1]} == {torch.float16} and {t.dtype for t in stored[0]} == {torch.float32}
    assert sum(t.nbytes for t in stored[1]) * 2 == sum(t.nbytes for t in stored[0])
    assert files[1].stat().st_size < files[0].stat().st_size
    loaded = ContextualSentenceEncoder.from_pretrained(half)
    assert loaded.fingerprint() == fingerprint and report["dtype"] == "float16"
    assert 0.0 < report["relative_norms"]["bias"]["left_out_of_difference"] < 1e-3  # the rounding, reported
    a = ContextualSentenceEncoder.from_pretrained(full).merged().model.state_dict()
    b = loaded.merged().model.state_dict()
    name = "encoder.layer.1.intermediate.dense.weight"
    assert not torch.equal(a[name], b[name]) and torch.allclose(a[name], b[name], atol=1e-3)
