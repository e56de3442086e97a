"""What the contextual encoder's tokenisation hands its forward pass, and what it records of long papers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

Overflow = Literal["window", "truncate"]


@dataclass
class TruncationRecord:
    """Sentences of one paper that did not fit in the first window of `max_length` tokens.

    Positions are in the paper's sentence set (`aspire.encoders.contextual.paper_sentences`), as a `DocBatch` counts
    them: with `include_title` and a title (`title_is_sentence`), sentence 0 is the title, which opens every window
    and is never listed, and abstract sentence k is position k + 1."""

    paper_id: str
    cut: list[int]  # sentence positions entirely past the first window
    partial: list[int]  # sentence positions split across the first window's end
    handled_by: Overflow  # "window": encoded in a continuation window; "truncate": cut ones left out


@dataclass
class EncoderInputs:
    """Tokenised papers ready for `ContextualSentenceEncoder.forward`.

    R rows (one per window; a paper has one row unless it overflowed), T word pieces, B papers, S sentences.
    """

    input_ids: Tensor  # (R, T)
    attention_mask: Tensor  # (R, T)
    sent_index: Tensor  # (R, T) long: the piece's sentence position within its paper, -1 = not pooled
    row_paper: Tensor  # (R,) long: the paper each row belongs to
    n_sentences: list[int]  # B sentence counts
    paper_ids: list[str]
    sentences: list[list[str]]
    titled: list[bool] | None = None  # B: whether a paper's sentence 0 is its title (None: not recorded)
    truncation: list[TruncationRecord] = field(default_factory=list)
    token_type_ids: Tensor | None = None  # (R, T) where the model uses them

    def to(self, device: torch.device) -> "EncoderInputs":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return EncoderInputs(
            move(self.input_ids), move(self.attention_mask), move(self.sent_index), move(self.row_paper),
            self.n_sentences, self.paper_ids, self.sentences, self.titled, self.truncation, move(self.token_type_ids),
        )
