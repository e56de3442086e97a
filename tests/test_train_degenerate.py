"""A train or dev split of one co-cited set: every paper a batch brings is co-cited with each anchor, so no pair has a
negative and every step's loss is 0. It trained to the end at loss 0, grad_norm 0, without a word (tiny random BERT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aspire.train.data import Example, without_negative
from aspire.train.trainer import METRICS, run
from tests.conftest import SHARED_DATA
from tests.test_train import tiny_config, write_examples_dir

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


def _one_set_split(root: Path, split: str, papers: list[dict]) -> Path:
    """`root`'s `examples.{split}.jsonl` made of every pair of the one co-cited set of `papers` (added to its
    abstracts.jsonl)."""
    with open(root / "abstracts.jsonl", "a") as out:
        out.writelines(json.dumps(p) + "\n" for p in papers)
    ids = [p["paper_id"] for p in papers]
    lines = [{"query_id": a, "positive_id": b, "negative_ids": [], "set_ids": ["|".join(ids)], "cc_align": [0, 0],
              "abs_align": [0, 0]} for i, a in enumerate(ids) for b in ids[i + 1 :]]
    (root / f"examples.{split}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def _real_set(shared: Path, size: int = 5) -> list[dict]:
    """The papers a real citing sentence of the shared co-citation data cites together (its first of `size` papers)."""
    with open(shared / "cocite-acl" / "cocitations.jsonl", encoding="utf-8") as handle:
        record = next(r for r in map(json.loads, handle) if len(r["cited"]) == size)
    return [{"paper_id": c["paper_id"], "title": c["title"], "abstract": c["abstract"]} for c in record["cited"]]


def test_a_train_split_of_one_real_co_cited_set_is_refused_before_the_first_step(tiny_model_dir, tmp_path):
    if not (SHARED_DATA / "cocite-acl").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    root = _one_set_split(write_examples_dir(tmp_path / "examples"), "train", _real_set(SHARED_DATA))
    cfg = tiny_config(tiny_model_dir, root, tmp_path / "run", "model.kind=cocite_vector")
    with pytest.raises(ValueError, match=r"no example of the train split \(20\) can have a negative: each of the 5 "
                                         r"papers .* co-cited with the anchor .* nothing would train"):
        run(cfg)  # trained 6 steps at loss 0
    assert not (tmp_path / "run" / METRICS).exists()


def test_a_dev_split_of_one_co_cited_set_is_refused_before_training(tiny_model_dir, tmp_path):
    papers = [{"paper_id": f"d{k}", "title": "the model", "abstract": ["the model of data.", "a text."]} for k in range(4)]
    root = _one_set_split(write_examples_dir(tmp_path / "examples"), "dev", papers)
    cfg = tiny_config(tiny_model_dir, root, tmp_path / "run", "model.kind=cocite_vector", "loss.kind=mnrl")
    with pytest.raises(ValueError, match=r"no example of the dev split \(12\) can have a negative.*no dev loss could"):
        run(cfg)  # was found at the first evaluation, after eval_every steps of training
    assert not (tmp_path / "run" / METRICS).exists()


def test_without_negative_names_the_hub_anchor_only_and_counts_hard_negatives():
    hub = [Example("h", p, ("a", "b", "c", "h"), None, None) for p in "abc"]
    spokes = [Example(p, "h", ("h", p), None, None) for p in "abc"]
    candidates = {e.positive_source for e in hub + spokes}
    assert without_negative(hub + spokes, candidates) == hub  # each spoke's batch brings another spoke
    with_hard = [Example("h", "a", ("a", "b", "c", "h"), "z", None)]
    assert without_negative(with_hard, candidates) == []
