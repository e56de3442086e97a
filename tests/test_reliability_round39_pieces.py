"""Round 39, `aspire.encoders.pieces` and `aspire.encoders.cosent_sampler` against brute-force loops on tiny hand-made
inputs: truncation records and unseen sentences against a loop over every piece, budget batches against their rule
(every paper once, in order, within budget but for a paper alone, no batch that could have taken the next paper),
and the sampler's batches pair by pair, its rows once a pass and its seeds. Fixed: `budget_batches` given
`max_items` or `max_total` below 1 made every batch one item without a word (for `max_items=0` a batch of 1 broke its
own "at most `max_items` long"); `encode(max_batch_chars=0)` or a negative one encoded one paper at a time."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import numpy as np
import pytest

from aspire.encoders.pieces import budget_batches, truncation_records, unseen_sentences


# ---- budget batches ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_items, max_total", [(0, 10), (-1, 10), (3, 0), (3, -5)])
def test_budget_batches_refuse_an_empty_budget(max_items, max_total):
    """Old code: (0, 10) gave [[0], [1], [2]], batches of 1 item where at most 0 were allowed; (3, 0) gave one item a
    batch, silently."""
    with pytest.raises(ValueError, match="max_items|max_total"):
        budget_batches([0, 1, 2], [1, 1, 1], max_items, max_total)


def _random_rows(rng: random.Random):
    """Random (R, T) sentence indices of 1-4 papers, each with 1-3 windows whose pieces run forward through its
    sentences (a window's last sentence may open the next one), some sentences with no piece at all."""
    n_papers = rng.randint(1, 4)
    n_sentences = [rng.randint(1, 6) for _ in range(n_papers)]
    rows, row_paper = [], []
    T = 8
    for b, n in enumerate(n_sentences):
        pieces = sorted(rng.choice(range(n)) for _ in range(rng.randint(0, 14)))
        windows = [pieces[i : i + T] for i in range(0, max(len(pieces), 1), T)]
        for w in windows:
            rows.append(w + [-1] * (T - len(w)))
            row_paper.append(b)
    sent_index = np.array(rows, dtype=np.int64).reshape(len(rows), T)
    row_paper = np.array(row_paper)
    first_row = np.ones(len(row_paper), dtype=bool)
    first_row[1:] = row_paper[1:] != row_paper[:-1]
    return n_sentences, sent_index, row_paper, first_row


def test_truncation_records_and_unseen_sentences_against_a_loop_over_pieces():
    rng = random.Random(7)
    for _ in range(300):
        n_sentences, sent_index, row_paper, first_row = _random_rows(rng)
        ids = [f"p{b}" for b in range(len(n_sentences))]
        records = {r.paper_id: r for r in truncation_records(ids, sent_index, row_paper, first_row, "window")}
        for keep in (np.ones(len(row_paper), dtype=bool), first_row):
            unseen = unseen_sentences(n_sentences, sent_index, row_paper, keep)
            for b, n in enumerate(n_sentences):
                want_unseen = []
                for s in range(n):
                    anywhere = any(sent_index[r, t] == s for r in range(len(row_paper)) if row_paper[r] == b
                                   for t in range(sent_index.shape[1]))
                    if not anywhere:
                        want_unseen.append(s)
                assert unseen[b] == want_unseen, (b, sent_index, keep)
        for b in range(len(n_sentences)):
            first = {int(s) for r in range(len(row_paper)) if row_paper[r] == b and first_row[r] for s in sent_index[r]}
            later = {int(s) for r in range(len(row_paper)) if row_paper[r] == b and not first_row[r]
                     for s in sent_index[r]}
            cut = sorted(s for s in later - first if s >= 0)
            split = sorted(s for s in later & first if s >= 0)
            has_later = any(row_paper[r] == b and not first_row[r] for r in range(len(row_paper)))
            if has_later:
                assert (records[f"p{b}"].cut, records[f"p{b}"].partial) == (cut, split)
            else:
                assert f"p{b}" not in records


def test_truncation_records_tell_papers_sharing_an_id_apart_by_position():
    sent_index = np.array([[0, 1], [1, 2], [0, -1], [0, 1], [2, -1]])
    row_paper = np.array([0, 0, 1, 2, 2])
    first_row = np.array([True, False, True, True, False])
    records = truncation_records(["x", "y", "x"], sent_index, row_paper, first_row, "truncate")
    assert [(r.paper_id, r.cut, r.partial, r.handled_by) for r in records] == [
        ("x", [2], [1], "truncate"), ("x", [2], [], "truncate")]


# ---- the CoSentBert sampler ------------------------------------------------------------------------------------------
def _rows(n: int = 60, seed: int = 0):
    from datasets import Dataset

    rng = random.Random(seed)
    papers = [f"P{i}" for i in range(7)]
    groups = ["|".join(sorted(rng.sample(papers, rng.randint(2, 3)))) for _ in range(n)]
    texts = [f"text {i}" for i in range(40)]
    anchors = [rng.choice(texts) for _ in range(n)]
    positives = [rng.choice(texts) for _ in range(n)]
    return Dataset.from_dict({"anchor": anchors, "positive": positives}), groups, anchors, positives


def _clash(i, j, groups, anchors, positives) -> bool:
    shared = set(groups[i].split("|")) & set(groups[j].split("|"))
    return groups[i] == groups[j] or len(shared) >= 2 or bool({anchors[i], positives[i]} & {anchors[j], positives[j]})


@pytest.mark.parametrize("batch_size, window, drop_last", [(1, 1, False), (3, 2, False), (5, 8, True), (64, 4, False)])
def test_sampler_batches_pair_by_pair_rows_once_a_pass_and_seeds(batch_size, window, drop_last):
    from aspire.encoders.cosent_sampler import DistinctSetBatchSampler

    data, groups, anchors, positives = _rows()
    make = lambda seed, passes=1: DistinctSetBatchSampler(  # noqa: E731
        data, batch_size=batch_size, drop_last=drop_last, seed=seed, groups=groups, window=window, passes=passes)
    sampler = make(11, passes=2)
    batches = list(sampler)
    assert len(sampler) == len(batches) and list(make(11, passes=2)) == batches
    for b in batches:
        assert 1 <= len(b) <= batch_size and (len(b) == batch_size or not drop_last)
        for i, j in itertools.combinations(b, 2):
            assert not _clash(i, j, groups, anchors, positives), (i, j)
    used = Counter(i for b in batches for i in b)
    if drop_last:
        assert max(used.values()) <= 2
    else:
        assert used == Counter({i: 2 for i in range(len(groups))})
    # pass k of epoch e is seeded seed + e * passes + k: epoch 1 of a 2-pass sampler is passes 2 and 3 of seed 11,
    # i.e. the single passes of seeds 13 and 14
    sampler.set_epoch(1)
    assert list(sampler) == list(make(13)) + list(make(14))
