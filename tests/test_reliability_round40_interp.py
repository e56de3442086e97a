"""Round 40: WiSE-FT interpolation (aspire.train.interpolate) and the multi-task batch sampler (aspire.train.mixing),
checked against hand loops."""

from __future__ import annotations

import pytest
import torch

from aspire.train.interpolate import blend
from aspire.train.mixing import MixSampler, split_batch


def _task(i, offsets, sizes):
    return next(t for t in range(len(sizes)) if offsets[t] <= i < offsets[t] + sizes[t])


@pytest.mark.parametrize("mode", ["mixed", "alternating", "sequential"])
def test_resuming_anywhere_gives_the_rest_of_an_unbroken_run_and_ranks_never_overlap(mode):
    sizes, W, B = [30, 17, 13], 2, 6
    offsets = [0, 30, 47]
    ratios = [1.0, 1.0, 1.0] if mode == "sequential" else [3, 2, 1]
    stages = [4, 2, 3] if mode == "sequential" else ()
    for epoch in ([0] if mode == "sequential" else [0, 1, 2]):
        whole = [list(MixSampler(sizes, offsets, mode, ratios, B, 5, epoch, 0, r, W, stage_batches=stages))
                 for r in range(W)]
        for start in range(len(whole[0])):
            for r in range(W):
                rest = MixSampler(sizes, offsets, mode, ratios, B, 5, epoch, start, r, W, stage_batches=stages)
                assert list(rest) == whole[r][start:], (epoch, start, r)
        for k in range(len(whole[0])):
            both = whole[0][k] + whole[1][k]
            assert len(set(both)) == len(both)
            tasks = [_task(i, offsets, sizes) for i in whole[0][k]]
            if mode == "mixed":
                assert [tasks.count(t) for t in range(3)] == split_batch(B, ratios)
            else:
                assert len(tasks) == B and len(set(tasks)) == 1


def test_bad_batch_size_world_size_task_list_or_stages_are_refused_not_divided_or_ignored():
    sizes, offsets = [10, 10], [0, 10]
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        MixSampler(sizes, offsets, "alternating", [1, 1], 0, 0, 0)  # was ZeroDivisionError
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got -2"):
        MixSampler(sizes, offsets, "alternating", [1, 1], -2, 0, 0)  # was one silent batch of 8
    with pytest.raises(ValueError, match="world_size must be an integer >= 1"):
        MixSampler(sizes, offsets, "mixed", [1, 1], 2, 0, 0, world_size=0)
    with pytest.raises(ValueError, match="at least one task"):
        MixSampler([], [], "sequential", [], 2, 0, 0)  # was "min() arg is an empty sequence"
    with pytest.raises(ValueError, match="stage_batches .* sequential only"):
        MixSampler(sizes, offsets, "mixed", [1, 1], 2, 0, 0, stage_batches=[3, 3])  # was silently ignored
    with pytest.raises(ValueError, match="steps >= 1 for every task"):
        MixSampler(sizes, offsets, "sequential", [1, 1], 2, 0, 0, stage_batches=[3.5, 3])  # was a TypeError
    assert len(MixSampler(sizes, offsets, "sequential", [1, 1], 2, 0, 0, stage_batches=[3, 2])) == 5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_blend_is_the_hand_formula_and_exactly_each_model_at_the_ends(dtype):
    gen = torch.Generator().manual_seed(0)
    base, tuned = torch.randn(7, 5, generator=gen, dtype=dtype), torch.randn(7, 5, generator=gen, dtype=dtype)
    assert torch.equal(blend("w", base, tuned, 0.0), base)
    assert torch.equal(blend("w", base, tuned, 1.0), tuned)
    for alpha in (0.1, 0.25, 0.5, 0.9):
        want = [(1 - alpha) * float(b) + alpha * float(t) for b, t in zip(base.flatten(), tuned.flatten())]
        assert torch.allclose(blend("w", base, tuned, alpha).flatten(), torch.tensor(want, dtype=dtype), atol=1e-6)
    grown = torch.randn(9, 5, generator=gen, dtype=dtype)  # two added code rows, kept as trained
    out = blend("embeddings.word_embeddings.weight", base, grown, 0.5)
    assert torch.equal(out[7:], grown[7:]) and torch.allclose(out[:7], (base + grown[:7]) / 2)
    with pytest.raises(ValueError, match="'encoder.w'.*shape"):
        blend("encoder.w", base, grown, 0.5)
    with pytest.raises(ValueError, match="'x' of the fine-tuned model is not in the base"):
        blend("x", None, tuned, 0.5)


def test_a_base_whose_vocabulary_puts_tokens_on_other_rows_is_refused_naming_the_token(tiny_model_dir, examples_dir,
                                                                                      tmp_path):
    from test_interpolate import tuned_model
    from transformers import AutoModel, BertTokenizerFast

    from aspire.train.interpolate import interpolate

    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    vocab = (tiny_model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    i, j = vocab.index("model"), vocab.index("paper")
    vocab[i], vocab[j] = vocab[j], vocab[i]  # same size and architecture; rows i and j mean other words
    other = tmp_path / "other"
    other.mkdir()
    (other / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab=str(other / "vocab.txt"), do_lower_case=True, strip_accents=False).save_pretrained(other)
    AutoModel.from_pretrained(tiny_model_dir).save_pretrained(other)
    with pytest.raises(ValueError, match="token 'model' has id"):  # was: rows of different words blended silently
        interpolate(tuned, 0.5, tmp_path / "out", base=str(other))
    assert interpolate(tuned, 0.5, tmp_path / "ok", base=str(tiny_model_dir)).is_dir()


@pytest.mark.parametrize("kw", [{"batch_size": 0}, {"batch_size": -2}, {"world_size": 0}, {"batch_size": 2.0}])
def test_the_epoch_sampler_refuses_a_batch_or_world_size_below_one(kw):
    # as MixSampler now does: 0 divided by zero, a negative size made batches of the wrong size
    from aspire.train.data import EpochBatchSampler

    settings = {"batch_size": 3, "world_size": 1, **kw}
    with pytest.raises(ValueError, match=rf"EpochBatchSampler: {next(iter(kw))} must be an integer >= 1"):
        EpochBatchSampler(12, settings["batch_size"], seed=0, epoch=0, world_size=settings["world_size"])
