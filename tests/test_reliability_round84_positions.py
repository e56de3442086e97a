"""A model without absolute position embeddings (DeBERTa's relative attention) has no position limit: its
`max_position_embeddings` does not bound what it reads, and a cross-encoder of that kind takes a longer
`max_length`."""

from __future__ import annotations

import json

import pytest
import torch

from aspire.config import position_limit
from aspire.scoring.crossencoder import check_max_length


def _deberta_config(positions: int = 16) -> dict:
    from transformers import DebertaV2Config

    return DebertaV2Config(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=positions, relative_attention=True,
                           position_biased_input=False, pos_att_type=["p2c", "c2p"], num_labels=1)


def test_a_model_without_absolute_positions_reads_past_its_max_position_embeddings():
    """The premise, on the model itself: a tiny DeBERTa-v2 of 16 'positions' scores 40 word pieces."""
    from transformers import DebertaV2ForSequenceClassification

    torch.manual_seed(0)
    model = DebertaV2ForSequenceClassification(_deberta_config()).eval()
    with torch.no_grad():
        assert model(input_ids=torch.randint(5, 60, (1, 40))).logits.shape == (1, 1)


def test_its_position_limit_is_none_and_a_longer_max_length_is_taken(tmp_path):
    config = _deberta_config().to_dict()
    assert position_limit(config) is None and position_limit(_deberta_config()) is None  # was 16
    (tmp_path / "config.json").write_text(json.dumps(config))
    check_max_length("tiny-deberta", tmp_path / "config.json", 40)  # was refused, 'past the 16 word pieces'


def test_absolute_positions_keep_their_limit(tmp_path):
    assert position_limit({"max_position_embeddings": 128, "model_type": "bert"}) == 128
    assert position_limit({"max_position_embeddings": 514, "model_type": "roberta",
                           "position_biased_input": True}) == 512
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 16, "model_type": "bert"}))
    with pytest.raises(ValueError, match="max_length 40 is past the 16 word pieces"):
        check_max_length("tiny-bert", tmp_path / "config.json", 40)
