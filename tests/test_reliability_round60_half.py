"""Round 60, `export_low_rank(half=True)` with a difference beyond float16's range: an adapter value or bias above
65504 (65520 and up round to infinity) was stored as infinity unsaid, so the export loaded with inf weights (and the
report's linear share left out was NaN); now it is refused before anything is written, naming the weight and its
largest value. A difference too small for float16 (below ~6e-8) rounds to 0: that loss was and is counted in the
report's share left out. On a tiny random BERT (nothing is downloaded)."""

from __future__ import annotations

import pytest

from aspire.encoders import ContextualSentenceEncoder
from aspire.train.export import export_low_rank
from tests.test_reliability_round40_export import perturbed_copy
from tests.test_reliability_round59_lowrank import QUERY, edited_copy


@pytest.mark.parametrize(("part", "value"), [("weight", 7e4), ("bias", 7e4), ("bias", 65530.0)])
def test_a_difference_beyond_float16_is_refused_in_half_naming_the_weight(tiny_model_dir, tmp_path, part, value):
    """Was: written, its adapter holding inf (the weight's rank-1 difference is u·s = the moved entry itself)."""
    tuned = edited_copy(tiny_model_dir, tmp_path / "tuned", lambda w: w[f"{QUERY}.{part}"].view(-1)[3].add_(value))
    with pytest.raises(ValueError, match=rf"^{tuned}: the adapter of weight '{QUERY}\.{part}' holds {value:.6g}, "
                                         r"beyond float16's largest value \(65504\), .* export it without half "
                                         r"\(--half\), in float32; nothing written$"):
        export_low_rank(tuned, tmp_path / "out", str(tiny_model_dir), rank=2, half=True)
    assert not (tmp_path / "out").exists()
    out, _, report = export_low_rank(tuned, tmp_path / "f32", str(tiny_model_dir), rank=2)  # float32 carries it
    weights = ContextualSentenceEncoder.from_pretrained(out).merged().model.state_dict()
    assert weights[f"{QUERY}.{part}"].view(-1)[3] == pytest.approx(value, rel=1e-6)
    assert report["relative_norms"]["linear"]["left_out_of_difference"] == pytest.approx(0.0, abs=1e-6)


def test_a_bias_that_float16_rounds_down_to_its_largest_value_is_kept(tiny_model_dir, tmp_path):
    """65510 rounds to 65504 in float16, not to infinity: stored, and its rounding is reported."""
    tuned = edited_copy(tiny_model_dir, tmp_path / "tuned", lambda w: w[f"{QUERY}.bias"].view(-1)[3].add_(65510.0))
    out, _, report = export_low_rank(tuned, tmp_path / "out", str(tiny_model_dir), rank=2, half=True)
    weights = ContextualSentenceEncoder.from_pretrained(out).merged().model.state_dict()
    assert float(weights[f"{QUERY}.bias"].view(-1)[3]) == 65504.0
    assert report["relative_norms"]["bias"]["left_out_of_difference"] == pytest.approx(6 / 65510, rel=1e-3)


def test_a_difference_below_float16_is_reported_as_left_out(tiny_model_dir, tmp_path):
    """Not a change (passes on the old code too): a difference under float16's smallest value rounds to 0 in the
    adapter, and the report's share left out says so (1.0), where float32 keeps it (rank 32 >= every side: exact)."""
    tuned, _ = perturbed_copy(tiny_model_dir, tmp_path / "tuned", seed=3, scale=1e-9)
    out, _, half = export_low_rank(tuned, tmp_path / "f16", str(tiny_model_dir), rank=32, half=True)
    _, _, full = export_low_rank(tuned, tmp_path / "f32", str(tiny_model_dir), rank=32)
    for kind in ("linear", "bias"):
        assert half["relative_norms"][kind]["left_out_of_difference"] > 0.99
        assert full["relative_norms"][kind]["left_out_of_difference"] < 1e-3
    stored = ContextualSentenceEncoder.from_pretrained(out).model.state_dict()
    carried = [t for n, t in stored.items() if "lora_B" in n]
    assert carried and not any(t.any() for t in carried)  # every carried value rounded to 0
