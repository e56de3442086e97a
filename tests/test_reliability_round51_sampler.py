"""Round 51: `EpochBatchSampler` (aspire/train/data.py) checked against brute-force counts."""

from __future__ import annotations

import pytest

from aspire.train.data import EpochBatchSampler


@pytest.mark.parametrize("limit", [0, -1, -5, 2.5, True])
def test_limit_outside_range_names_the_argument(limit):
    with pytest.raises(ValueError, match=r"limit .*integer >= 1"):
        EpochBatchSampler(10, 4, 0, 0, limit=limit)


@pytest.mark.parametrize("n", [-5, 2.5])
def test_bad_example_count_is_refused(n):
    with pytest.raises(ValueError, match=r"n \(the number of examples\)"):
        EpochBatchSampler(n, 4, 0, 0)


@pytest.mark.parametrize("n,B,W,limit", [(10, 4, 1, None), (10, 2, 2, None), (13, 3, 2, None), (12, 4, 1, None),
                                         (20, 2, 2, 3), (7, 7, 1, None)])
def test_dropped_matches_a_brute_force_count(n, B, W, limit):
    seen = []
    for rank in range(W):
        sampler = EpochBatchSampler(n, B, 5, 1, rank=rank, world_size=W, limit=limit)
        batches = list(sampler)
        assert all(len(b) == B for b in batches) and len(batches) == len(sampler)
        seen += [i for b in batches for i in b]
        assert sampler.dropped == n - len(seen) if rank == W - 1 else True
    assert len(seen) == len(set(seen)) and set(seen) <= set(range(n))  # each example at most once
    full = n // (B * W) if limit is None else min(n // (B * W), limit)
    assert len(seen) == full * B * W
    assert EpochBatchSampler(n, B, 5, 1, world_size=W, limit=limit).dropped == n - full * B * W


def test_epoch_is_seeded_and_resumes_where_it_left_off():
    whole = list(EpochBatchSampler(40, 3, 7, 2, rank=1, world_size=2))
    assert whole == list(EpochBatchSampler(40, 3, 7, 2, rank=1, world_size=2))
    assert list(EpochBatchSampler(40, 3, 7, 2, start=4, rank=1, world_size=2)) == whole[4:]
    assert whole != list(EpochBatchSampler(40, 3, 7, 3, rank=1, world_size=2))  # another epoch, another order
