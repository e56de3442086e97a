"""Encoders: papers -> `DocBatch` of contextual sentence vectors (and single vectors for baselines)."""

from aspire.encoders.contextual import (
    ContextualSentenceEncoder,
    EncoderInputs,
    TruncationRecord,
    load_encoder,
    paper_sentences,
)
from aspire.encoders.models import MODELS, resolve_model

__all__ = [
    "ContextualSentenceEncoder",
    "EncoderInputs",
    "MODELS",
    "TruncationRecord",
    "load_encoder",
    "paper_sentences",
    "resolve_model",
]
