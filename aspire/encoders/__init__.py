"""Encoders: papers -> `DocBatch` of contextual sentence vectors (and single vectors for baselines)."""

from aspire.encoders.backends import BACKENDS, load_encoder
from aspire.encoders.contextual import (
    ContextualSentenceEncoder,
    EncoderInputs,
    TruncationRecord,
    paper_sentences,
)
from aspire.encoders.pretrained import MODELS, resolve_model

__all__ = [
    "BACKENDS",
    "ContextualSentenceEncoder",
    "EncoderInputs",
    "MODELS",
    "TruncationRecord",
    "load_encoder",
    "paper_sentences",
    "resolve_model",
]
