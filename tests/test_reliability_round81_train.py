"""Round 81, training: defects found by exercising the trainer on the tiny random model."""

from __future__ import annotations

import json

import pytest

from aspire.train.trainer import METRICS, run
from tests.test_train import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


def _hard_negatives(path, examples_dir, split):
    """A hard negatives file giving each paper of `split` two papers of other sets (ids `p<set>_<k>`)."""
    papers = [json.loads(line)["paper_id"] for line in (examples_dir / "abstracts.jsonl").read_text().splitlines()]
    named = sorted({json.loads(line)[key] for line in (examples_dir / f"examples.{split}.jsonl").read_text().splitlines()
                    for key in ("query_id", "positive_id")})
    rows = [{"paper_id": p, "negatives": [q for q in papers if q.split("_")[0] != p.split("_")[0]][:2]} for p in named]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_batch_size_one_without_hard_negatives_is_refused_not_trained_at_loss_zero(tiny_model_dir, examples_dir, tmp_path):
    # a micro-batch of one pair holds no in-batch negative: every step's loss was 0 (grad_norm 0) and the run "finished"
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "train.batch_size=1", "data.use_dev=false")
    with pytest.raises(ValueError, match=r"train\.batch_size=1: .*no example of the train split has a hard negative"):
        run(cfg)
    assert not (tmp_path / "run" / METRICS).exists()  # refused before the first step


def test_batch_size_one_with_dev_anchors_lacking_hard_negatives_is_refused_before_training(
        tiny_model_dir, examples_dir, tmp_path):
    hard = _hard_negatives(tmp_path / "hard.jsonl", examples_dir, "train")  # no dev anchor has one
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "train.batch_size=1",
                      f"data.hard_negatives={hard}")
    with pytest.raises(ValueError, match=r"no example of the dev split has a hard negative, so no dev loss"):
        run(cfg)  # was found at the first evaluation, after eval_every steps of training
    assert not (tmp_path / "run" / METRICS).exists()


def test_batch_size_one_with_hard_negatives_trains(tiny_model_dir, examples_dir, tmp_path):
    hard = tmp_path / "hard.jsonl"
    train, dev = (_hard_negatives(tmp_path / f"{s}.jsonl", examples_dir, s).read_text() for s in ("train", "dev"))
    hard.write_text(train + "".join(line + "\n" for line in dev.splitlines() if line not in train.splitlines()))
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "train.batch_size=1", f"data.hard_negatives={hard}")
    final = run(cfg)
    assert final["step"] == 6 and final["loss"] > 0 and final["grad_norm"] > 0
