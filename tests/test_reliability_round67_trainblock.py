"""Round 67: the README's Train block, run in its order on the real data.

`aspire data align --teacher runs/cosentbert/model` right after the CoSentBert line refused every run: CoSentBert is
trained and saved at `max_seq_length` 64 (configs/cosentbert.yaml), sentence-transformers keeps that 64 as the
saved tokenizer's `model_max_length`, and align took it for the model's position limit, so its default
`max_seq_length` 128 (the length of the committed `cocite_pipeline.align.json`) was "more than the teacher reads"
although the model has 512 positions. Only the position embeddings limit the length now.
"""

from __future__ import annotations

import json

import pytest
from conftest import build_tiny_model

from tests.test_reliability_round15_cocite import _examples_with_a_long_context


def _saved_like_cosentbert(tmp_path):
    """A teacher folder written as `train_cosentbert` writes OUT/model: loaded at max_seq_length 64, saved."""
    from aspire.encoders.cosentbert import load_sentence_model

    model = load_sentence_model(build_tiny_model(tmp_path / "base", max_position=128), 64)
    model.save(str(tmp_path / "cosentbert" / "model"))
    return tmp_path / "cosentbert" / "model"


def test_align_reads_a_cosentbert_teacher_at_its_default_length(tmp_path):
    from aspire.data.align import align_examples
    from aspire.encoders.cosentbert import load_sentence_model

    teacher = load_sentence_model(_saved_like_cosentbert(tmp_path))  # as `aspire data align --teacher` loads it
    assert teacher.max_seq_length == 64  # saved at CoSentBert's length
    examples = _examples_with_a_long_context(tmp_path / "ex")
    # was: "align.max_seq_length=128 is more than the teacher reads: its model has room for 64 word pieces"
    report = align_examples(examples, teacher, tmp_path / "out")
    assert report["config"]["max_seq_length"] == 128 and report["train"]["examples"] == 1
    assert json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8")) == report
    assert teacher.max_seq_length == 64  # restored


def test_align_still_refuses_a_length_over_the_position_embeddings(tmp_path):
    from aspire.data.align import align_examples
    from aspire.data.cocite.config import AlignConfig
    from aspire.encoders.cosentbert import load_sentence_model

    teacher = load_sentence_model(_saved_like_cosentbert(tmp_path))  # 128 positions
    examples = _examples_with_a_long_context(tmp_path / "ex")
    with pytest.raises(ValueError, match=r"align\.max_seq_length=129 is more than the teacher reads: its model has "
                                         r"room for 128 word pieces"):
        align_examples(examples, teacher, tmp_path / "out", AlignConfig(max_seq_length=129))
    assert teacher.max_seq_length == 64 and not (tmp_path / "out").exists()
