"""Re-ranking and fusion: the cross-encoder's max_length against the model's position embeddings; the fusion spec's
missing weight."""

from __future__ import annotations

import pytest

from aspire.scoring.crossencoder import CrossEncoderReranker, load_cross_encoder

LONG_PAIR = ("the model", " ".join(["text"] * 300))  # 300 word pieces of text: past the tiny model's 128 positions


def test_a_max_length_past_the_position_embeddings_is_refused_by_name_before_any_pair(tiny_cross_encoder_dir):
    """The tiny cross-encoder holds 128 positions: asked for 256 word pieces a pair, a long pair failed in the model's
    pass ("The size of tensor a (256) must match the size of tensor b (128)"), naming neither the option nor the
    limit; now the load refuses it, and 128 (the limit itself) scores the same long pair."""
    with pytest.raises(ValueError, match=r"max_length 256 is past the 128 word pieces its position embeddings hold"):
        CrossEncoderReranker(str(tiny_cross_encoder_dir), max_length=256)
    with pytest.raises(ValueError, match="give 128 or fewer"):
        load_cross_encoder(str(tiny_cross_encoder_dir), max_length=129)
    scores = CrossEncoderReranker(str(tiny_cross_encoder_dir), max_length=128).score_pairs([LONG_PAIR])
    assert scores.shape == (1,) and bool(abs(scores[0]) < float("inf"))


def test_position_limit_reads_the_roberta_family_two_short():
    from aspire.scoring.crossencoder import position_limit

    assert position_limit({"max_position_embeddings": 512, "model_type": "bert"}) == 512
    assert position_limit({"max_position_embeddings": 514, "model_type": "mpnet"}) == 512
    assert position_limit({"model_type": "bert"}) is None


# ---- the fusion spec's weight ------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, said", [("z", "none given"), ("minmax:", "none given"), ("z:abc", "got 'abc'"),
                                        ("z:2", "got '2'")])
def test_a_fusion_weight_that_is_missing_or_no_number_is_said_so(spec, said):
    """`--fuse z` (no weight) was told "the weight on the first list must be in [0, 1]", as if one had been given out
    of range; the message now says none was given (or what was), and the form z:ALPHA."""
    from aspire.scoring.fusion import parse_fusion

    with pytest.raises(ValueError, match=r"must be in \[0, 1\] \((z|minmax):ALPHA\), " + said):
        parse_fusion(spec)
