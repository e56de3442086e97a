"""Round 78: the OT scorer at a tiny sentence-weight temperature.

The weights softmax(-minima / tau) were computed as written: for a tau small enough (float32: below about 1e-39;
float64: about 1e-308) -minima / tau overflowed to -inf at every sentence, the weights were NaN, and the scorer
refused them ("weights must be finite ..."; a page search with such a default answered HTTP 500). Both paths, the
torch one (`ot_weights`) and the compiled pass over stored rows (`_distance_cpu._logits`), now shift the minima by
the least before dividing, as the attention scorer does: the weights go to the least minimum, and the OT distance
to the single-match distance (the least cost of a real pair), which the test checks."""

from __future__ import annotations

import pytest
import torch

from aspire.scoring.scorers import gathered_ot_match, ot_weights, pairwise_ot_match


def _case(dtype):
    torch.manual_seed(0)
    pool = torch.nn.functional.normalize(torch.randn(60, 16, dtype=dtype), dim=-1)
    q_rows, c_rows = torch.randint(0, 30, (4, 5)), torch.randint(30, 60, (4, 6))
    c_rows[0, 4:], q_rows[1, 3:] = -1, -1
    return pool, q_rows, c_rows


@pytest.mark.parametrize("dtype, taus", [(torch.float32, (1e-38, 1e-40, 1e-46)),
                                         (torch.float64, (1e-300, 1e-320))])
def test_ot_distance_at_a_tiny_tau_is_the_least_real_cost_on_both_paths(dtype, taus):
    pool, q_rows, c_rows = _case(dtype)
    q_mask, c_mask = q_rows >= 0, c_rows >= 0
    q, c = pool[q_rows.clamp(min=0)], pool[c_rows.clamp(min=0)]
    least = torch.cdist(q, c).masked_fill(~(q_mask[:, :, None] & c_mask[:, None, :]), torch.inf).amin((1, 2))
    for tau in taus:
        stored = gathered_ot_match(pool, q_rows, pool, c_rows, tau=tau)  # the compiled pass (CPU, no tape)
        padded = pairwise_ot_match(q, q_mask, c, c_mask, tau=tau)  # the torch path
        for match in (stored, padded):
            assert torch.isfinite(match.dist).all(), (tau, match.dist)
            assert match.dist == pytest.approx(least, abs=1e-5), tau


def test_ot_weights_at_a_tiny_tau_sit_on_the_least_minimum_and_are_zero_on_padding():
    cost = torch.tensor([[[0.9, 0.5, 3.0], [0.4, 0.8, 3.0], [2.0, 2.0, 3.0]]])
    q_mask, c_mask = torch.tensor([[True, True, False]]), torch.tensor([[True, True, False]])
    x, y = ot_weights(cost, q_mask, c_mask, 1e-40)
    assert x.tolist() == [[0.0, 1.0, 0.0]] and y.tolist() == [[1.0, 0.0, 0.0]]
    x1, _ = ot_weights(cost, q_mask, c_mask, 1.0)  # an ordinary tau: softmax(-(0.5, 0.4)) over the real two
    assert x1[0, :2].tolist() == pytest.approx(torch.softmax(-torch.tensor([0.5, 0.4]), 0).tolist())
