"""The recipes of docs/architecture.md, proved with toys registered in these tests only: a search stage (one
function and one registry line in `aspire.retrieval.rerank`) and an objective (one loss module and one line in
`aspire.losses.MATRIX_LOSSES`); and every place that offers a choice reads it from its registry.
(The benchmark recipe: tests/test_registry.py.)"""

from __future__ import annotations

import argparse
from typing import get_args, get_type_hints

import numpy as np
import pytest
import torch
from test_search import query_batch, searcher  # noqa: F401 (searcher: a fixture)

from aspire.index.config import RERANKERS, STAGES, SearchConfig
from aspire.losses import LOSS_KINDS, MATRIX_LOSSES, matrix_loss
from aspire.retrieval import rerank as stages
from aspire.train.config import LossConfig


def test_every_reranker_and_pipeline_choice_comes_from_the_registries():
    from aspire.cli.search import build_parser
    from aspire.serve.requests import SearchBody

    assert RERANKERS == ("none", *stages.RERANK_STAGES)
    hints = get_type_hints(SearchConfig)
    assert get_args(hints["rerank"]) == RERANKERS and get_args(hints["stages"]) == STAGES
    body = get_type_hints(SearchBody)
    assert get_args(get_args(body["rerank"])[0]) == RERANKERS and get_args(get_args(body["stages"])[0]) == STAGES
    choices = {a.dest: a.choices for a in build_parser("aspire search")._actions if isinstance(a, argparse.Action)}
    assert tuple(choices["rerank"]) == RERANKERS
    assert get_args(get_type_hints(LossConfig)["kind"]) == LOSS_KINDS == ("triplet", *MATRIX_LOSSES)


def test_a_search_stage_registered_here_runs_in_search(searcher, monkeypatch):  # noqa: F811
    """A toy re-rank stage that prefers papers by id, last letter first: search runs it by name."""
    def toy(searcher, query, papers, cfg):
        ids = [searcher.index.paper_ids[p] for p in papers.tolist()]
        return np.array([float(ord(i[-1])) for i in ids]), None

    monkeypatch.setitem(stages.RERANK_STAGES, "toy", toy)
    hits = searcher.search(query_batch(), k=3, rerank="toy", shortlist=4)
    assert [h.paper_id for h in hits] == ["D", "C", "B"]
    assert hits[0].stages["toy"] == float(ord("D"))
    monkeypatch.delitem(stages.RERANK_STAGES, "toy")
    with pytest.raises(ValueError, match="unknown rerank 'toy'"):
        searcher.search(query_batch(), k=3, rerank="toy")


class ToyLoss(torch.nn.Module):
    """A toy objective: each anchor's loss is minus `scale` times its positive's similarity."""

    SETTINGS = {"scale": "scale"}

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, sim, neg_mask):
        per_anchor = -self.scale * sim.diagonal()
        return per_anchor, torch.ones_like(per_anchor, dtype=torch.bool)


def test_an_objective_registered_here_is_built_from_the_loss_config(monkeypatch):
    from aspire.config import ConfigError
    from aspire.losses import LOSS_KEYS

    for name, cls in MATRIX_LOSSES.items():  # each loss's keys are named once for the config, as its class reads them
        assert LOSS_KEYS[name] == tuple(cls.SETTINGS.values())
    monkeypatch.setitem(MATRIX_LOSSES, "toy", ToyLoss)
    monkeypatch.setitem(LOSS_KEYS, "toy", ("scale",))
    with pytest.raises(ConfigError, match=r"kind toy does not read margin \(it reads scale\)"):
        LossConfig(kind="toy", margin=0.5)
    loss = matrix_loss(LossConfig(kind="toy", scale=3.0))
    assert isinstance(loss, ToyLoss) and loss.scale == 3.0
    per_anchor, _ = loss(torch.eye(2), torch.zeros(2, 2, dtype=torch.bool))
    assert per_anchor.tolist() == [-3.0, -3.0]
    mnrl = matrix_loss(LossConfig(kind="mnrl", scale=5.0, symmetric=True))
    assert (mnrl.scale, mnrl.symmetric) == (5.0, True) and matrix_loss(LossConfig()) is None
    with pytest.raises(ValueError, match="unknown loss kind 'nope'; valid: triplet, mnrl"):
        matrix_loss(LossConfig(kind="nope"))


def test_model_kinds_and_task_names_are_named_once():
    from aspire.train.config import KINDS, ModelKind, TaskConfig
    from aspire.train.tasks import BUILDERS

    assert get_args(ModelKind) == tuple(KINDS)
    assert set(get_args(get_type_hints(TaskConfig)["name"])) == set(BUILDERS)
