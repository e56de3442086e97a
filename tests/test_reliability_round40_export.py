"""Round 40, model export (`aspire.train.export`): an adapter export over a base of another width names that base;
the merged and adapter-only exports encode as the adapted model; the low-rank export's report checked against
`torch.linalg.svd` by hand; on a tiny random BERT and temporary folders (nothing is downloaded)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import BertConfig, BertModel

from aspire.encoders import ContextualSentenceEncoder
from aspire.train.export import export_adapter, export_low_rank, export_merged
from tests.test_hybrid import trained_adapter

PAPERS = [{"paper_id": "p1", "title": "a title of the paper",
           "abstract": ["the model of text " * 5 + ".", "we propose a new method " * 4 + "."]},
          {"paper_id": "p2", "title": "", "abstract": ["results show the approach improves performance."]}]


def _other_base(tiny_model_dir, path, seed: int, **change):
    """The tiny model's tokenizer with a random BERT of its config (`change` applied) at `path`."""
    shutil.copytree(tiny_model_dir, path)
    config = json.loads((tiny_model_dir / "config.json").read_text())
    torch.manual_seed(seed)
    BertModel(BertConfig(**{**config, **change})).save_pretrained(path)
    return path


def test_adapter_export_over_a_base_of_another_width_names_that_base(tiny_model_dir, tmp_path):
    """A base of hidden size 48 under adapters trained at 32 was refused naming the staged folder
    (`.../.out-5535e55f8c3d: its adapters do not fit ...`), a folder gone once refused, not the base given."""
    trained_adapter(tiny_model_dir, tmp_path / "trained")
    wide = _other_base(tiny_model_dir, tmp_path / "wide", 3, hidden_size=48, intermediate_size=96)
    with pytest.raises(ValueError) as err:
        export_adapter(tmp_path / "trained", tmp_path / "out", str(wide))
    assert str(err.value).startswith(f"{str(wide)!r} is not the base {tmp_path / 'trained'} was trained on")
    assert "hidden size 48" in str(err.value) and "nothing written" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trained", "wide"]  # no output, no staged folder left
    other = _other_base(tiny_model_dir, tmp_path / "other", 4)  # same width, other weights: refused too
    with pytest.raises(ValueError, match=f"{str(other)!r} is not the base"):
        export_adapter(tmp_path / "trained", tmp_path / "out", str(other))
    assert not (tmp_path / "out").exists()


def test_merged_and_adapter_exports_encode_as_the_adapted_model(tiny_model_dir, tmp_path):
    """Both exports against the adapted model's own paper vectors (float rounding only); the merged one holds
    plain weights equal to base + B @ A * alpha / r, computed here by hand from the saved adapter."""
    encoder = trained_adapter(tiny_model_dir, tmp_path / "trained")
    reference = encoder.encode(PAPERS).emb
    merged = export_merged(tmp_path / "trained", tmp_path / "merged")
    assert not (merged / "adapter").exists()
    torch.testing.assert_close(ContextualSentenceEncoder.from_pretrained(merged).encode(PAPERS).emb, reference,
                               rtol=0, atol=1e-5)
    plain = BertModel.from_pretrained(merged).state_dict()
    base = BertModel.from_pretrained(tiny_model_dir).state_dict()
    lora = dict(encoder.model.named_parameters())
    name = "encoder.layer.1.attention.self.query"
    a = lora[f"base_model.model.{name}.lora_A.default.weight"]
    b = lora[f"base_model.model.{name}.lora_B.default.weight"]
    torch.testing.assert_close(plain[f"{name}.weight"], base[f"{name}.weight"] + b @ a * (8.0 / 4), rtol=0,
                               atol=1e-5)
    out, fingerprint = export_adapter(tmp_path / "trained", tmp_path / "shipped", str(tiny_model_dir))
    shipped = ContextualSentenceEncoder.from_pretrained(out)
    assert shipped.fingerprint() == fingerprint == encoder.fingerprint()
    torch.testing.assert_close(shipped.encode(PAPERS).emb, reference, rtol=0, atol=1e-6)


def perturbed_copy(tiny_model_dir, path, seed: int, scale: float):
    """A full fine-tune stand-in at `path`: the tiny model with every weight moved by `scale` times seeded noise
    (no document_model.json) -> (path, the moved BertModel)."""
    shutil.copytree(tiny_model_dir, path)
    model = BertModel.from_pretrained(tiny_model_dir)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    model.save_pretrained(path)
    return path, model


def test_low_rank_report_is_the_truncated_svd_by_hand(tiny_model_dir, tmp_path):
    """A full fine-tune (every weight moved) exported at rank 3: the reported share of the linear difference left
    out is sqrt(sum of the dropped singular values² / sum of all), over every target layer, from
    `torch.linalg.svd`; the loaded export's weights are base + the rank-3 truncation; the bias difference is whole."""
    tuned, model = perturbed_copy(tiny_model_dir, tmp_path / "tuned", seed=5, scale=0.05)
    end, base = model.state_dict(), BertModel.from_pretrained(tiny_model_dir).state_dict()
    out, _, report = export_low_rank(tuned, tmp_path / "r3", str(tiny_model_dir), rank=3)
    got = ContextualSentenceEncoder.from_pretrained(out).merged().model.state_dict()
    dropped = total = base_sq = 0.0
    layers = [n[: -len(".weight")] for n in end if n.endswith(".weight") and end[n].dim() == 2
              and n.split(".")[-2] in ("query", "key", "value", "dense")]
    assert len(layers) > 10
    for name in layers:
        diff = (end[f"{name}.weight"] - base[f"{name}.weight"]).double()
        u, s, vh = torch.linalg.svd(diff, full_matrices=False)
        dropped += float(s[3:].square().sum())
        total += float(s.square().sum())
        base_sq += float(base[f"{name}.weight"].double().square().sum())
        best = base[f"{name}.weight"].double() + (u[:, :3] * s[:3]) @ vh[:3]
        torch.testing.assert_close(got[f"{name}.weight"].double(), best, rtol=0, atol=1e-5)
        torch.testing.assert_close(got[f"{name}.bias"], end[f"{name}.bias"], rtol=0, atol=1e-6)
    linear = report["relative_norms"]["linear"]
    assert linear["left_out_of_difference"] == pytest.approx((dropped / total) ** 0.5, rel=1e-4)
    assert linear["difference"] == pytest.approx((total / base_sq) ** 0.5, rel=1e-6)
    assert report["relative_norms"]["bias"]["left_out_of_difference"] == 0.0
    assert report["relative_norms"]["layer_norm"]["left_out_of_difference"] == pytest.approx(1.0)
