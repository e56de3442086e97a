"""A train anchor's hard negative is never a paper that only the dev split names. `aspire data hard-negatives` mines
every paper of the examples folder, so a random negative was a dev paper for 46 of the 2,078 train examples of the
real ACL co-citation examples: the model trained on the papers the dev loss that selects it is taken on."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from aspire.train.config import DataConfig
from aspire.train.data import load_split, split_paper_ids
from tests.test_train import write_examples_dir


def _dev_first_negatives(examples: Path, out: Path) -> Path:
    """A hard-negatives file listing, for each train paper, a dev paper first and then a train paper of another set
    (the papers of `tests.test_train.write_examples_dir` are `p<set>_<k>`; sets 9-11 are its dev split)."""
    papers = [json.loads(line)["paper_id"] for line in (examples / "abstracts.jsonl").read_text().splitlines()]
    rows = [{"paper_id": p, "negatives": ["p10_0", next(q for q in papers if q.split("_")[0] != p.split("_")[0])]}
            for p in papers if int(p.split("_")[0][1:]) < 9]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_a_train_anchor_passes_over_a_dev_paper_for_the_next_negative_of_its_list(tmp_path, caplog):
    examples = write_examples_dir(tmp_path / "examples")
    cfg = DataConfig(examples_dir=str(examples), hard_negatives=str(_dev_first_negatives(examples, tmp_path / "h.jsonl")))
    with caplog.at_level(logging.INFO, logger="aspire.train.data"):
        train = load_split(cfg, "train")
    negatives = [e.negative for e in train.examples]
    assert "p10_0" not in negatives and None not in negatives  # each took its second negative, a train paper
    assert f"{len(negatives)} example(s) passed over a negative that only the dev split names" in caplog.text
    assert load_split(DataConfig(examples_dir=str(examples), hard_negatives=cfg.hard_negatives, use_dev=False),
                      "train").examples[0].negative == "p10_0"  # no dev loss: nothing to keep apart


def test_real_random_hard_negatives_of_train_anchors_leave_the_dev_papers_out(real_cocite_examples, tmp_path):
    from aspire.data.negatives import HardNegativesConfig, mine_hard_negatives

    mine_hard_negatives(real_cocite_examples, tmp_path / "neg", HardNegativesConfig(method="random"))
    cfg = DataConfig(examples_dir=str(real_cocite_examples), hard_negatives=str(tmp_path / "neg" / "hard_negatives.jsonl"))
    dev_only = split_paper_ids(cfg, "dev") - split_paper_ids(cfg, "train")
    train = load_split(cfg, "train")
    assert len(dev_only) == 19 and len(train) == 2074
    assert sum(e.negative in dev_only for e in train.examples) == 0  # 46 before
    assert sum(e.negative is not None for e in train.examples) == 2074
