"""Round 31: training data (aspire.train.data) and weight interpolation (aspire.train.interpolate), each checked
against a hand loop on tiny inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_interpolate import tuned_model, weights

from aspire.data.papers import Paper
from aspire.train.config import DataConfig
from aspire.train.data import EpochBatchSampler, Example, TripletCollator, read_examples
from aspire.train.interpolate import blend, interpolate, soup

PAPERS = {f"p{i}": Paper(f"p{i}", f"title {i}", [f"sentence {k} of {i}." for k in range(3)]) for i in range(8)}


def write_lines(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


# ---- the sampler ------------------------------------------------------------------------------------------------
def test_sampler_refuses_a_start_past_the_epoch_rather_than_yielding_nothing():
    # a resumed run whose saved position lies past the epoch (examples file rebuilt smaller) got an empty
    # sampler, and the trainer's `while step < total` loop waited for the epoch's end forever
    assert len(EpochBatchSampler(10, 3, 0, 0, start=2)) == 1
    for start in (3, 5, -1):
        with pytest.raises(ValueError, match=rf"micro-batch {start} to start from .* epoch's 3 micro-batches"):
            EpochBatchSampler(10, 3, 0, 0, start=start)
    with pytest.raises(ValueError, match="micro-batch 2 .* epoch's 2 micro-batches"):  # capped by `limit`
        EpochBatchSampler(30, 3, 0, 0, start=2, limit=2)


def test_sampler_refuses_a_rank_outside_the_world():
    # rank 2 of 2 read the slice of the next global batch: examples twice an epoch, silently
    with pytest.raises(ValueError, match="rank 2 is not one of the 2 rank"):
        EpochBatchSampler(13, 3, 0, 0, rank=2, world_size=2)
    with pytest.raises(ValueError, match="rank -1"):
        EpochBatchSampler(13, 3, 0, 0, rank=-1, world_size=2)


@pytest.mark.parametrize("n,B,W", [(13, 3, 2), (12, 4, 1), (50, 4, 3)])
def test_sampler_matches_a_hand_cut_of_the_seeded_permutation(n, B, W):
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(7 * 1_000_003 + 2)).tolist()
    shards = [list(EpochBatchSampler(n, B, 7, 2, rank=r, world_size=W)) for r in range(W)]
    K = n // (B * W)
    for r in range(W):
        assert shards[r] == [perm[k * B * W + r * B: k * B * W + (r + 1) * B] for k in range(K)]
    used = [i for s in shards for b in s for i in b]
    assert len(used) == len(set(used)) == K * B * W  # each example at most once, the tail sits out
    assert shards[0] == list(EpochBatchSampler(n, B, 7, 2, rank=0, world_size=W))  # reproducible
    assert list(EpochBatchSampler(n, B, 7, 2, start=1, world_size=W)) == shards[0][1:]


# ---- reading examples --------------------------------------------------------------------------------------------
def test_malformed_negative_ids_are_refused_even_when_unused(tmp_path):
    # the docstring promised it; without data.example_negatives a string was read silently, and the same file
    # failed only once the switch was turned on
    path = write_lines(tmp_path / "examples.train.jsonl", [
        {"query_id": "p0", "positive_id": "p1", "set_ids": ["p0|p1"], "negative_ids": ["p5"]},
        {"query_id": "p2", "positive_id": "p3", "set_ids": ["p2|p3"], "negative_ids": "p5"}])
    for used in (False, True):
        with pytest.raises(ValueError, match=r"examples\.train\.jsonl:2: negative_ids must be a list"):
            read_examples(path, DataConfig(examples_dir=str(tmp_path), example_negatives=used), PAPERS)


def test_examples_match_a_hand_reading_in_both_directions(tmp_path):
    path = write_lines(tmp_path / "examples.train.jsonl", [
        {"query_id": "p0", "positive_id": "p1", "set_ids": ["p0|p1|p2"], "negative_ids": ["p2", "p6"],
         "cc_align": [2, 0]},
        {"query_id": "p1", "positive_id": "p3", "set_ids": ["p1|p3"], "negative_ids": ["p7"]},
        {"query_id": "p4", "positive_id": "p5", "set_ids": ["p4|p5"]}])
    cfg = DataConfig(examples_dir=str(tmp_path), example_negatives=True)
    got = read_examples(path, cfg, PAPERS, hard={"p1": ["p0", "p4"]})
    assert got == [
        Example("p0", "p1", ("p0", "p1", "p2"), "p6", (2, 0)),  # p2 is co-cited: skipped
        Example("p1", "p0", ("p0", "p1", "p2", "p3"), "p4", (0, 2)),  # p3 co-cited with p1 on line 2; hard first
        Example("p1", "p3", ("p0", "p1", "p2", "p3"), "p4", None),
        Example("p3", "p1", ("p1", "p3"), "p7", None),
        Example("p4", "p5", ("p4", "p5"), None, None),
        Example("p5", "p4", ("p4", "p5"), None, None)]
    one = read_examples(path, DataConfig(examples_dir=str(tmp_path), both_directions=False, max_examples=2), PAPERS)
    assert [(e.query_id, e.positive_id, e.negative) for e in one] == [("p0", "p1", None), ("p1", "p3", None)]


@pytest.mark.parametrize("line,match", [
    ({"query_id": "p0", "positive_id": "p1", "set_ids": ["p0|p1"], "cc_align": [1, -1]}, "cc_align must be two"),
    ({"query_id": "p0", "positive_id": "p1", "set_ids": ["p0|p1"], "cc_align": [1.0, 2]}, "cc_align must be two"),
    ({"query_id": "p0", "positive_id": "p1", "set_ids": ["p0|p9"]}, "'p9' has no abstract"),
    ({"query_id": "p0", "positive_id": "p0", "set_ids": ["p0|p1"]}, "with itself"),
    ({"query_id": "p1", "positive_id": "p0", "set_ids": ["p0|p1"]}, "repeats the example of line 1"),
])
def test_a_malformed_second_line_is_refused_naming_it(tmp_path, line, match):
    first = {"query_id": "p0", "positive_id": "p1", "set_ids": ["p0|p1"]} if "repeats" in match else \
        {"query_id": "p2", "positive_id": "p3", "set_ids": ["p2|p3"]}
    path = write_lines(tmp_path / "examples.train.jsonl", [first, line])
    with pytest.raises(ValueError, match=rf"examples\.train\.jsonl:2: .*{match}"):
        read_examples(path, DataConfig(examples_dir=str(tmp_path)), PAPERS)


# ---- collation ---------------------------------------------------------------------------------------------------
def test_collation_matches_a_hand_loop():
    told = {}

    def tokenize(papers, tasks=None):
        told.update(ids=[p.paper_id for p in papers], tasks=tasks)
        return "inputs"

    teacher = {f"p{i}": np.eye(8, dtype=np.float32)[i] + 0.5 for i in range(7)}  # p7 has none
    collate = TripletCollator(tokenize, PAPERS, weights=(1.0, 2.0), task_names=("cocite", "distill"),
                              sources=("zz",), teacher=teacher)
    examples = [Example("p0", "p1", ("p0", "p1", "p2"), "p5", (1, 2)),
                Example("p3", "p4", ("p3", "p4"), None, None, task=1),
                Example("p6", "p7", ("p6", "p7"), "p2", (0, 0), source="zz", task=1)]
    batch = collate(examples)
    index = {pid: i for i, pid in enumerate(sorted([*PAPERS, "zz"]))}
    assert told["ids"] == ["p0", "p3", "p6", "p1", "p4", "p7", "p5", "p2"]
    assert told["tasks"] == ["cocite", "distill", "distill"] * 2 + ["cocite", "distill"]
    G = max(len(e.members) for e in examples)
    for b, e in enumerate(examples):
        row = [index[m] for m in e.members] + [-1] * (G - len(e.members))
        assert batch.group_ids[b].tolist() == row
    assert batch.pos_ids.tolist() == [index["p1"], index["p4"], index["zz"]]
    assert batch.align.tolist() == [[1, 2], [-1, -1], [0, 0]]
    assert batch.hard_rows.tolist() == [0, -1, 1] and batch.hard_ids.tolist() == [index["p5"], index["p2"]]
    assert batch.task_ids.tolist() == [0, 1, 1] and batch.task is None and batch.weights.tolist() == [1.0, 2.0]
    candidates = ["p1", "p4", "p7", "p5", "p2"]
    for b, e in enumerate(examples):
        for c, pid in enumerate(candidates):
            value = float(batch.teacher[b, c])
            if e.task != 1 or pid not in teacher:
                assert np.isnan(value), (b, pid)
            else:
                assert value == pytest.approx(float(teacher[e.query_id] @ teacher[pid]))


# ---- interpolation -----------------------------------------------------------------------------------------------
def test_blend_is_exact_at_the_ends_the_mean_at_one_half_and_keeps_equal_id_buffers():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(500, generator=gen), torch.randn(500, generator=gen)
    assert torch.equal(blend("w", a, b, 0.0), a) and torch.equal(blend("w", a, b, 1.0), b)
    assert torch.allclose(blend("w", a, b, 0.5), (a + b) / 2, atol=1e-6, rtol=0)
    ids = torch.arange(6)
    assert torch.equal(blend("embeddings.position_ids", ids, ids.clone(), 0.3), ids)
    with pytest.raises(ValueError, match="'embeddings.position_ids': non-float buffers differ"):
        blend("embeddings.position_ids", ids, ids.flip(0), 0.3)
    with pytest.raises(ValueError, match="'x' is torch.float32 in the fine-tuned model, torch.int64 in the base"):
        blend("x", ids, ids.float(), 0.5)
    with pytest.raises(ValueError, match="'x' of the fine-tuned model is not in the base"):
        blend("x", None, a, 0.5)


def test_interpolation_ends_are_each_model_exactly_and_a_soup_is_the_mean(tiny_model_dir, examples_dir, tmp_path):
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    base, end = weights(tiny_model_dir), weights(tuned)
    for alpha, want in ((0.0, base), (1.0, end)):
        got = weights(interpolate(tuned, alpha, tmp_path / f"a{alpha}"))
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in got), alpha
    mean = weights(soup([tuned, tmp_path / "a0.0"], tmp_path / "soup"))
    for k in mean:
        if mean[k].is_floating_point():
            assert torch.allclose(mean[k], (base[k] + end[k]) / 2, atol=1e-6, rtol=0), k
        else:
            assert torch.equal(mean[k], end[k]), k
