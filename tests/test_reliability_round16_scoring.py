"""The OT kernel and the scorers against references and at their edges (correctness sweep, round 16)."""

from __future__ import annotations

import warnings

import pytest
import torch

from aspire.scoring import SinkhornConvergenceWarning, sinkhorn


def _problems(B=2, N=3, M=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    cost = torch.rand(B, N, M, generator=g, dtype=dtype)
    return cost, torch.full((B, N), 1 / N, dtype=dtype), torch.full((B, M), 1 / M, dtype=dtype)


@pytest.mark.parametrize("path", ["compiled", "autograd"])
@pytest.mark.parametrize("option, value", [("max_iter", 10.5), ("check_every", 2.5), ("newton_after", 2.5),
                                           ("max_iter", True), ("max_iter", float("inf")), ("check_every", "10")])
def test_sinkhorn_refuses_iteration_counts_that_are_not_integers_naming_them(path, option, value):
    # max_iter=10.5 ran 10 iterations on the compiled path and warned of a precision floor ("met tol in the
    # iterations but not in the plan": n_iter 10 < max_iter 10.5); under a tape it failed with a TypeError naming no
    # option; check_every=2.5 ran silently; True ran one iteration
    cost, a, b = _problems()
    cost.requires_grad_(path == "autograd")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SinkhornConvergenceWarning)
        with pytest.raises(ValueError, match=option if option == "newton_after" else "max_iter >= 1, check_every"):
            sinkhorn(cost, a, b, 0.05, **{option: value})


def test_sinkhorn_still_takes_integer_counts_of_any_integer_type():
    import numpy as np

    cost, a, b = _problems()
    ref = sinkhorn(cost, a, b, 0.05)
    res = sinkhorn(cost, a, b, 0.05, max_iter=np.int64(1000), check_every=np.int32(10), newton_after=np.int64(100))
    assert torch.equal(res.plan, ref.plan) and bool(res.converged.all())


def test_compiled_log_domain_redo_checks_every_check_every_iterations_as_the_batched_one(monkeypatch):
    # after an unsafe exp-domain chunk (here: a Newton tail that gives up with potentials whose kernel overflows) the
    # compiled iterations redid it as one log-domain chunk of the whole remaining budget, unchecked: a problem that
    # converges in ~10 log iterations ran to max_iter (n_iter 300, where the batched path took 12 and 22)
    import importlib

    sk = importlib.import_module("aspire.scoring.sinkhorn")

    def gives_up(cost, a, b, F, G, eps, tol, max_steps):  # one step, then gives up, row 0's potential far off
        n = len(a)
        F = F.clone()
        F[:, 0] += 800.0
        return F, G, torch.ones(n, dtype=F.dtype), torch.ones(n, dtype=torch.long), torch.zeros(n, dtype=torch.bool)

    monkeypatch.setattr(sk, "_newton_tail", gives_up)
    cost, a, b = _problems(B=2, N=4, M=5, seed=3)
    with torch.no_grad():
        batched = sk._solve_batched(cost, a, b, 0.5, 1e-10, 300, 10, 1)
        compiled = sk._solve_cpu(cost, a, b, 0.5, 1e-10, 300, 10, 1)
    assert bool(batched[3].all()) and bool(compiled[3].all())
    assert batched[2].max() < 60
    assert (compiled[2] - batched[2]).abs().max() <= 10  # was 300 (max_iter) against ~20
    assert torch.allclose(compiled[0], batched[0], atol=1e-8) and torch.allclose(compiled[1], batched[1], atol=1e-8)


@pytest.mark.parametrize("bad", [torch.tensor(2), "numpy"])
def test_select_sentences_refuses_a_zero_dim_position_naming_the_paper(bad):
    # a 0-d tensor or array has __len__ but no length: len() raised a TypeError naming no paper
    import numpy as np

    from aspire.batch import DocBatch

    bad = np.array(2) if isinstance(bad, str) else bad
    batch = DocBatch.from_list([torch.randn(2, 4), torch.randn(3, 4)], ["p1", "p2"], [["a", "b"], ["c", "d", "e"]])
    with pytest.raises(ValueError, match="paper p2: a sentence selection must be a sequence of positions"):
        batch.select_sentences([torch.tensor([0, 1]), bad])
    assert batch.select_sentences([torch.tensor([1]), np.array([0, 2])]).mask.tolist() == [[False, True, False],
                                                                                          [True, False, True]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_cosines_of_a_zero_vector_are_0_in_every_dtype(dtype):
    # F.normalize's floor of 1e-12 rounds to 0 in float16: a zero vector's cosine was NaN there (0 in float32), in
    # the single-vector cosine and in the hybrid's whole / facet terms
    from aspire.batch import DocBatch
    from aspire.scoring.scorers import HybridScorer
    from aspire.scoring.vector import VectorCosine

    g = torch.Generator().manual_seed(0)
    emb = torch.randn(2, 1, 8, generator=g)
    emb[0] = 0.0
    whole = torch.randn(2, 8, generator=g)
    whole[1] = 0.0
    batch = DocBatch(emb.to(dtype), torch.ones(2, 1, dtype=torch.bool), whole=whole.to(dtype))
    ref = DocBatch(emb, torch.ones(2, 1, dtype=torch.bool), whole=whole)
    cos = VectorCosine()
    for got, want in ((cos.score(batch, batch), cos.score(ref, ref)),
                      (cos.pairwise_score(batch, batch), cos.pairwise_score(ref, ref))):
        assert got.dtype == dtype and torch.isfinite(got).all()
        assert torch.allclose(got.float(), want, atol=1e-2)
    assert float(cos.score(batch, batch)[0, 1]) == 0.0
    hybrid = HybridScorer()
    for pairwise in (False, True):
        terms = hybrid._terms(batch, batch, pairwise, ("whole", "facet"))
        want = hybrid._terms(ref, ref, pairwise, ("whole", "facet"))
        for t in terms:
            assert torch.isfinite(terms[t]).all(), t
            assert torch.allclose(terms[t].float(), want[t], atol=1e-2), t


@pytest.mark.parametrize("tau, eps", [(-1.0, 0.05), (0.0, 0.05), (1.0, 0.0), (float("nan"), 0.05)])
def test_the_ot_and_attention_functions_refuse_the_temperatures_the_scorers_refuse(tau, eps):
    # called directly, a negative tau weighed the farthest sentences most, silently, and a zero one failed as NaN
    # weights inside Sinkhorn's mass check; OTScorer / AttentionScorer refuse both
    from aspire.scoring.distance import as_store
    from aspire.scoring.scorers import (
        attention_match,
        gathered_ot_match,
        ot_match,
        pairwise_attention_match,
        pairwise_ot_match,
    )

    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(2, 3, 4, generator=g), torch.randn(2, 2, 4, generator=g)
    qm, cm = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool)
    calls = [lambda: ot_match(q, qm, c, cm, tau=tau, eps=eps), lambda: pairwise_ot_match(q, qm, c, cm, tau=tau, eps=eps),
             lambda: gathered_ot_match(*as_store(q, qm), *as_store(c, cm), tau=tau, eps=eps)]
    if eps > 0:
        calls += [lambda: attention_match(q, qm, c, cm, tau=tau), lambda: pairwise_attention_match(q, qm, c, cm, tau=tau)]
    for call in calls:
        with pytest.raises(ValueError, match="tau must be > 0" if eps > 0 else "eps must be > 0"):
            call()
    assert torch.isfinite(pairwise_ot_match(q, qm, c, cm, tau=float("inf")).dist).all()  # uniform weights: allowed


def test_numpy_counts_and_numbers_reach_the_compiled_path_as_the_types_it_was_compiled_for():
    """`check_every=np.int32(10)` compiled the CPU iterations a second time (an int32 signature, 20-odd seconds
    of a first call, and of the default test run); numpy's scalars now arrive as Python's int and float."""
    import numpy as np
    from numba.core import types

    from aspire.scoring._sinkhorn_cpu import sinkhorn_iterations

    cost, a, b = _problems()
    sinkhorn(cost, a, b, np.float32(0.05), tol=np.float32(1e-6), max_iter=np.int32(1000),
             check_every=np.int32(10), newton_after=np.int16(100))
    assert sinkhorn_iterations.signatures
    odd = [sig for sig in sinkhorn_iterations.signatures if types.int32 in sig or types.int16 in sig
           or types.float32 in sig]
    assert not odd
