"""`DocBatch`: the one tensor type that travels between every stage.

A batch of B papers holds padded sentence vectors `emb (B, S, D)` and a boolean `mask (B, S)`
(True = a real sentence), with the paper ids and sentence texts beside them. Aspect-conditional
retrieval is nothing but a narrower mask: `batch.with_mask(...)` or `batch.select_sentences(...)`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field, replace
from typing import Sequence

import torch
from torch import Tensor

from aspire.config import is_bool

_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _positions(chosen, name: str) -> list[int]:
    """One paper's selection as a list of int positions; ValueError naming the paper for anything else."""
    try:  # a 0-d tensor or array has __len__ but no length: len() raised TypeError, naming no paper
        sized = not isinstance(chosen, (str, bytes)) and len(chosen) >= 0
    except TypeError:
        sized = False
    if not sized:
        raise ValueError(f"paper {name}: a sentence selection must be a sequence of positions, got {chosen!r}")
    out = []
    for j in chosen:
        if is_bool(j):
            raise ValueError(f"paper {name}: sentence positions must be integers, got {j!r}")
        try:
            out.append(operator.index(j))
        except TypeError:
            raise ValueError(f"paper {name}: sentence positions must be integers, got {j!r}") from None
    return out


@dataclass(frozen=True)
class DocBatch:
    """Padded sentence vectors of B papers.

    Attributes:
        emb: (B, S, D) float sentence vectors; padded rows are zero.
        mask: (B, S) bool, True where a sentence is real (and selected).
        paper_ids: B paper ids.
        sentences: B lists of sentence texts; `len(sentences[i])` is paper i's sentence count
            before any aspect selection (the mask may be narrower, never wider).
        whole: (B, D) whole-abstract vectors from the same encoder pass (mean of every word piece of
            `title [SEP] abstract`), or None. An aspect selection narrows the mask, never `whole`.
    """

    emb: Tensor
    mask: Tensor
    paper_ids: list[str] = field(default_factory=list)
    sentences: list[list[str]] = field(default_factory=list)
    whole: Tensor | None = None

    def __post_init__(self) -> None:
        if self.emb.dim() != 3:
            raise ValueError(f"DocBatch.emb must be (B, S, D), got shape {tuple(self.emb.shape)}")
        if self.mask.shape != self.emb.shape[:2]:
            raise ValueError(
                f"DocBatch.mask shape {tuple(self.mask.shape)} does not match emb (B, S) "
                f"{tuple(self.emb.shape[:2])}"
            )
        if self.mask.dtype != torch.bool:
            raise ValueError(f"DocBatch.mask must be bool, got {self.mask.dtype}")
        if self.whole is not None and tuple(self.whole.shape) != (self.emb.shape[0], self.emb.shape[2]):
            raise ValueError(f"DocBatch.whole must be (B, D) = {(self.emb.shape[0], self.emb.shape[2])}, "
                             f"got {tuple(self.whole.shape)}")
        for name in ("mask", "whole"):  # else every scorer fails on it with torch's own device error
            t = getattr(self, name)
            if t is not None and t.device != self.emb.device:
                raise ValueError(f"DocBatch.{name} is on {t.device} and emb on {self.emb.device}: give them one device")
        if self.whole is not None and self.whole.dtype != self.emb.dtype:  # else torch's matmul error in a scorer
            raise ValueError(f"DocBatch.whole is {self.whole.dtype} and emb {self.emb.dtype}: give them one dtype "
                             "(DocBatch.to(dtype=...) casts both)")
        for name in ("paper_ids", "sentences"):
            value = getattr(self, name)
            if value and len(value) != self.emb.shape[0]:
                raise ValueError(f"DocBatch.{name} has {len(value)} entries for {self.emb.shape[0]} papers")

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_list(
        cls,
        vectors: Sequence[Tensor],
        paper_ids: Sequence[str] = (),
        sentences: Sequence[Sequence[str]] = (),
        whole: Tensor | None = None,
    ) -> "DocBatch":
        """Pad a list of per-paper (S_i, D) tensors into one batch (`whole`: (B, D) or None)."""
        if not vectors:
            raise ValueError("DocBatch.from_list needs at least one paper")
        D = vectors[0].shape[-1]
        first = vectors[0]
        for i, v in enumerate(vectors):  # else pad_sequence's shape or device error names no paper (a dtype: none)
            if v.dim() != 2 or v.shape[1] != D or v.dtype != first.dtype or v.device != first.device:
                who = f"paper {paper_ids[i]}" if i < len(paper_ids) else f"paper {i}"
                raise ValueError(f"DocBatch.from_list: {who} has vectors of shape {tuple(v.shape)}, {v.dtype} on "
                                 f"{v.device}; every paper's must be (S_i, D) with the first paper's D = {D}, "
                                 f"{first.dtype} on {first.device}")
        for i, (v, s) in enumerate(zip(vectors, sentences)):
            if len(s) != v.shape[0]:
                who = f"paper {paper_ids[i]}" if i < len(paper_ids) else f"paper {i}"
                raise ValueError(f"DocBatch.from_list: {who} has {v.shape[0]} vectors and {len(s)} sentences")
        lengths = torch.tensor([v.shape[0] for v in vectors], device=vectors[0].device)
        emb = torch.nn.utils.rnn.pad_sequence(list(vectors), batch_first=True)  # (B, S, D)
        mask = torch.arange(emb.shape[1], device=emb.device)[None, :] < lengths[:, None]  # (B, S)
        return cls(emb, mask, list(paper_ids), [list(s) for s in sentences], whole)

    @classmethod
    def concat(cls, batches: Sequence["DocBatch"]) -> "DocBatch":
        """Stack batches along B, padding S to the longest.

        The batches must hold vectors of one width, dtype and device, and all or none of them paper ids, sentence
        texts and `whole` vectors (a batch of no papers goes with either): ValueError naming the batches, by
        position, that differ. (Joined, the ids or texts would no longer line up with the papers, and `whole` would
        be dropped, for the hybrid scorer to find it missing far from here.)"""
        if not batches:
            raise ValueError("DocBatch.concat needs at least one batch")
        first = batches[0].emb
        for what, of in (("vector width", lambda e: e.shape[2]), ("dtype", lambda e: e.dtype),
                         ("device", lambda e: e.device)):
            odd = [i for i, b in enumerate(batches) if of(b.emb) != of(first)]
            if odd:
                raise ValueError(f"DocBatch.concat: batches {odd} have {what} {of(batches[odd[0]].emb)}, batch 0 "
                                 f"{of(first)}: join batches of one model, dtype and device")
        filled = [i for i, b in enumerate(batches) if len(b)]
        for name, what in (("paper_ids", "paper ids"), ("sentences", "sentence texts"),
                           ("whole", "whole-abstract vectors (`whole`)")):
            lacking = [i for i in filled if (batches[i].whole is None if name == "whole" else not getattr(batches[i], name))]
            if lacking and len(lacking) < len(filled):
                raise ValueError(f"DocBatch.concat: batches {lacking} have no {what}, batches "
                                 f"{[i for i in filled if i not in lacking]} have them: give them to every batch or none")
        S = max(b.emb.shape[1] for b in batches)
        emb = torch.cat([torch.nn.functional.pad(b.emb, (0, 0, 0, S - b.emb.shape[1])) for b in batches])
        mask = torch.cat([torch.nn.functional.pad(b.mask, (0, S - b.mask.shape[1])) for b in batches])
        ids = [p for b in batches for p in b.paper_ids]
        sents = [s for b in batches for s in b.sentences]
        wholes = [b.whole for b in batches if b.whole is not None]
        whole = torch.cat(wholes) if wholes and all(batches[i].whole is not None for i in filled) else None
        return cls(emb, mask, ids, sents, whole)

    # ---- views ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.emb.shape[0]

    @property
    def device(self) -> torch.device:
        return self.emb.device

    @property
    def lengths(self) -> Tensor:
        """(B,) number of selected sentences per paper."""
        return self.mask.sum(dim=1)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "DocBatch":
        whole = None if self.whole is None else self.whole.to(device=device, dtype=dtype)
        return replace(self, emb=self.emb.to(device=device, dtype=dtype), mask=self.mask.to(device), whole=whole)

    def index(self, rows: Sequence[int] | Tensor) -> "DocBatch":
        """The papers at `rows` (a list of integer positions or a 1-D integer index tensor; negative positions count
        from the end). ValueError for a boolean mask or non-integer positions: `torch.as_tensor(..., dtype=long)`
        would read True / False as positions 1 / 0 and 0.7 as 0, and return other papers than the ones meant; and
        for positions out of range."""
        if isinstance(rows, (list, tuple)) and any(is_bool(r) for r in rows):  # a bool among ints: as_tensor makes it 1 / 0
            raise ValueError(f"DocBatch.index takes integer positions, got a boolean among them: {list(rows)[:5]}")
        idx = torch.as_tensor(rows, device=self.emb.device)
        if idx.dim() != 1 or not (idx.numel() == 0 or idx.dtype in _INDEX_DTYPES):
            what = "a boolean mask" if idx.dtype == torch.bool else f"{idx.dim()}-d {idx.dtype} positions"
            raise ValueError(f"DocBatch.index takes a 1-d list or tensor of integer positions, got {what}"
                             + (" (select by a mask with mask.nonzero().flatten())" if idx.dtype == torch.bool else ""))
        idx = idx.long()
        pos = idx.tolist()
        B = len(self)
        if pos and (min(pos) < -B or max(pos) >= B):  # on a GPU, torch's indexing fails by a device-side assert
            raise ValueError(f"DocBatch.index: positions {[p for p in pos if not -B <= p < B][:5]} out of range for "
                             f"{B} papers")
        return DocBatch(
            self.emb[idx],
            self.mask[idx],
            [self.paper_ids[i] for i in pos] if self.paper_ids else [],
            [self.sentences[i] for i in pos] if self.sentences else [],
            None if self.whole is None else self.whole[idx],
        )

    def with_mask(self, mask: Tensor) -> "DocBatch":
        """The same papers with a narrower mask (aspect selection). Widening is refused."""
        mask = mask.to(device=self.mask.device, dtype=torch.bool)
        if mask.shape != self.mask.shape:
            raise ValueError(f"mask shape {tuple(mask.shape)} != batch mask shape {tuple(self.mask.shape)}")
        if bool((mask & ~self.mask).any()):
            raise ValueError("with_mask would select padded sentences; a selection can only narrow the mask")
        return replace(self, mask=mask)

    def select_sentences(self, selection: Sequence[Sequence[int]]) -> "DocBatch":
        """Keep, per paper, only the sentence positions in `selection[i]` (aspect-conditional query).

        Positions are 0-based within the paper. A position must be one of the paper's sentences
        that this batch still selects: it is checked against the mask itself, not against the
        number of selected sentences (after an earlier selection, position 2 of {1, 2} is valid
        although only two sentences are selected) nor against the padded length (padding is never
        a sentence). Raises ValueError naming the paper when a position is out of range, not
        selected in this batch (saying so where the encoder cut it: no vector), or a selection is empty, and when a selection is not a sequence of integer
        positions (a bool would be read as position 0 or 1, a string as its characters).
        """
        if len(selection) != len(self):
            raise ValueError(f"{len(selection)} selections for {len(self)} papers")
        S = self.mask.shape[1]
        mask = torch.zeros_like(self.mask)
        for i, chosen in enumerate(selection):
            name = self.paper_ids[i] if self.paper_ids else f"row {i}"
            chosen = _positions(chosen, name)
            if len(chosen) == 0:
                raise ValueError(f"paper {name}: empty sentence selection")
            n = len(self.sentences[i]) if self.sentences else S  # the paper's sentences (padding excluded)
            bad = [j for j in chosen if not 0 <= j < n]
            if bad:
                raise ValueError(f"paper {name}: sentence indices {bad} out of range 0..{n - 1}")
            selected = self.mask[i].tolist()
            off = [j for j in chosen if j >= S or not selected[j]]
            # a sentence of the paper (known from its texts) with no vector (none, or a zero one outside the mask):
            # the encoder cut it (`overflow="truncate"` past `max_length`); it was blamed on padding or an earlier
            # selection. Without texts a position past the paper's sentences is padding, and can not be told apart.
            cut = [j for j in off if self.sentences and (j >= S or not bool(self.emb[i, j].any()))]
            if cut:
                raise ValueError(f"paper {name}: sentences {cut} have no vector: the encoder cut the paper at its "
                                 "max_length (overflow='truncate'); select among its encoded sentences, or encode "
                                 "with overflow='window'")
            if off:
                raise ValueError(f"paper {name}: sentences {off} are not selected in this batch (padding, or left "
                                 "out by an earlier selection); a selection can only narrow the mask")
            mask[i, list(chosen)] = True
        return self.with_mask(mask)
