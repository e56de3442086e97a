"""The batch sampler of CoSentBert's training (`aspire.encoders.cosentbert`): no two rows of a batch share a
co-cited set, a co-cited pair of papers or a text, so no in-batch negative is a paraphrase of its anchor. Its own
module, so that the `cosentbert` command's options load neither torch nor sentence-transformers."""

from __future__ import annotations

import itertools

import torch
from sentence_transformers.base.sampler import DefaultBatchSampler


class DistinctSetBatchSampler(DefaultBatchSampler):
    """Batches in which no two rows share a co-cited set, a co-cited pair or a text (a sentence-transformers batch
    sampler).

    `groups[i]` is row i's set id, its paper ids joined by '|' (`aspire.data.cocite.set_id`). Sets {A, B} and
    {A, B, C} are two sets, but a sentence citing A and B together with C still cites A and B together: the data
    stages treat both as contexts of the pair (A, B) (`examples`, and `split` keeps them on one side), so the two
    sets' rows never share a batch either, where one's positive would be the other's anchor's negative.

    Rows are shuffled; each row joins the first of up to `window` open batches it clashes with in
    nothing, else opens a new batch; a batch is yielded when full, the leftovers (smaller) at the end,
    or when more than `window` batches are open the oldest goes out small; with `drop_last` small
    batches are dropped. Linear in the rows.

    One iteration makes `passes` shuffled passes over the rows, pass k of trainer epoch e seeded by
    `seed + e * passes + k`. How many batches a pass packs into depends on its shuffle, while the
    Hugging Face trainer takes every epoch to be as long as its first and stops an epoch there: a
    longer later epoch lost its last batches untrained. So several epochs are run as the passes of one
    trainer epoch (`aspire.encoders.cosentbert` does), whose length `__len__` counts exactly.
    """

    def __init__(self, dataset, batch_size: int, drop_last: bool, valid_label_columns=None, generator=None,
                 seed: int = 0, *, groups: list[str], window: int = 8, passes: int = 1) -> None:
        super().__init__(dataset, batch_size=batch_size, drop_last=drop_last,
                         valid_label_columns=valid_label_columns, generator=generator, seed=seed)
        if len(groups) != len(dataset):
            raise ValueError(f"groups has {len(groups)} entries for {len(dataset)} rows")
        for name, value in (("passes", passes), ("window", window)):  # 1.5 passes failed in range() mid-training
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if passes < 1:
            raise ValueError(f"passes must be at least 1, got {passes}")
        if window < 1:  # no open batch to join: every batch one row, and with drop_last none at all
            raise ValueError(f"window must be at least 1, got {window}")
        self.keys = [frozenset((("set", g), ("text", a), ("text", p),
                                *(("pair", pair) for pair in itertools.combinations(sorted(set(g.split("|"))), 2))))
                     for g, a, p in zip(groups, dataset["anchor"], dataset["positive"])]
        self.window = window
        self.passes = passes

    def __iter__(self):
        generator = self.generator or torch.Generator()
        for k in range(self.passes):
            generator.manual_seed(self.seed + self.epoch * self.passes + k)
            yield from self._pack(torch.randperm(len(self.keys), generator=generator).tolist())

    def _pack(self, order: list[int]):
        """The batches of one pass over the rows in `order`."""
        open_batches: list[tuple[list[int], set]] = []
        for i in order:
            for rows, used in open_batches:
                if used.isdisjoint(self.keys[i]):
                    rows.append(i)
                    used.update(self.keys[i])
                    break
            else:
                open_batches.append(([i], set(self.keys[i])))
                rows, used = open_batches[-1]
            if len(rows) == self.batch_size:
                open_batches = [b for b in open_batches if b[0] is not rows]
                yield rows
            elif len(open_batches) > self.window:  # the oldest batch keeps clashing: let it go small
                rows = open_batches.pop(0)[0]
                if not self.drop_last:
                    yield rows
        if not self.drop_last:
            yield from (rows for rows, _ in open_batches)

    def __len__(self) -> int:
        """The number of batches this epoch yields (counted by running the linear-time packing), so
        the trainer's step count and learning-rate schedule cover every batch."""
        return sum(1 for _ in self)
