"""Round 24, the torch distance path (`aspire.scoring.distance.l2_cost` / `cross_l2_cost`) against an exact float64
loop over the same float32 vectors, and against the compiled CPU pass (`_distance_cpu`).

Pinned defect: the expansion |x|^2 + |y|^2 - 2 x.y cancels for near pairs. The GEMM sums x.y in another order than
the norms' reduction (up to ~10 ulps of |x|^2 apart on 384-d rows), so in float32 two equal vectors of norm 3..5
came out up to ~5e-3 apart (a paper's min-L2 score against itself was not 0), a pair 1e-4 apart came out ~5e-3
apart, and the gradient of such a distance was off by the same factor. The compiled pass already summed near
pairs directly (equal vectors exactly 0); the torch path now does too.
"""

from __future__ import annotations

import pytest
import torch

from aspire.batch import DocBatch
from aspire.scoring import distance, get_scorer
from aspire.scoring._distance_cpu import _NEAR as COMPILED_NEAR
from aspire.scoring.chunked import score_chunked
from aspire.scoring.distance import as_store, cross_l2_cost, gathered_l2_cost, l2_cost


def _vectors(B: int, S: int, D: int = 384, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """(B, S, D) random directions with norms in [3, 5] (real MiniLM sentence vectors' scale)."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(B, S, D, generator=g, dtype=torch.float64)
    v = v / v.norm(dim=-1, keepdim=True) * (3 + 2 * torch.rand(B, S, 1, generator=g, dtype=torch.float64))
    return v.to(dtype)


def _near(x: torch.Tensor, delta: float, seed: int = 1) -> torch.Tensor:
    """x moved by `delta` along a random direction, in x's dtype."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(x.shape, generator=g, dtype=torch.float64)
    return (x.double() + delta * u / u.norm(dim=-1, keepdim=True)).to(x.dtype)


def _cross_ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(Bq, Bc, S, T) exact float64 distances of the given vectors, by differences."""
    x, y = x.double(), y.double()
    return (x[:, None, :, None, :] - y[None, :, None, :, :]).square().sum(-1).sqrt()


def _aligned_ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = x.double(), y.double()
    return (x[:, :, None, :] - y[:, None, :, :]).square().sum(-1).sqrt()


def test_near_share_is_the_compiled_pass_one():
    assert distance._NEAR == COMPILED_NEAR


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_vectors_are_exactly_zero_apart(dtype):
    x = _vectors(12, 10, dtype=dtype)
    cross = cross_l2_cost(x, x)  # (12, 12, 10, 10)
    diag = torch.stack([cross[b, b].diagonal() for b in range(12)])
    assert diag.abs().max().item() == 0.0  # was up to 5.5e-3 in float32
    assert torch.diagonal(l2_cost(x, x), dim1=1, dim2=2).abs().max().item() == 0.0  # was up to 2.8e-3
    off = ~torch.eye(10, dtype=torch.bool)
    assert (cross[0, 0][off] > 1.0).all()  # distinct random sentences untouched


@pytest.mark.parametrize("delta", [1e-4, 1e-3, 1e-2, 1e-1])
def test_near_pairs_match_an_exact_float64_loop(delta):
    x = _vectors(6, 10)
    y = _near(x, delta)
    ref = _cross_ref(x, y)
    got = cross_l2_cost(x, y).double()
    assert ((got - ref).abs() / ref).max().item() < 1e-5  # delta 1e-4: was 54x the distance off
    aligned_ref = _aligned_ref(x, y)
    assert ((l2_cost(x, y).double() - aligned_ref).abs() / aligned_ref).max().item() < 1e-5


def test_far_pairs_unchanged_to_float_rounding():
    x, y = _vectors(5, 10, seed=3), _vectors(7, 9, seed=4)
    ref = _cross_ref(x, y)
    assert ((cross_l2_cost(x, y).double() - ref).abs() / ref).max().item() < 1e-5


def test_torch_and_compiled_paths_agree_on_near_and_equal_pairs():
    x = _vectors(8, 10)
    y = torch.cat([x[:, :4], _near(x[:, 4:8], 1e-3), _vectors(8, 2, seed=9)], dim=1)  # equal, near, far
    mask = torch.ones(8, 10, dtype=torch.bool)
    compiled = gathered_l2_cost(*as_store(x, mask), *as_store(y, mask))  # the numba pass (CPU, no tape)
    torch_path = l2_cost(x, y)
    assert (torch.diagonal(compiled, dim1=1, dim2=2)[:, :4] == 0).all()
    assert (torch.diagonal(torch_path, dim1=1, dim2=2)[:, :4] == 0).all()
    assert (torch_path - compiled).abs().max().item() < 1e-5  # was 2.8e-3
    x_taped = x.clone().requires_grad_(True)  # a tape sends gathered_l2_cost down the torch path
    taped = gathered_l2_cost(*as_store(x_taped, mask), *as_store(y, mask))
    assert (taped.detach() - compiled).abs().max().item() < 1e-5


def test_gradient_finite_and_exact_at_equal_and_near_pairs():
    x = _vectors(1, 3, dtype=torch.float64).float()
    y = torch.cat([x[:, :1], _near(x[:, 1:2], 1e-3), _vectors(1, 1, seed=7)], dim=1)  # equal, near, far
    for fn in (lambda a: cross_l2_cost(a, y)[0, 0], lambda a: l2_cost(a, y)[0]):
        xg = x.clone().requires_grad_(True)
        d = fn(xg)
        d.diagonal().sum().backward()
        grad = xg.grad[0]
        assert torch.isfinite(xg.grad).all()
        assert grad[0].abs().max().item() == 0.0  # equal vectors: gradient 0, as _safe_sqrt gives it
        unit = (x[0, 1] - y[0, 1]).double()
        unit = unit / unit.norm()
        # d|x - y| / dx = (x - y) / |x - y|: the expansion's gradient was scaled by true / rounded distance
        assert (grad[1].double() - unit).abs().max().item() < 1e-4
        assert abs(grad[1].double().norm().item() - 1.0) < 1e-5


def test_padding_pairs_stay_zero_and_nan_stays_nan():
    x = _vectors(2, 4)
    x[0, 2:] = 0.0  # padding rows: zero vectors
    x[1, 1] = float("nan")
    cross = cross_l2_cost(x, x)
    assert (cross[0, 0, 2:, 2:] == 0).all()
    assert torch.isnan(cross[1, 1, 1]).all() and torch.isnan(cross[1, 1, :, 1]).all()
    assert (torch.diagonal(cross[1, 1])[[0, 2, 3]] == 0).all()


def test_minl2_score_of_a_paper_against_itself_is_zero_on_the_chunked_path():
    emb = _vectors(20, 3, seed=3)  # short papers: the diagonal's minimum is seldom an entry that rounded to 0
    lengths = torch.randint(1, 4, (20,), generator=torch.Generator().manual_seed(0))
    mask = torch.arange(3)[None, :] < lengths[:, None]
    emb = emb * mask[:, :, None]
    batch = DocBatch(emb, mask, [f"p{i}" for i in range(20)], [[f"s{j}." for j in range(int(n))] for n in lengths])
    scores = score_chunked(get_scorer("minl2"), batch, batch, budget_bytes=64 * 200)  # several chunks
    assert scores.diagonal().abs().max().item() == 0.0  # was -3.4e-3 for one paper (3 of 20 not 0)
    ref = -torch.stack([torch.stack([_cross_ref(emb[i:i + 1, :lengths[i]], emb[j:j + 1, :lengths[j]]).min()
                                     for j in range(20)]) for i in range(20)])
    assert (scores.double() - ref).abs().max().item() < 1e-5
