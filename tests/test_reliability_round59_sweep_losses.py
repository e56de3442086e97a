"""Round 59, a defect sweep of the losses.

One defect pinned: the multiple-negatives ranking loss computed float16 / bfloat16 similarities in their own dtype.
At a scale of 20 a row's log-partition is ~20, where a bfloat16 rounds by up to 0.06: each anchor's loss (the
difference of two such numbers) came out that far off (true losses of 0.01-0.03 came out exactly 0) and, through
the rounded log-partition, every softmax weight of the row, so the gradient, ~3% off. It now scales and reduces
in float32, as the scorers do (`aspire.scoring.distance.widened`), and gives the loss back in the input dtype.
"""

from __future__ import annotations

import pytest
import torch

from aspire.losses.ranking import MultipleNegativesRankingLoss


def _cosines(dtype: torch.dtype, B: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, B) cosines of unit vectors to noisy copies of themselves, rounded to `dtype`, and a teacher's (float32)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.nn.functional.normalize(torch.randn(B, 64, generator=gen), dim=1)
    y = torch.nn.functional.normalize(x + 0.3 * torch.randn(B, 64, generator=gen), dim=1)
    sim = (x @ y.T).to(dtype)
    return sim, sim.float() + 0.05 * torch.randn(B, B, generator=gen)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("symmetric", [False, True])
def test_mnrl_on_half_precision_similarities_equals_float64_on_the_same_values(dtype, symmetric):
    sim, _ = _cosines(dtype)
    mask = torch.ones(sim.shape, dtype=torch.bool)
    loss_fn = MultipleNegativesRankingLoss(20.0, symmetric=symmetric)
    x = sim.clone().requires_grad_()
    loss, valid = loss_fn(x, mask)
    loss.mean().backward()
    ref_x = sim.double().requires_grad_()  # the same (exactly representable) values
    ref, ref_valid = loss_fn(ref_x, mask)
    ref.mean().backward()
    assert loss.dtype == x.grad.dtype == dtype and valid.tolist() == ref_valid.tolist()
    eps = torch.finfo(dtype).eps
    err = (loss.double() - ref).abs()
    # the loss rounded once, at its own size (it was the size of the log-partition: bfloat16 0.034 off)
    assert (err <= eps * ref.abs() + 1e-6).all(), (err.max().item(), ref[err.argmax()].item())
    assert not ((loss == 0) & (ref > 1e-3)).any()  # no anchor's loss rounded away
    grad_err = (x.grad.double() - ref_x.grad).abs().max() / ref_x.grad.abs().max()
    assert grad_err <= 2 * eps, grad_err.item()  # was 0.034 (bfloat16), 0.0045 (float16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mnrl_distillation_on_half_precision_similarities_equals_float64_on_the_same_values(dtype):
    sim, teacher = _cosines(dtype)
    teacher[3, 3] = float("nan")  # one row the teacher did not score: the ranking loss
    mask = torch.ones(sim.shape, dtype=torch.bool)
    loss_fn = MultipleNegativesRankingLoss(20.0, teacher_scale=20.0)
    x = sim.clone().requires_grad_()
    loss, _ = loss_fn(x, mask, teacher=teacher)
    loss.mean().backward()
    ref_x = sim.double().requires_grad_()
    ref, _ = loss_fn(ref_x, mask, teacher=teacher.double())
    ref.mean().backward()
    assert loss.dtype == torch.float32  # the teacher's dtype, as before
    assert torch.allclose(loss.double(), ref, rtol=1e-5, atol=1e-6), (loss.double() - ref).abs().max().item()  # was 8e-3 off
    grad_err = (x.grad.double() - ref_x.grad).abs().max() / ref_x.grad.abs().max()
    assert grad_err <= 2 * torch.finfo(dtype).eps, grad_err.item()
