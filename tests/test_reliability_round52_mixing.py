"""Round 52: MixSampler's limit, start and rank checks; the sampler's batches against brute-force references."""

from __future__ import annotations

import pytest

from aspire.train.data import EpochBatchSampler
from aspire.train.mixing import MixSampler, alternating_cycle, split_batch


def _mix(mode="mixed", sizes=(12, 8), ratios=(1, 1), batch_size=4, **kw):
    offsets = [sum(sizes[:t]) for t in range(len(sizes))]
    if mode == "sequential":
        kw.setdefault("stage_batches", [3, 2])
        ratios = [1] * len(sizes)
    return MixSampler(list(sizes), offsets, mode, list(ratios), batch_size, seed=7, epoch=0, **kw)


@pytest.mark.parametrize("limit", [0, -1, 2.5, True])
def test_limit_not_whole_is_refused_naming_limit(limit):
    with pytest.raises(ValueError, match="limit"):
        _mix(limit=limit)


@pytest.mark.parametrize("kw", [dict(start=1.0), dict(start=True), dict(rank=True, world_size=2),
                                dict(rank=1.0, world_size=2)])
def test_start_or_rank_not_integer_is_refused(kw):
    with pytest.raises(ValueError, match="must be an integer"):
        _mix(**kw)
    with pytest.raises(ValueError, match="must be an integer"):
        EpochBatchSampler(20, 2, 0, 0, **kw)


def test_limit_whole_keeps_first_batches():
    full, cut = list(_mix()), list(_mix(limit=2))
    assert cut == full[:2]


def _brute_stream(sampler, t, size, n_chunks):
    """Task t's chunks, brute force: its permutations one pass after another, cut rank by rank."""
    import torch
    W, r, n = sampler.world_size, sampler.rank, sampler.sizes[t]
    per_pass = n // (size * W)
    out = []
    for j in range(n_chunks):
        p = j // per_pass
        gen = torch.Generator().manual_seed(((sampler.seed * 1_000_003 + t) * 1_000_003 + p) % 2**64)
        perm = torch.randperm(n, generator=gen).tolist()
        k = j % per_pass
        out.append([i + sampler.offsets[t] for i in perm[k * size * W + r * size: k * size * W + (r + 1) * size]])
    return out


@pytest.mark.parametrize("mode", ["mixed", "alternating", "sequential"])
def test_batches_match_brute_force_and_resume_and_shards(mode):
    sizes, ratios = (12, 8), (2, 1)
    for epoch in (0, 1) if mode != "sequential" else (0,):
        per_rank = []
        for rank in range(2):
            s = MixSampler(list(sizes), [0, 12], mode, list(ratios) if mode != "sequential" else [1, 1], 2, 3, epoch,
                           rank=rank, world_size=2, stage_batches=[3, 2] if mode == "sequential" else ())
            got = list(s)
            assert len(got) == len(s)
            per_rank.append(got)
            # resume at every position gives exactly the remaining batches
            for start in range(len(got)):
                r = MixSampler(list(sizes), [0, 12], mode, list(ratios) if mode != "sequential" else [1, 1], 2, 3,
                               epoch, start=start, rank=rank, world_size=2,
                               stage_batches=[3, 2] if mode == "sequential" else ())
                assert list(r) == got[start:]
            # brute force: the documented share of every batch
            full = s.num_batches
            g0 = epoch * full
            if mode == "mixed":
                shares = split_batch(2, ratios)
                streams = [_brute_stream(s, t, shares[t], g0 + full) for t in range(2)]
                want = [streams[0][g] + streams[1][g] for g in range(g0, g0 + full)]
            elif mode == "alternating":
                cyc = alternating_cycle(ratios)
                streams = [_brute_stream(s, t, 2, g0 + full) for t in range(2)]
                seen, want = [0, 0], []
                for g in range(g0 + full):
                    t = cyc[g % len(cyc)]
                    if g >= g0:
                        want.append(streams[t][seen[t]])
                    seen[t] += 1
            else:
                streams = [_brute_stream(s, t, 2, 3) for t in range(2)]
                want = streams[0][:3] + streams[1][:2]
            assert got == want
        # ranks disjoint within every micro-batch
        for a, b in zip(*per_rank):
            assert not set(a) & set(b)


def test_mixed_every_example_once_per_pass():
    s = MixSampler([8, 4], [0, 8], "mixed", [1, 1], 2, 0, 0)  # shares [1, 1]; 12 // 2 = 6 batches
    got = list(s)
    assert len(got) == 6 and all(len(b) == 2 and b[0] < 8 <= b[1] for b in got)
    assert len({b[0] for b in got}) == 6  # task 0: 6 of its 8 examples, none twice
    assert sorted(b[1] for b in got[:4]) == [8, 9, 10, 11]  # task 1: one whole pass, then the next begins
    assert list(MixSampler([8, 4], [0, 8], "mixed", [1, 1], 2, 0, 0)) == got  # seeded
    assert list(MixSampler([8, 4], [0, 8], "mixed", [1, 1], 2, 1, 0)) != got
