"""Which word pieces a contextual encoder gives each sentence: sentences past the first window
(`TruncationRecord`) and sentences that get no word piece at all (`unseen_sentences`); and the
memory-bounded batches papers are encoded in (`budget_batches`).

A sentence that gets no word piece (only characters the tokenizer drops or cannot represent) has no
vector; `ContextualSentenceEncoder.tokenize` refuses a batch holding one, and
`ContextualSentenceEncoder.unseen_sentences` finds them beforehand, so a corpus can reject those
papers with a reason and encode the rest.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from aspire.encoders.inputs import Overflow, TruncationRecord


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
