"""Round 55: `add_control_codes`' start for a code with no word piece is said; `MixSampler`'s sizes, offsets, seed,
epoch and names are checked, each refusal naming its argument."""

from __future__ import annotations

import warnings

import pytest
import torch

from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.codes import add_control_codes
from aspire.train.mixing import MixSampler


# ---- add_control_codes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["[]", "[ ]"])
def test_code_without_word_pieces_warns_naming_it_and_starts_at_the_old_tables_mean(tiny_model_dir, code):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    table = encoder.model.get_input_embeddings().weight.detach().clone()  # (V, D)
    with pytest.warns(UserWarning, match=r"control code '\[ ?\]' has no word piece"):  # was silent
        assert add_control_codes(encoder.model, encoder.tokenizer, [code]) == [code]
    after = encoder.model.get_input_embeddings().weight.detach()
    assert torch.allclose(after[-1], table.mean(0), atol=1e-7)  # the documented start, brute force


def test_code_with_word_pieces_warns_nothing_and_starts_at_its_pieces(tiny_model_dir):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    table = encoder.model.get_input_embeddings().weight.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        add_control_codes(encoder.model, encoder.tokenizer, ["[METHOD]"])
    pieces = encoder.tokenizer("method", add_special_tokens=False)["input_ids"]
    assert torch.allclose(encoder.model.get_input_embeddings().weight[-1].detach(), table[pieces].mean(0))


# ---- MixSampler -------------------------------------------------------------------------------------------------
def _mix(**kw):
    args = dict(sizes=[12, 8], offsets=[0, 12], mode="mixed", ratios=[1, 1], batch_size=4, seed=7, epoch=0)
    args.update(kw)
    return MixSampler(**args)


@pytest.mark.parametrize("sizes", [[12.0, 8], [12, True], [12, 0], [12, -8], [12, "8"]])
def test_sizes_not_whole_are_refused_naming_sizes_and_the_task(sizes):
    # 12.0 was a TypeError inside torch.randperm naming nothing; True read as 1 example
    with pytest.raises(ValueError, match=r"sizes \(examples per task\).*for task '(a|b)'"):
        _mix(sizes=sizes, names=["a", "b"])


@pytest.mark.parametrize("offsets", [[0, 12.0], [0, True], [-1, 12]])
def test_offsets_not_whole_are_refused(offsets):
    with pytest.raises(ValueError, match="offsets"):  # 12.0 gave float indices (14.0, 19.0) silently
        _mix(offsets=offsets)


@pytest.mark.parametrize("seed", [7.0, True, -1, "7"])
def test_seed_not_whole_is_refused_naming_seed(seed):
    # 7.0 was a RuntimeError of manual_seed; True was silently seed 1
    with pytest.raises(ValueError, match=r"MixSampler: seed must be an integer >= 0"):
        _mix(seed=seed)


@pytest.mark.parametrize("epoch", [1.0, True, -1])
def test_epoch_not_whole_is_refused_naming_epoch(epoch):
    with pytest.raises(ValueError, match=r"MixSampler: epoch must be an integer >= 0"):
        _mix(epoch=epoch)


def test_seed_true_no_longer_reads_as_seed_one():
    assert list(_mix(seed=1))  # a whole seed still works
    with pytest.raises(ValueError, match="seed"):
        _mix(seed=True)


@pytest.mark.parametrize("names", [["a"], ["a", "b", "c"]])
def test_names_of_the_wrong_length_are_refused(names):
    # was silently ignored: a task's error then named it by index
    with pytest.raises(ValueError, match=r"names must be one name a task, got \d name\(s\) for 2 task\(s\)"):
        _mix(sizes=[12, 1], names=names)


def test_names_of_the_right_length_name_the_task_and_none_falls_back_to_indices():
    with pytest.raises(ValueError, match="task 'b': 1 example"):
        _mix(sizes=[12, 1], names=["a", "b"])
    with pytest.raises(ValueError, match="task 1: 1 example"):
        _mix(sizes=[12, 1])
    assert list(_mix(names=("a", "b"))) == list(_mix())  # names change no batch
