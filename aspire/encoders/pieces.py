"""Which word pieces a contextual encoder gives each sentence: sentences past the first window
(`TruncationRecord`) and sentences that get no word piece at all (`unseen_sentences`); and the
memory-bounded batches papers are encoded in (`budget_batches`).

The papers longer than the first window are named in one warning (`warn_long_papers`): one an `encode` call, or, while
`long_papers_held(encoder)` is open, one for all the encoder's calls in it (`aspire.index.corpus.encode_corpus` encodes a
corpus 128 papers a call, and said "28 paper(s) longer than 256 word pieces" once a call, 33 times over CSFCube's 4,205
abstracts, never the total).

A sentence that gets no word piece (only characters the tokenizer drops or cannot represent) has no
vector; `ContextualSentenceEncoder.tokenize` refuses a batch holding one, and
`ContextualSentenceEncoder.unseen_sentences` finds them beforehand, so a corpus can reject those
papers with a reason and encode the rest.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Sequence

import numpy as np

from aspire.encoders.inputs import Overflow, TruncationRecord

log = logging.getLogger(__name__)
LONG_IDS_SHOWN = 20  # paper ids a long-abstract warning names
_HELD: ContextVar[tuple[object, list[TruncationRecord]] | None] = ContextVar("long_papers_held", default=None)


def listed(ids: Sequence) -> str:
    """`a, b, c` for a message or warning: the first `LONG_IDS_SHOWN` of `ids`, then how many more."""
    more = f" and {len(ids) - LONG_IDS_SHOWN} more" if len(ids) > LONG_IDS_SHOWN else ""
    return ", ".join(str(x) for x in ids[:LONG_IDS_SHOWN]) + more


def warn_long_papers(records: Sequence[TruncationRecord], max_length: int, overflow: Overflow) -> None:
    """One warning naming the papers of `records` (longer than `max_length` word pieces) and how many they are."""
    log.warning("%d paper(s) longer than %d word pieces (%s): sentences past the limit were %s; "
                "`aspire encode --model M --corpus FILE --long-report` lists every one", len(records), max_length,
                listed([r.paper_id for r in records]),
                "encoded in continuation windows" if overflow == "window" else "left out of the mask")


def hold_long_papers(encoder, records: Sequence[TruncationRecord]) -> bool:
    """Keep `records` for the open `long_papers_held(encoder)` and return True, or return False where none is open
    for `encoder` (the caller warns itself)."""
    held = _HELD.get()
    if held is None or held[0] is not encoder:
        return False
    held[1].extend(records)
    return True


@contextmanager
def long_papers_held(encoder) -> Iterator[list[TruncationRecord]]:
    """While open, `encoder.encode` keeps the papers it finds longer than its window (`hold_long_papers`) instead of
    warning once a call; on a clean exit one warning names them all (`warn_long_papers`). Yields the list kept."""
    held: list[TruncationRecord] = []
    token = _HELD.set((encoder, held))
    try:
        yield held
    finally:
        _HELD.reset(token)
    if held:
        warn_long_papers(held, encoder.max_length, encoder.overflow)


def truncation_records(paper_ids: Sequence[str], sent_index: np.ndarray, row_paper: np.ndarray,
                       first_row: np.ndarray, overflow: Overflow) -> list[TruncationRecord]:
    """One record per paper with rows past its first: `sent_index (R, T)` sentence of each abstract piece
    (-1 = none; the title's pieces, repeated in every window, must be -1 here or the title would read as split
    by the window), `row_paper (R,)` paper of each row, `first_row (R,)` whether a row is its paper's first."""
    records = []
    for b in np.unique(row_paper[~first_row]).tolist():
        in_first = set(sent_index[first_row & (row_paper == b)].ravel().tolist()) - {-1}
        in_later = set(sent_index[~first_row & (row_paper == b)].ravel().tolist()) - {-1}
        records.append(TruncationRecord(paper_ids[b], sorted(in_later - in_first), sorted(in_later & in_first), overflow))
    return records


def unseen_sentences(n_sentences: Sequence[int], sent_index: np.ndarray, row_paper: np.ndarray,
                     keep: np.ndarray) -> list[list[int]]:
    """Per paper, the positions of its sentences that no kept row gives a word piece: `sent_index (R, T)`
    sentence of each piece (-1 = none), `row_paper (R,)` paper (position) of each row, `keep (R,)` whether a row
    is encoded. A sentence with pieces only in rows that are not kept (left out by `overflow="truncate"`) does not
    count. Judged by position, never by paper id: two papers sharing an id in one call are told apart."""
    out = []
    for b, n in enumerate(n_sentences):
        rows = row_paper == b
        seen = set(sent_index[rows & keep].ravel().tolist())
        cut = set(sent_index[rows & ~keep].ravel().tolist())
        out.append([i for i in range(n) if i not in seen and i not in cut])
    return out


def raise_if_unseen(paper_ids: Sequence[str], sentences: Sequence[Sequence[str]], unseen: Sequence[list[int]],
                    titled: Sequence[bool] | None = None) -> None:
    """Refuse the first paper with a sentence that gets no word piece, naming it and the sentence;
    `titled` (one a paper): whether its sentence 0 is its title, which the message then says. Counts that differ
    from the papers' are a ValueError (zipped, the papers past the shortest were let through unchecked)."""
    counts = {"sentences": len(sentences), "unseen": len(unseen), **({} if titled is None else {"titled": len(titled)})}
    if any(n != len(paper_ids) for n in counts.values()):
        raise ValueError(f"raise_if_unseen: {len(paper_ids)} papers, but {counts} (one entry a paper)")
    for b, (pid, sents, empty) in enumerate(zip(paper_ids, sentences, unseen)):
        if empty:
            title = " (sentence 0 is the paper's title)" if titled is not None and titled[b] and empty[0] == 0 else ""
            raise ValueError(f"paper {pid}: sentence(s) {empty} produced no word pieces "
                             f"(e.g. {sents[empty[0]]!r}){title}; remove or fix them")


def budget_batches(order: Sequence[int], sizes: Sequence[int], max_items: int, max_total: int) -> list[list[int]]:
    """Consecutive runs of `order`, each at most `max_items` long and at most `max_total` in summed
    `sizes` (an item larger than `max_total` forms a batch of its own). Budgets below 1 are a ValueError (they
    would make every batch one item)."""
    if max_items < 1 or max_total < 1:
        raise ValueError(f"budget_batches: max_items ({max_items}) and max_total ({max_total}) must be at least 1")
    batches: list[list[int]] = []
    total = 0
    for i in order:
        if not batches or len(batches[-1]) >= max_items or total + sizes[i] > max_total:
            batches.append([])
            total = 0
        batches[-1].append(i)
        total += sizes[i]
    return batches
