"""Encoders: papers -> `DocBatch` of contextual sentence vectors (and single vectors for baselines)."""

from aspire.lazy import lazy_exports

lazy_exports(__name__, {
    **dict.fromkeys(("BACKENDS", "load_encoder"), "aspire.encoders.backends"),
    **dict.fromkeys(("ContextualSentenceEncoder", "EncoderInputs", "TruncationRecord", "paper_sentences"), "aspire.encoders.contextual"),
    **dict.fromkeys(("MODELS", "resolve_model"), "aspire.encoders.pretrained"),
})

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
