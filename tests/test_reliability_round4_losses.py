"""Hostile inputs to the training data reader, the task mixing and the losses: each is refused with an error
naming the file, line or key, never trained on silently."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from test_train import tiny_config, write_examples_dir

from aspire.losses import triplet_margin_dist_loss
from aspire.losses.bce import PairBCELoss
from aspire.losses.multi_similarity import MultiSimilarityLoss
from aspire.losses.ranking import MultipleNegativesRankingLoss
from aspire.train.config import DataConfig
from aspire.train.data import TripletCollator, _read_hard_negatives, load_split
from aspire.train.mixing import alternating_cycle, split_batch
from aspire.train.trainer import build_model, run


@pytest.fixture(scope="module")
def clean_dir(tmp_path_factory) -> Path:
    return write_examples_dir(tmp_path_factory.mktemp("clean"))


def edited(clean: Path, tmp_path: Path, edit) -> Path:
    """A copy of the examples directory `clean` whose train examples `edit(lines)` changed in place."""
    root = tmp_path / "examples"
    shutil.copytree(clean, root)
    path = root / "examples.train.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    edit(lines)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


# ---- the examples file ------------------------------------------------------------------------------------
def test_a_repeated_pair_is_refused_naming_both_lines(clean_dir, tmp_path):
    # both orders: with both_directions each line already trains both ways, so a repeat doubles the pair's weight
    for k, edit in enumerate((lambda L: L.append(dict(L[0])),
                              lambda L: L.append({**L[0], "query_id": L[0]["positive_id"],
                                                  "positive_id": L[0]["query_id"]}))):
        root = edited(clean_dir, tmp_path / str(k), edit)
        with pytest.raises(ValueError, match=r"examples\.train\.jsonl:\d+: the pair .* repeats the example of line 1"):
            load_split(DataConfig(examples_dir=str(root)), "train")


def test_a_paper_paired_with_itself_is_refused(clean_dir, tmp_path):
    root = edited(clean_dir, tmp_path, lambda L: L[0].update(positive_id=L[0]["query_id"]))
    with pytest.raises(ValueError, match=r"examples\.train\.jsonl:1: the example pairs paper 'p0_0' with itself"):
        load_split(DataConfig(examples_dir=str(root)), "train")


def test_set_ids_as_one_string_is_refused_not_read_letter_by_letter(clean_dir, tmp_path):
    # read as characters, the co-cited papers of the set were allowed as each other's negatives
    root = edited(clean_dir, tmp_path, lambda L: L[0].update(set_ids=L[0]["set_ids"][0]))
    with pytest.raises(ValueError, match=r"examples\.train\.jsonl:1: set_ids must be a list"):
        load_split(DataConfig(examples_dir=str(root)), "train")


def test_negative_ids_as_one_string_is_refused(clean_dir, tmp_path):
    root = edited(clean_dir, tmp_path, lambda L: L[0].update(negative_ids="p5_0"))
    with pytest.raises(ValueError, match=r"examples\.train\.jsonl:1: negative_ids must be a list"):
        load_split(DataConfig(examples_dir=str(root), example_negatives=True), "train")


def test_a_non_string_paper_id_is_an_error_naming_the_line(clean_dir, tmp_path):
    root = edited(clean_dir, tmp_path, lambda L: L[0].update(query_id=5))
    with pytest.raises(ValueError, match=r"examples\.train\.jsonl:1: query_id must be a paper id"):
        load_split(DataConfig(examples_dir=str(root)), "train")


@pytest.mark.parametrize("align", [[1], "1,2", [1.7, 0], [-1, 0], [True, 0], [0, 1, 2]])
def test_a_malformed_alignment_is_an_error_naming_the_line_and_key(clean_dir, tmp_path, align):
    # it was an IndexError or a ValueError from int() without file or line, or taken silently ([1.7, 0] as [1, 0])
    root = edited(clean_dir, tmp_path, lambda L: L[0].update(cc_align=align))
    with pytest.raises(ValueError, match=r"examples\.train\.jsonl:1: cc_align must be two sentence positions"):
        load_split(DataConfig(examples_dir=str(root)), "train")


def test_an_alignment_past_its_abstract_is_reported(clean_dir, tmp_path, caplog):
    root = edited(clean_dir, tmp_path, lambda L: L[0].update(cc_align=[0, 99]))
    with caplog.at_level(logging.WARNING, logger="aspire.train.data"):
        data = load_split(DataConfig(examples_dir=str(root), max_sentences=0), "train")
    assert f"2 of the {len(data)} train examples name in cc_align a sentence their abstract does not have" in caplog.text


def test_alignments_cut_off_by_max_sentences_are_reported(clean_dir, caplog):
    whole = load_split(DataConfig(examples_dir=str(clean_dir), max_sentences=0), "train")
    past = sum(max(e.align) >= 1 for e in whole.examples if e.align is not None) // 2  # one a line, two directions
    assert past > 0
    with caplog.at_level(logging.WARNING, logger="aspire.train.data"):
        load_split(DataConfig(examples_dir=str(clean_dir), max_sentences=1), "train")
    assert f"{2 * past} of the {len(whole)} train examples align a sentence past data.max_sentences=1" in caplog.text


@pytest.mark.parametrize("lines, message", [
    (['{"paper_id": "a", "negatives": ["b"]}', '{"paper_id": "a", "negatives": ["c"]}'],
     r"hard\.jsonl:2: paper 'a' has its hard negatives on line 1 already"),  # the later line's alone were kept
    (['{"paper_id": "a", "negatives": "bc"}'], r"hard\.jsonl:1: negatives must be a list"),  # read letter by letter
])
def test_the_hard_negatives_file_is_checked(tmp_path, lines, message):
    (tmp_path / "hard.jsonl").write_text("".join(line + "\n" for line in lines))
    with pytest.raises(ValueError, match=message):
        _read_hard_negatives(tmp_path / "hard.jsonl")


# ---- task weights and ratios ------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", [(0.0, 0.0), (0.0,), (1.0, float("nan")), (1.0, -1.0)])
def test_task_weights_that_train_nothing_or_nonsense_are_refused(weights):
    names = ["cocite", "crop"][: len(weights)]
    with pytest.raises(ValueError, match=r"tasks\[\]\.weight"):
        TripletCollator(lambda papers, tasks=None: None, {}, weights, task_names=names)
    TripletCollator(lambda papers, tasks=None: None, {}, (0.0, 1.0), task_names=["cocite", "crop"])  # one is enough


def test_all_zero_task_weights_fail_before_training(tiny_model_dir, clean_dir, tmp_path):
    # they trained to the end with a loss of 0 and a gradient of 0 at every step
    tasks = ("tasks=[{name: cocite, weight: 0.0}, {name: crop, weight: 0.0, sources: [cocite], "
             "benchmarks_dir: null}]")
    cfg = tiny_config(tiny_model_dir, clean_dir, tmp_path / "run", tasks, "model.kind=abstract", "loss.kind=mnrl",
                      "data.use_dev=false")
    with pytest.raises(ValueError, match=r"every task's loss weight is 0 \({'cocite': 0.0, 'crop': 0.0}\)"):
        run(cfg)
    assert not list((tmp_path / "run").glob("checkpoint-*"))


@pytest.mark.parametrize("ratios", [[1.0, 0.0], [1.0, -1.0], [1.0, float("nan")], [1.0, float("inf")], []])
def test_bad_ratios_are_a_clear_error(ratios):
    with pytest.raises(ValueError, match=r"tasks\[\]\.ratio"):
        split_batch(8, ratios)
    with pytest.raises(ValueError, match=r"tasks\[\]\.ratio"):
        alternating_cycle(ratios)


def test_an_alternating_ratio_too_small_for_the_cycle_does_not_blame_the_batch_size():
    with pytest.raises(ValueError, match=r"mix.mode alternating: a cycle of 60 batches") as err:
        alternating_cycle([1000.0, 1.0])
    assert "batch_size" not in str(err.value)
    assert split_batch(8, [3, 1]) == [6, 2] and alternating_cycle([2, 1], length=6) == [0, 1, 0, 0, 1, 0]


# ---- loss settings ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, key", [
    (lambda v: MultipleNegativesRankingLoss(scale=v), "loss.scale"),
    (lambda v: MultipleNegativesRankingLoss(teacher_scale=v), "loss.teacher_scale"),
    (lambda v: MultipleNegativesRankingLoss(term_scale={"aligned": v}), "loss.term_scale.aligned"),
    (lambda v: PairBCELoss(scale=v), "loss.scale"),
    (lambda v: MultiSimilarityLoss(alpha=v), "loss.ms_alpha"),
    (lambda v: MultiSimilarityLoss(beta=v), "loss.ms_beta"),
])
@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_loss_scales_out_of_range_are_refused_naming_the_key(make, key, value):
    # scale 0: every logit equal, a constant loss with no gradient; NaN or inf: a NaN loss
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        make(value)


def test_pivots_must_be_finite():
    for make, key in ((lambda v: PairBCELoss(threshold=v), "bce_threshold"), (lambda v: MultiSimilarityLoss(base=v), "ms_base")):
        with pytest.raises(ValueError, match=f"loss.{key}"):
            make(float("nan"))
        make(-0.5)  # a pivot may be negative (a similarity that is minus a distance)


def test_an_infinite_term_scale_fails_when_the_model_is_built(tiny_model_dir, clean_dir, tmp_path):
    """The config load refuses it (`tests/test_reliability_round4_trainer.py`); a config changed in Python after
    loading is caught when the loss is built."""
    cfg = tiny_config(tiny_model_dir, clean_dir, tmp_path / "run", "model.kind=hybrid+ts", "loss.kind=mnrl",
                      "loss.term_scale={aligned: 2.0}")
    cfg.loss.term_scale["aligned"] = float("inf")
    with pytest.raises(ValueError, match=r"loss\.term_scale\.aligned must be a finite number > 0, got inf"):
        build_model(cfg, None)


@pytest.mark.parametrize("margin", [-1.0, float("nan"), float("inf")])
def test_a_triplet_margin_out_of_range_is_refused(margin):
    pos, neg, mask = torch.rand(3), torch.rand(3, 2), torch.ones(3, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"loss\.margin must be a finite number >= 0"):
        triplet_margin_dist_loss(pos, neg, mask, margin)
    assert triplet_margin_dist_loss(pos, neg, mask, 0.0).item() >= 0.0


# ---- task formats -----------------------------------------------------------------------------------------
def test_a_refused_control_code_leaves_the_encoder_as_it_was(tiny_model_dir):
    from aspire.encoders.contextual import ContextualSentenceEncoder

    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    encoder.add_codes(["[COCITE]"], "[COCITE]")
    words, rows = len(encoder.tokenizer), encoder.model.get_input_embeddings().weight.shape[0]
    with pytest.raises(ValueError, match=r"control code '\[CROP\]' is not one of this encoder's codes"):
        encoder.add_codes(["[TITLE]"], "[CROP]")
    assert encoder.codes == ["[COCITE]"] and encoder.code == "[COCITE]"
    assert len(encoder.tokenizer) == words and encoder.model.get_input_embeddings().weight.shape[0] == rows
