"""Round 47: ranking losses and score fusion against hand computations (torch cross_entropy, numpy)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aspire.losses.ranking import MultipleNegativesRankingLoss
from aspire.scoring.fusion import fuse_ranked, normalise


def _hand_fuse(lists, weights, method, k=60.0):
    out = {}
    for scores, w in zip(lists, weights):
        docs = list(scores)
        v = np.array([scores[d] for d in docs], dtype=np.float64)
        if method == "rrf":
            ranks = {d: r for r, d in enumerate(sorted(docs, key=lambda d: -scores[d]), start=1)}
            c = [1.0 / (k + ranks[d]) for d in docs]
        elif v.max() == v.min():
            c = [0.0] * len(docs)
        elif method == "z":
            c = list((v - v.mean()) / v.std(ddof=0))
        else:
            c = list((v - v.min()) / (v.max() - v.min()))
        for d, x in zip(docs, c):
            out.setdefault(d, []).append(w * x)
    return {d: math.fsum(x) for d, x in out.items()}


def test_mnrl_equals_cross_entropy_and_symmetric_is_mean_of_directions():
    g = torch.Generator().manual_seed(0)
    sim = torch.randn(3, 5, generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[0, 1] = False  # anchor 1's positive is a duplicate of anchor 0's: not a negative of anchor 0
    logits = 20.0 * sim
    lossfn = MultipleNegativesRankingLoss(scale=20.0)
    loss, has = lossfn(sim, mask)
    hand = torch.stack([F.cross_entropy(logits[b][mask[b] | (torch.arange(5) == b)][None],
                                        torch.tensor([int((mask[b] | (torch.arange(5) == b))[:b].sum())]))
                        for b in range(3)])
    assert torch.allclose(loss, hand, atol=1e-5) and has.all()
    sym, _ = MultipleNegativesRankingLoss(scale=20.0, symmetric=True)(sim, mask)
    allowed = (mask | torch.eye(3, 5, dtype=torch.bool))[:, :3].T
    back = torch.stack([torch.logsumexp(logits[:, :3].T[b][allowed[b]], 0) - logits[b, b] for b in range(3)])
    assert torch.allclose(sym, (hand + back) / 2, atol=1e-5)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "20", True])
def test_mnrl_refuses_bad_scale_naming_it(bad):
    with pytest.raises(ValueError, match="loss.scale"):
        MultipleNegativesRankingLoss(scale=bad)
    with pytest.raises(ValueError, match="loss.teacher_scale"):
        MultipleNegativesRankingLoss(teacher_scale=bad)


@pytest.mark.parametrize("method", ["z", "minmax", "rrf"])
def test_fuse_equals_numpy_hand_computation(method):
    rng = np.random.default_rng(1)
    lists = [{f"d{i}": float(x) for i, x in enumerate(rng.normal(size=6))},
             {f"d{i}": float(x) for i, x in enumerate(rng.normal(size=5), start=3)},  # different ids
             {"d0": 2.0, "d9": 2.0}]  # constant list: 0 for each
    weights = [0.7, 0.2, 0.5]  # not normalised
    got = dict(fuse_ranked(lists, weights, method=method, rrf_k=20.0))
    want = _hand_fuse(lists, weights, method, k=20.0)
    assert got.keys() == want.keys()
    for d in want:
        assert got[d] == pytest.approx(want[d], abs=1e-12)
    assert normalise(np.array([0.1, 0.1, 0.1]), "z").tolist() == [0.0, 0.0, 0.0]


def test_fuse_rrf_exact_tie_broken_by_document_id():
    # doc "a" at ranks (1, 7, 2), "b" at (2, 1, 7): equal rrf sums, which a running float sum made differ by an ulp
    def one(ra, rb):
        slots = [f"f{j}" for j in range(7)]
        slots[ra - 1], slots[rb - 1] = "a", "b"
        return {d: float(7 - j) for j, d in enumerate(slots)}
    lists = [one(1, 2), one(7, 1), one(2, 7)]
    fused = fuse_ranked(lists, method="rrf")
    scores = dict(fused)
    assert scores["a"] == scores["b"]
    ids = [d for d, _ in fused]
    assert ids.index("a") < ids.index("b")


@pytest.mark.parametrize("bad", ["0.5", True, float("nan"), float("-inf")])
def test_fuse_refuses_non_numeric_or_non_finite_score_naming_list_and_doc(bad):
    with pytest.raises(ValueError, match=r"list 1 scores document 'x'"):
        fuse_ranked([{"a": 1.0, "b": 0.0}, {"a": 1.0, "x": bad}], method="z")
