"""An encoder keeps the name it was loaded by (the check of its two boolean settings reused the variable)."""

from __future__ import annotations

from aspire.encoders import load_encoder


def test_an_encoder_is_named_by_what_it_was_loaded_from(tiny_model_dir):
    """Every encoder was named 'segment_ids': the int8 export logged "exporting segment_ids to ONNX" and training's
    adapter errors said "model.encoder 'segment_ids' has adapters of its own"."""
    assert load_encoder(str(tiny_model_dir)).name == str(tiny_model_dir)
