"""Round 59, `export_low_rank` on damaged weights and a base with all-zero weights of a kind: a NaN in a carried
(target) linear weight of the model or the base failed inside `torch.linalg.svd` naming no weight, an infinity
wrote an adapter of NaNs unsaid, and a NaN bias went into the adapter; now each is refused before any SVD, naming
the weight and whose it is. A kind whose base weights are all zero (a freshly initialised BERT's biases, as the tiny
test model's) was reported as a relative difference of 0.0 however far the model moved it; now it is null with the
reason and the difference's own norm under "undefined". On a tiny random BERT (nothing is downloaded)."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from transformers import BertModel

from aspire.train.export import FOREIGN_BASE_NORM, LOW_RANK_REPORT, export_low_rank
from tests.test_reliability_round40_export import perturbed_copy

QUERY = "encoder.layer.0.attention.self.query"


def edited_copy(src, path, edit):
    """A copy of the saved BertModel `src` at `path` with `edit(state dict)` applied to its weights in place."""
    shutil.copytree(src, path)
    model = BertModel.from_pretrained(src)
    with torch.no_grad():
        edit(dict(model.named_parameters()))
    model.save_pretrained(path)
    return path


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("whose", ["model", "base"])
@pytest.mark.parametrize("part", ["weight", "bias"])
def test_a_non_finite_carried_weight_is_refused_naming_it_and_whose_it_is(tiny_model_dir, tmp_path, value, whose,
                                                                            part):
    """Was: a NaN weight a bare `LinAlgError` from `torch.linalg.svd`; an infinite one, or a non-finite bias, an
    adapter holding NaNs, written."""
    tuned, _ = perturbed_copy(tiny_model_dir, tmp_path / "tuned", seed=1, scale=0.002)
    source = tuned if whose == "model" else tiny_model_dir
    damaged = edited_copy(source, tmp_path / "damaged", lambda w: w[f"{QUERY}.{part}"].view(-1)[3].fill_(value))
    model, base = (damaged, tiny_model_dir) if whose == "model" else (tuned, damaged)
    said = f"the fine-tuned model {damaged}" if whose == "model" else f"the base {str(damaged)!r}"
    with pytest.raises(ValueError, match=rf"^{said}: weight '{QUERY}\.{part}' holds 1 non-finite value\(s\) .*"
                                         "nothing written$"):
        export_low_rank(model, tmp_path / "out", str(base), rank=2)
    assert not (tmp_path / "out").exists()


def test_a_kind_whose_base_weights_are_all_zero_has_no_relative_difference(tiny_model_dir, tmp_path):
    """The tiny base's biases are all zero (BERT's initialisation): the moved biases were reported 0.0 of them."""
    base = BertModel.from_pretrained(tiny_model_dir).state_dict()
    assert all(not base[n].any() for n in base if n.endswith(".bias") and "LayerNorm" not in n)
    tuned, model = perturbed_copy(tiny_model_dir, tmp_path / "tuned", seed=2, scale=0.002)
    end = model.state_dict()
    out, _, report = export_low_rank(tuned, tmp_path / "out", str(tiny_model_dir), rank=2)
    moved = sum(float((end[n] - base[n]).double().square().sum()) for n in end
                if n.endswith(".bias") and n.split(".")[-2] in ("query", "key", "value", "dense")) ** 0.5
    assert moved > 0
    assert report["relative_norms"]["bias"]["difference"] is None  # was 0.0
    reason = report["undefined"]["relative_norms.bias.difference"]
    assert reason.startswith("the base's bias weights are all zero")
    assert float(reason.rsplit(" ", 1)[1]) == pytest.approx(moved, rel=1e-5)
    assert report["relative_norms"]["bias"]["left_out_of_difference"] == 0.0  # the bias is carried whole
    assert 0 < report["relative_norms"]["linear"]["difference"] < FOREIGN_BASE_NORM
    assert set(report["undefined"]) == {"relative_norms.bias.difference"}
    assert json.loads((out / LOW_RANK_REPORT).read_text()) == report  # strict JSON: null, not NaN
    _, _, same = export_low_rank(tiny_model_dir, tmp_path / "same", str(tuned), rank=2)  # the other way round
    assert same["relative_norms"]["bias"]["difference"] > 0 and "undefined" not in same


def test_a_base_with_all_zero_linear_weights_is_warned_as_foreign(tiny_model_dir, tmp_path, caplog):
    """Was: its linear difference reported 0.0 of it, so the export over it passed unwarned."""
    targets = ("query", "key", "value", "dense")
    zero = edited_copy(tiny_model_dir, tmp_path / "zero", lambda w: [
        p.zero_() for n, p in w.items() if p.dim() == 2 and n.split(".")[-2] in targets])
    with caplog.at_level(logging.WARNING, logger="aspire.train.export"):
        _, _, report = export_low_rank(tiny_model_dir, tmp_path / "out", str(zero), rank=2)
    assert report["relative_norms"]["linear"]["difference"] is None
    assert report["undefined"]["relative_norms.linear.difference"].startswith("the base's linear weights are all zero")
    assert any("by inf of the base's linear weights" in r.getMessage() and "likely not the base" in r.getMessage()
               for r in caplog.records)
