"""Round 47: the recorded tokenizer's max_length edges, and the multi-task samplers' ratios, coverage, seeds, resume."""

from __future__ import annotations

from collections import Counter

import pytest

from aspire.train.mixing import MixSampler, alternating_cycle, split_batch

LONG = "method results show a new approach " * 40  # 242 pieces with the tiny vocabulary


@pytest.fixture(scope="module")
def tokenizers_pair(tiny_model_dir):
    from transformers import AutoTokenizer

    from aspire.encoders.recorded_tokenizer import rebuild, record_spec

    reference = AutoTokenizer.from_pretrained(tiny_model_dir)
    return reference, rebuild(record_spec(reference))


def test_recorded_tokenizer_matches_transformers_at_valid_lengths(tokenizers_pair):
    reference, recorded = tokenizers_pair
    texts = [LONG, "paper", ""]
    for length in (8, 16, 128, 10**6, 2**64 - 1):
        for call in (dict(text=texts, truncation=True, max_length=length, return_offsets_mapping=True, padding=True),
                     dict(text=["a title"] * 3, text_pair=texts, truncation="only_second", max_length=length,
                          return_overflowing_tokens=True, return_offsets_mapping=True, padding=True)):
            want, got = reference(**call), recorded(**call)
            assert {k: list(v) for k, v in want.items()} == {k: list(v) for k, v in got.items()}, (length, call)


@pytest.mark.parametrize("length", [0, 1, 2, -5, 2**64, 10**21, 16.0, True])
def test_recorded_tokenizer_refuses_max_length_it_cannot_honour(tokenizers_pair, length):
    """0 was read as the model's 128 (transformers cut nothing: 242 pieces); 1 or 2 below a pair's 3 special pieces
    cut nothing silently; 10**21 was an OverflowError naming no option."""
    _, recorded = tokenizers_pair
    with pytest.raises(ValueError, match="max_length"):
        recorded(["a title"], [LONG], truncation="only_second", max_length=length, return_overflowing_tokens=True)
    if length not in (2,):  # one text has 2 special pieces: 2 is valid there
        with pytest.raises(ValueError, match="max_length"):
            recorded([LONG], truncation=True, max_length=length)
    assert len(recorded([LONG], max_length=0)["input_ids"][0]) == 242  # no truncation: max_length is not read


def _sampler(mode, sizes=(40, 24, 12), ratios=(3, 2, 1), **kw):
    offsets = [sum(sizes[:t]) for t in range(len(sizes))]
    kw.setdefault("batch_size", 6)
    kw.setdefault("seed", 7)
    kw.setdefault("epoch", 0)
    return MixSampler(list(sizes), offsets, mode, list(ratios), **kw)


def _task(i, sizes=(40, 24, 12)):
    return next(t for t in range(len(sizes)) if i < sum(sizes[: t + 1]))


def test_mixed_and_alternating_batches_follow_the_ratios():
    assert split_batch(6, [3, 2, 1]) == [3, 2, 1] and split_batch(7, [1, 1]) in ([4, 3], [3, 4])
    for epoch in range(3):
        for batch in _sampler("mixed", epoch=epoch):
            assert Counter(_task(i) for i in batch) == {0: 3, 1: 2, 2: 1}
    counts = Counter()
    for epoch in range(10):  # 10 epochs x 12 micro-batches = 2 cycles of 60
        for batch in _sampler("alternating", epoch=epoch):
            assert len({_task(i) for i in batch}) == 1 and len(batch) == 6
            counts[_task(batch[0])] += 1
    assert counts == {0: 60, 1: 40, 2: 20}  # exactly 120 x 3/6, 2/6, 1/6
    cycle = alternating_cycle([3, 2, 1])
    assert Counter(cycle) == {0: 30, 1: 20, 2: 10}
    assert max(len(run) for run in "".join(map(str, cycle)).split("0")) <= 2  # spread, not blocks


def test_each_task_covered_once_per_pass_across_ranks_deterministic_and_resumable():
    sizes = (40, 24, 12)
    # mixed, 2 ranks, share of task 2 is 1 pair: one pass over task 2 is 12 // 2 = 6 micro-batches
    seen = [[] for _ in sizes]
    for rank in (0, 1):
        for g in range(6):
            for i in _sampler("mixed", batch_size=6, world_size=2, rank=rank).batch(g):
                seen[_task(i)].append(i)
    assert sorted(seen[2]) == list(range(64, 76))  # every example of task 2 once
    assert len(set(seen[0])) == len(seen[0]) == 36 and len(set(seen[1])) == len(seen[1]) == 24
    assert sorted(seen[1]) == list(range(40, 64))
    a, b = list(_sampler("alternating", seed=3)), list(_sampler("alternating", seed=3))
    assert a == b and a != list(_sampler("alternating", seed=4))
    for mode, kw in (("mixed", {}), ("alternating", {}), ("sequential", dict(ratios=(1, 1, 1), stage_batches=(3, 2, 4)))):
        whole = list(_sampler(mode, epoch=0, **kw))
        for start in range(len(whole)):
            assert list(_sampler(mode, epoch=0, start=start, **kw)) == whole[start:], (mode, start)


@pytest.mark.parametrize("kw, words", [
    (dict(ratios=(3, 0, 1)), "ratio"), (dict(ratios=(3, float("nan"), 1)), "ratio"),
    (dict(ratios=(3, 2)), "ratio"), (dict(batch_size=0), "batch_size"), (dict(world_size=0), "world_size"),
    (dict(start=12), "micro-batch 12"), (dict(start=-1), "micro-batch -1"), (dict(rank=1), "rank 1"),
    (dict(sizes=(40, 24, 0)), "task 2"), (dict(batch_size=60, ratios=(100, 100, 1)), "ratio"),
])
def test_bad_ratios_sizes_and_positions_are_refused_by_name(kw, words):
    with pytest.raises(ValueError, match=words):
        _sampler("mixed", **kw)
