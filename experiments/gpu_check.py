"""Paired CPU / device checks of the differentiable core: Sinkhorn, the scorers, the losses, the contextual encoder
and two optimizer steps of a tiny training run.

    PYTHONPATH=. python experiments/gpu_check.py --device cuda --out DIR
    PYTHONPATH=. python experiments/gpu_check.py --device cpu --out DIR      # the dry run

Each check computes one thing twice: a reference on the CPU (float64 where the device side runs float32, else the
same dtype) and the same call on `--device`, and asserts that every output lies on the inputs' device, that values
agree within the check's stated tolerance (|got - ref| <= atol + rtol * max|ref|, per tensor) and, where the path
is differentiable, that the gradients agree too. The checks are independent: one that fails or raises is recorded
and the rest still run; a check whose module needs a package the machine lacks reads "needs X". The script prints
a table (check, status, max abs diff, tolerance, seconds), writes DIR/gpu_check.json (one row a check, plus the
machine's torch / CUDA settings) and exits 1 if any check did not pass.

Every import of aspire happens inside the check that needs it. None of the modules used here imports faiss,
spacy / scispacy, POT (`ot`) or geomloss at module level (checked with sys.modules after import: aspire.scoring.*,
aspire.losses.*, aspire.batch, aspire.encoders.contextual, aspire.train.{document_model,data,config,tasks,trainer}
pull none of them; aspire.encoders.contextual pulls transformers' tokenizers). numba is imported only by the CPU
reference paths.

The training check builds a `DocumentModel` around a tiny random BERT (made in code, no hub) and runs two AdamW
steps on hand-made (anchor, positive) examples batched by `aspire.train.data.TripletCollator`; it does not go
through `aspire.train.trainer.run` (that reads a co-citation data folder from disk and writes checkpoints), so the
data loading, scheduler and checkpointing of the trainer are not covered here.

A CPU / device difference this script found (`sinkhorn_large_cost_f32` and the OT checks, on an H200, 2026-11-30):
the no-tape solve iterated in float64 on a CPU but in the input's dtype elsewhere, and float32 potentials of size
C / eps ~ 600+ round the rebuilt plan's marginals past tol, so such problems came back `converged=False` (with a
SinkhornConvergenceWarning) on the GPU where the CPU solved them, and the OT training step's gradients differed by
3.5e-4. `_solve` now iterates in float64 off the CPU too (tests/test_sinkhorn_batched_float64.py).
"""

from __future__ import annotations

import argparse
import json
import math
import string
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch


class Recorder:
    """What one check compared: the worst tensor (by diff / tolerance) and every failed assertion."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.worst = (0.0, 0.0, -1.0)  # (diff, tol, ratio)
        self.failures: list[str] = []
        self.compared = 0

    def on_device(self, name: str, *tensors, device: torch.device | None = None) -> None:
        want = device or self.device
        for i, t in enumerate(tensors):
            if isinstance(t, torch.Tensor) and t.device.type != want.type:
                self.failures.append(f"{name}[{i}] on {t.device}, expected {want.type}")

    def close(self, name: str, got, ref, atol: float, rtol: float = 0.0) -> None:
        if got is None or ref is None:
            if got is not ref:
                self.failures.append(f"{name}: one side is None (got {got is None}, ref {ref is None})")
            return
        got, ref = got.detach().cpu().double(), ref.detach().cpu().double()
        if got.shape != ref.shape:
            self.failures.append(f"{name}: shape {tuple(got.shape)} vs reference {tuple(ref.shape)}")
            return
        self.compared += 1
        if got.numel() == 0:
            return
        finite = torch.isfinite(ref)
        if not bool((torch.isfinite(got) == finite).all()) or not bool((got[~finite] == ref[~finite]).all()):
            self.failures.append(f"{name}: non-finite entries differ from the reference")
            return
        diff = float((got - ref)[finite].abs().max()) if bool(finite.any()) else 0.0
        scale = float(ref[finite].abs().max()) if bool(finite.any()) else 0.0
        tol = atol + rtol * scale
        ratio = diff / tol if tol > 0 else (0.0 if diff == 0 else math.inf)
        if ratio > self.worst[2]:
            self.worst = (diff, tol, ratio)
        if diff > tol:
            self.failures.append(f"{name}: max abs diff {diff:.3g} > tol {tol:.3g}")

    def equal(self, name: str, got, ref) -> None:
        got, ref = torch.as_tensor(got).detach().cpu(), torch.as_tensor(ref).detach().cpu()
        self.compared += 1
        if got.shape != ref.shape or not bool((got == ref).all()):
            self.failures.append(f"{name}: {got.tolist() if got.numel() < 20 else '...'} != "
                                 f"{ref.tolist() if ref.numel() < 20 else '...'}")

    def outputs(self, where: str, got: Sequence, ref: Sequence, specs: Sequence[tuple]) -> None:
        """`on_device(where, *got)`, then each output against its reference: a spec (name, atol, rtol) is `close`,
        (name,) is `equal`."""
        self.on_device(where, *got)
        for spec, g, r in zip(specs, got, ref, strict=True):
            if len(spec) == 1:
                self.equal(spec[0], g, r)
            else:
                self.close(spec[0], g, r, *spec[1:])

    def true(self, name: str, cond: bool) -> None:
        if not cond:
            self.failures.append(name)


def _leaf(t: torch.Tensor, device, dtype=None, grad: bool = False) -> torch.Tensor:
    return t.detach().to(device=device, dtype=dtype or t.dtype).requires_grad_(grad)


def _ragged_problem(B=6, N=7, M=5, seed=0, scale=1.0, dtype=torch.float64):
    """Cost (B, N, M) and weights with ragged sentence counts (zeros on padding; NaN in the padded costs)."""
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(B, N, 8, generator=gen, dtype=dtype), torch.randn(B, M, 8, generator=gen, dtype=dtype)
    cost = torch.cdist(x, y) * scale
    n = torch.randint(2, N + 1, (B,), generator=gen)
    m = torch.randint(2, M + 1, (B,), generator=gen)
    n[0], m[0] = N, M  # one full problem
    qm, cm = torch.arange(N)[None] < n[:, None], torch.arange(M)[None] < m[:, None]
    a = torch.softmax(torch.randn(B, N, generator=gen, dtype=dtype).masked_fill(~qm, -math.inf), 1)
    b = torch.softmax(torch.randn(B, M, generator=gen, dtype=dtype).masked_fill(~cm, -math.inf), 1)
    cost = cost.masked_fill(~(qm[:, :, None] & cm[:, None, :]), math.nan)  # padding may hold anything
    return cost, a, b


def _docs(B=4, S=6, D=16, seed=0, dtype=torch.float64):
    """Sentence vectors (B, S, D) and a ragged mask (B, S)."""
    gen = torch.Generator().manual_seed(seed)
    emb = torch.randn(B, S, D, generator=gen, dtype=dtype)
    lengths = torch.randint(1, S + 1, (B,), generator=gen)
    lengths[0] = S
    mask = torch.arange(S)[None] < lengths[:, None]
    return emb, mask


# ---- Sinkhorn ----------------------------------------------------------------------------------------------
def check_sinkhorn_forward(rec: Recorder, dev: torch.device) -> None:
    """No-gradient solve, float32 on the device vs float64 on the CPU; ragged padding with NaN costs there."""
    from aspire.scoring.sinkhorn import sinkhorn

    cost, a, b = _ragged_problem()
    ref = sinkhorn(cost, a, b, 0.1, tol=1e-6)
    got = sinkhorn(cost.to(dev, torch.float32), a.to(dev, torch.float32), b.to(dev, torch.float32), 0.1, tol=1e-5)
    rec.on_device("sinkhorn", got.plan, got.value, got.f, got.g, got.err, got.n_iter, got.converged)
    rec.close("value", got.value, ref.value, atol=2e-4, rtol=1e-4)
    rec.close("plan", got.plan, ref.plan, atol=2e-5)
    rec.equal("converged", got.converged, torch.ones(len(cost), dtype=torch.bool))
    rec.true("plan zero on padding", bool((got.plan.cpu()[ref.plan == 0] == 0).all()))


def _grads_close(rec, name, got_leaves, ref_leaves, atol, rtol):
    for what, g, r in zip(("cost", "a", "b"), got_leaves, ref_leaves):
        rec.on_device(f"{name} grad {what}", g.grad)
        rec.close(f"{name} grad {what}", g.grad, r.grad, atol=atol, rtol=rtol)


def check_sinkhorn_autograd(rec: Recorder, dev: torch.device) -> None:
    """grad='autograd' through the iterations, float64 on both sides; gradients to cost, a and b."""
    from aspire.scoring.sinkhorn import sinkhorn

    cost, a, b = _ragged_problem(seed=1)
    cost = cost.nan_to_num(0.0)
    w = torch.randn(cost.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    sides = []
    for device in (torch.device("cpu"), dev):
        leaves = [_leaf(t, device, grad=True) for t in (cost, a, b)]
        res = sinkhorn(*leaves, 0.1, tol=1e-9, max_iter=2000, grad="autograd")
        (res.value.sum() + (res.plan * w.to(device)).sum()).backward()
        sides.append((res, leaves))
    (ref, ref_l), (got, got_l) = sides
    rec.on_device("sinkhorn", got.plan, got.value)
    rec.close("value", got.value, ref.value, atol=1e-8, rtol=1e-8)
    rec.close("plan", got.plan, ref.plan, atol=1e-9)
    _grads_close(rec, "autograd", got_l, ref_l, atol=1e-7, rtol=1e-6)


def check_sinkhorn_implicit(rec: Recorder, dev: torch.device) -> None:
    """grad='implicit' (no-tape forward, implicit backward): float32 on the device vs float64 on the CPU."""
    from aspire.scoring.sinkhorn import sinkhorn

    cost, a, b = _ragged_problem(seed=3)
    w = torch.randn(cost.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    sides = []
    for device, dtype, tol in ((torch.device("cpu"), torch.float64, 1e-9), (dev, torch.float32, 1e-5)):
        leaves = [_leaf(t, device, dtype, grad=True) for t in (cost, a, b)]
        res = sinkhorn(*leaves, 0.1, tol=tol, grad="implicit")
        (res.value.sum() + (res.plan * w.to(device, dtype)).sum()).backward()
        sides.append((res, leaves))
    (ref, ref_l), (got, got_l) = sides
    rec.on_device("sinkhorn", got.plan, got.value, got.f, got.g)
    rec.close("value", got.value, ref.value, atol=2e-4, rtol=1e-4)
    for what, g, r in zip(("cost", "a", "b"), got_l, ref_l):
        rec.on_device(f"implicit grad {what}", g.grad)
        # the weights' gradients are defined up to a constant shared by a and -b (masses stay equal): centre them
        gg, rg = g.grad, r.grad
        if what != "cost":
            live = (a if what == "a" else b) > 0
            gg = torch.where(live.to(gg.device), gg - (gg * live.to(gg.device)).sum(1, keepdim=True) / live.sum(1, keepdim=True).to(gg.device), 0.0)
            rg = torch.where(live, rg - (rg * live).sum(1, keepdim=True) / live.sum(1, keepdim=True), 0.0)
        rec.close(f"implicit grad {what}", gg, rg, atol=5e-3, rtol=5e-3)


def check_sinkhorn_newton(rec: Recorder, dev: torch.device) -> None:
    """Small eps with the Newton tail from the first check (`newton_after=1`): the batched tail on the device."""
    from aspire.scoring.sinkhorn import SinkhornConvergenceWarning, sinkhorn

    cost, a, b = _ragged_problem(seed=5, scale=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SinkhornConvergenceWarning)
        ref = sinkhorn(cost, a, b, 0.01, tol=1e-8, max_iter=500, newton_after=1)
        got = sinkhorn(cost.to(dev), a.to(dev), b.to(dev), 0.01, tol=1e-8, max_iter=500, newton_after=1)
    rec.on_device("sinkhorn", got.plan, got.value, got.n_iter, got.converged)
    rec.close("value", got.value, ref.value, atol=1e-7, rtol=1e-7)
    rec.close("plan", got.plan, ref.plan, atol=1e-7)
    rec.equal("converged", got.converged, ref.converged)


def check_sinkhorn_half(rec: Recorder, dev: torch.device) -> None:
    """float16 and bfloat16 problems (solved in float32, cast back) vs a float64 CPU solve."""
    from aspire.scoring.sinkhorn import SinkhornConvergenceWarning, sinkhorn, sinkhorn_dist

    cost, a, b = _ragged_problem(seed=6)
    ref = sinkhorn(cost, a, b, 0.1, tol=1e-6)
    for dtype, atol in ((torch.float16, 3e-3), (torch.bfloat16, 2e-2)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SinkhornConvergenceWarning)  # the cast moves marginals past tol
            got = sinkhorn_dist(cost.to(dev, dtype), a.to(dev, dtype), b.to(dev, dtype), 0.1)
        rec.on_device(f"{dtype}", got)
        rec.true(f"{dtype} dtype kept", got.dtype == dtype)
        rec.close(f"value {dtype}", got, ref.value, atol=atol, rtol=atol)


def check_sinkhorn_large_cost_f32(rec: Recorder, dev: torch.device) -> None:
    """float32 problems with C / eps up to ~1300 (L2 costs up to 65 at eps 0.05): converged flags and values vs the
    CPU's float32 solve (which iterates in float64); failed on an H200 before the batched solve went to float64 too."""
    from aspire.scoring.sinkhorn import SinkhornConvergenceWarning, sinkhorn

    gen = torch.Generator().manual_seed(7)
    B, N, M = 16, 9, 7
    x, y = torch.randn(B, N, 16, generator=gen) * 7, torch.randn(B, M, 16, generator=gen) * 7
    cost = torch.cdist(x, y)
    a = torch.softmax(torch.randn(B, N, generator=gen), 1)
    b = torch.softmax(torch.randn(B, M, generator=gen), 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SinkhornConvergenceWarning)
        ref = sinkhorn(cost, a, b, 0.05)
        got = sinkhorn(cost.to(dev), a.to(dev), b.to(dev), 0.05)
    rec.on_device("sinkhorn", got.value, got.converged)
    rec.equal("converged", got.converged, ref.converged)
    rec.close("value", got.value, ref.value, atol=2e-3)


# ---- scorers -------------------------------------------------------------------------------------------------
def _scorer_pair(scorer_fn, rec, dev, atol, rtol, grad_atol, grad_rtol, dtype=torch.float32):
    """`scorer_fn(scorer_module_args)` on DocBatch pairs: all pairs and aligned rows, forward + backward, `dtype` on
    the device vs float64 on the CPU."""
    from aspire.batch import DocBatch

    q, qm = _docs(seed=10)
    c, cm = _docs(seed=11)
    out = []
    for device, dt in ((torch.device("cpu"), torch.float64), (dev, dtype)):
        qe, ce = _leaf(q, device, dt, grad=True), _leaf(c, device, dt, grad=True)
        qb, cb = DocBatch(qe, qm.to(device)), DocBatch(ce, cm.to(device))
        scorer = scorer_fn()
        all_pairs, aligned = scorer.score(qb, cb), scorer.pairwise_score(qb, cb)
        (all_pairs.sum() + 2 * aligned.sum()).backward()
        out.append((all_pairs, aligned, qe.grad, ce.grad))
    (ra, rp, rq, rc), (ga, gp, gq, gc) = out
    rec.on_device("scores", ga, gp, gq, gc)
    rec.close("all pairs", ga, ra, atol, rtol)
    rec.close("aligned", gp, rp, atol, rtol)
    rec.close("grad queries", gq, rq, grad_atol, grad_rtol)
    rec.close("grad candidates", gc, rc, grad_atol, grad_rtol)


def check_scorer_minl2(rec: Recorder, dev: torch.device) -> None:
    from aspire.scoring.scorers import MinL2Scorer

    _scorer_pair(MinL2Scorer, rec, dev, 1e-4, 1e-5, 1e-4, 1e-4)


def check_scorer_ot(rec: Recorder, dev: torch.device) -> None:
    from aspire.scoring.scorers import OTScorer

    _scorer_pair(lambda: OTScorer(tol=1e-5), rec, dev, 1e-3, 1e-4, 5e-3, 5e-3)


def check_scorer_ot_autograd(rec: Recorder, dev: torch.device) -> None:
    from aspire.scoring.scorers import OTScorer

    """grad='autograd' (no Newton tail under the tape: eps 0.1, where every pair converges within max_iter)."""
    _scorer_pair(lambda: OTScorer(eps=0.1, tol=1e-5, grad="autograd"), rec, dev, 1e-3, 1e-4, 5e-3, 5e-3)


def check_scorer_attention(rec: Recorder, dev: torch.device) -> None:
    from aspire.scoring.scorers import AttentionScorer

    _scorer_pair(AttentionScorer, rec, dev, 1e-4, 1e-5, 1e-4, 1e-4)


def check_scorer_ot_nograd(rec: Recorder, dev: torch.device) -> None:
    """The OT scorer without a tape (what search and evaluation run): on the CPU that is the compiled gathered pass,
    on the device `l2_cost` and the batched solver; details (plan, weights, cost) compared too."""
    from aspire.scoring.scorers import ot_match, pairwise_ot_match

    q, qm = _docs(seed=12)
    c, cm = _docs(seed=13)
    with torch.no_grad():
        ref_p = pairwise_ot_match(q, qm, c, cm, tol=1e-7)
        ref_a = ot_match(q, qm, c, cm, tol=1e-7)
        got_p = pairwise_ot_match(q.to(dev, torch.float32), qm.to(dev), c.to(dev, torch.float32), cm.to(dev), tol=1e-5)
        got_a = ot_match(q.to(dev, torch.float32), qm.to(dev), c.to(dev, torch.float32), cm.to(dev), tol=1e-5)
    for name, got, ref in (("aligned", got_p, ref_p), ("all pairs", got_a, ref_a)):
        rec.on_device(name, got.dist, got.plan, got.query_weights, got.cand_weights, got.cost, got.err, got.n_iter)
        rec.close(f"{name} dist", got.dist, ref.dist, 1e-3, 1e-4)
        rec.close(f"{name} plan", got.plan, ref.plan, 5e-5)
        rec.close(f"{name} weights", got.query_weights, ref.query_weights, 1e-5)
        rec.close(f"{name} cost", got.cost, ref.cost, 1e-4, 1e-5)


def check_scorer_hybrid(rec: Recorder, dev: torch.device) -> None:
    """The hybrid scorer (whole, facet, minl2, ot terms) on batches with whole vectors."""
    from aspire.batch import DocBatch
    from aspire.scoring.scorers import HybridScorer

    q, qm = _docs(seed=14)
    c, cm = _docs(seed=15)
    gen = torch.Generator().manual_seed(16)
    qw, cw = torch.randn(len(q), q.shape[2], generator=gen, dtype=torch.float64), torch.randn(len(c), c.shape[2], generator=gen, dtype=torch.float64)
    weights = {"whole": 1.0, "facet": 0.5, "minl2": 0.2, "ot": 0.1}
    out = []
    for device, dt in ((torch.device("cpu"), torch.float64), (dev, torch.float32)):
        scorer = HybridScorer(weights=weights)
        with torch.no_grad():
            qb = DocBatch(q.to(device, dt), qm.to(device), whole=qw.to(device, dt))
            cb = DocBatch(c.to(device, dt), cm.to(device), whole=cw.to(device, dt))
            out.append((scorer.score(qb, cb), scorer.pairwise_score(qb, cb)))
    (ra, rp), (ga, gp) = out
    rec.on_device("hybrid", ga, gp)
    rec.close("all pairs", ga, ra, 1e-3, 1e-4)
    rec.close("aligned", gp, rp, 1e-3, 1e-4)


# ---- losses ------------------------------------------------------------------------------------------------
def check_loss_triplet_aligned(rec: Recorder, dev: torch.device) -> None:
    """Kind `ts`'s loss by hand: aligned-sentence positive distance, min-L2 negatives, triplet margin, backward."""
    from aspire.batch import DocBatch
    from aspire.losses.triplet import (
        aligned_sentence_dist,
        in_batch_negative_mask,
        pick_one_negative,
        triplet_margin_dist_loss,
    )
    from aspire.scoring.scorers import MinL2Scorer

    q, qm = _docs(seed=20)
    c, cm = _docs(seed=21)
    group = torch.tensor([[0, 10, -1], [1, 11, 12], [2, 12, -1], [3, 13, 11]])
    pos_ids = torch.tensor([10, 11, 12, 13])
    a_idx, b_idx = torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long)
    out = []
    for device, dt in ((torch.device("cpu"), torch.float64), (dev, torch.float32)):
        qe, ce = _leaf(q, device, dt, grad=True), _leaf(c, device, dt, grad=True)
        qb, cb = DocBatch(qe, qm.to(device)), DocBatch(ce, cm.to(device))
        allowed = in_batch_negative_mask(group.to(device), pos_ids.to(device))
        idx, valid = pick_one_negative(allowed)
        pos = aligned_sentence_dist(qb, cb, a_idx.to(device), b_idx.to(device))
        scorer = MinL2Scorer()
        neg_all = scorer.dist(qb, cb)
        neg_one = scorer.pairwise_dist(qb, cb.index(idx))[:, None]
        loss = (triplet_margin_dist_loss(pos, neg_all, allowed, margin=1.0)
                + triplet_margin_dist_loss(pos, neg_one, valid[:, None], margin=1.0))
        loss.backward()
        out.append((allowed, idx, valid, pos, loss, qe.grad, ce.grad))
    ref, got = out
    rec.on_device("loss", *got)
    for name, g, r in zip(("allowed", "idx", "valid"), got[:3], ref[:3]):
        rec.equal(name, g, r)
    rec.close("aligned dist", got[3], ref[3], 1e-4, 1e-5)
    rec.close("loss", got[4], ref[4], 1e-4, 1e-5)
    rec.close("grad queries", got[5], ref[5], 1e-4, 1e-4)
    rec.close("grad candidates", got[6], ref[6], 1e-4, 1e-4)


def check_loss_ot_triplet(rec: Recorder, dev: torch.device) -> None:
    """Kind `ot`'s loss by hand: OT distances (implicit gradient) in the triplet margin loss, backward."""
    from aspire.batch import DocBatch
    from aspire.losses.triplet import in_batch_negative_mask, triplet_margin_dist_loss
    from aspire.scoring.scorers import OTScorer

    q, qm = _docs(seed=22)
    c, cm = _docs(seed=23)
    group = torch.tensor([[0, 10], [1, 11], [2, 12], [3, 13]])
    pos_ids = torch.tensor([10, 11, 12, 13])
    out = []
    for device, dt in ((torch.device("cpu"), torch.float64), (dev, torch.float32)):
        qe, ce = _leaf(q, device, dt, grad=True), _leaf(c, device, dt, grad=True)
        qb, cb = DocBatch(qe, qm.to(device)), DocBatch(ce, cm.to(device))
        scorer = OTScorer(tol=1e-5)
        allowed = in_batch_negative_mask(group.to(device), pos_ids.to(device))
        loss = triplet_margin_dist_loss(scorer.pairwise_dist(qb, cb), scorer.dist(qb, cb), allowed, margin=3.0)
        loss.backward()
        out.append((loss, qe.grad, ce.grad))
    ref, got = out
    rec.on_device("loss", *got)
    rec.true("loss is positive (hinges active)", ref[0].item() > 0)
    rec.close("loss", got[0], ref[0], 1e-3, 1e-4)
    rec.close("grad queries", got[1], ref[1], 5e-3, 5e-3)
    rec.close("grad candidates", got[2], ref[2], 5e-3, 5e-3)


def check_loss_matrix(rec: Recorder, dev: torch.device) -> None:
    """Every `MATRIX_LOSSES` objective (mnrl plain, symmetric and with a teacher; multi_similarity; bce) on a
    (B, B + H) similarity matrix with masked negatives, forward + backward."""
    from aspire.losses.registry import MATRIX_LOSSES
    from aspire.losses.triplet import masked_anchor_mean

    gen = torch.Generator().manual_seed(30)
    B, K = 5, 7
    sim = torch.randn(B, K, generator=gen, dtype=torch.float64) * 0.3
    mask = torch.rand(B, K, generator=gen) > 0.3
    mask[4, :] = False  # an anchor without negatives
    teacher = torch.randn(B, K, generator=gen, dtype=torch.float64) * 0.3
    teacher[1] = math.nan  # a row the teacher did not score
    cases = [("mnrl", {}, {}), ("mnrl", {"symmetric": True}, {}), ("mnrl", {}, {"teacher": teacher}),
             ("multi_similarity", {}, {}), ("bce", {}, {})]
    for name, kw, fkw in cases:
        label = name + (f" {sorted(kw)}" if kw else "") + (" teacher" if fkw else "")
        out = []
        for device, dt in ((torch.device("cpu"), torch.float64), (dev, torch.float32)):
            s = _leaf(sim, device, dt, grad=True)
            loss_fn = MATRIX_LOSSES[name](**kw)
            per, valid = loss_fn(s, mask.to(device), **{k: v.to(device, dt) for k, v in fkw.items()})
            masked_anchor_mean(per, valid).backward()
            out.append((per, valid, s.grad))
        ref, got = out
        rec.on_device(label, *got)
        rec.equal(f"{label} valid", got[1], ref[1])
        rec.close(f"{label} loss", got[0], ref[0], 1e-4, 1e-5)
        rec.close(f"{label} grad", got[2], ref[2], 1e-4, 1e-4)


def check_loss_vectors(rec: Recorder, dev: torch.device) -> None:
    """Kind `cocite_vector`'s pieces: mean pooling, all-pairs and aligned single-vector L2, backward."""
    from aspire.batch import DocBatch
    from aspire.losses.triplet import mean_pool_doc, pairwise_vector_l2_dist, vector_l2_dist

    q, qm = _docs(seed=31)
    c, cm = _docs(seed=32)
    out = []
    for device, dt in ((torch.device("cpu"), torch.float64), (dev, torch.float32)):
        qe, ce = _leaf(q, device, dt, grad=True), _leaf(c, device, dt, grad=True)
        qp, cp = mean_pool_doc(DocBatch(qe, qm.to(device))), mean_pool_doc(DocBatch(ce, cm.to(device)))
        d_all, d_one = vector_l2_dist(qp, cp), pairwise_vector_l2_dist(qp, cp)
        (d_all.sum() + d_one.sum()).backward()
        out.append((qp.emb, qp.mask, d_all, d_one, qe.grad, ce.grad))
    ref, got = out
    rec.outputs("vectors", got, ref, [("pooled", 1e-5, 1e-6), ("pooled mask",), ("all pairs", 1e-4, 1e-5),
                                      ("aligned", 1e-4, 1e-5), ("grad queries", 1e-4, 1e-4),
                                      ("grad candidates", 1e-4, 1e-4)])


# ---- the contextual encoder ---------------------------------------------------------------------------------------
TINY_WORDS = (
    "the a of and to in is we for on with that this by are as an be from at our which it model models "
    "method methods result results paper task data learning neural network language text sentence "
    "sentences show propose new approach using based performance state art improve improves two "
    "document documents similarity scientific abstract title citation aspect"
).split()
_TINY: dict[str, Path] = {}


def _tiny_model_dir() -> Path:
    """A random BertModel + BertTokenizerFast with a tiny vocabulary (as tests/conftest.py builds it), once."""
    if "dir" in _TINY:
        return _TINY["dir"]
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path = Path(tempfile.mkdtemp(prefix="aspire-gpu-check-"))
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(TINY_WORDS))
    vocab += [ch for ch in chars if ch not in vocab] + ["##" + ch for ch in chars]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab=str(path / "vocab.txt"), do_lower_case=True, strip_accents=False)
    tokenizer.model_max_length = 128
    tokenizer.save_pretrained(path)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    BertModel(config).eval().save_pretrained(path)
    _TINY["dir"] = path
    return path


def _encoder(device, dtype=torch.float32, **settings):
    """The tiny BERT as a `ContextualSentenceEncoder` on `device` in `dtype`, without dropout (the paired passes
    must compute one function, also in train mode)."""
    from transformers import BertModel, BertTokenizerFast

    from aspire.encoders.contextual import ContextualSentenceEncoder

    path = _tiny_model_dir()
    model = BertModel.from_pretrained(path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = model.to(device=device, dtype=dtype)
    return ContextualSentenceEncoder(model, BertTokenizerFast.from_pretrained(path), **settings)


def _papers():
    """Three papers, the first long enough for continuation windows at max_length 32."""
    from aspire.data.papers import Paper

    long = [f"we propose a new method {i} for scientific document similarity using neural models ." for i in range(9)]
    return [
        Paper("p-long", "a model of citation", long),
        Paper("p-short", "text similarity", ["the task is two sentences .", "results show the approach improves ."]),
        Paper("p-one", "", ["a language model of abstract text ."]),
    ]


def check_encoder_forward(rec: Recorder, dev: torch.device) -> None:
    """`forward` (differentiable) with continuation windows: sentence vectors, mask, whole vectors and the gradient
    to the word embeddings, float32 on the device vs float64 on the CPU."""
    out = []
    for device, dt in ((torch.device("cpu"), torch.float64), (dev, torch.float32)):
        enc = _encoder(device, dt, max_length=32)
        enc.eval()  # no dropout: the two passes must see one function (eval mode still builds the graph)
        inputs = enc.tokenize(_papers())
        rec.true("continuation windows", len(inputs.input_ids) > len(inputs.n_sentences))
        docs = enc(inputs.to(device), max_rows=2)
        (docs.emb.sum() + docs.whole.pow(2).sum()).backward()
        grad = enc.model.embeddings.word_embeddings.weight.grad
        out.append((docs.emb, docs.mask, docs.whole, grad))
    ref, got = out
    rec.outputs("forward", got, ref, [("emb", 1e-4, 1e-5), ("mask",), ("whole", 1e-4, 1e-5),
                                      ("grad word embeddings", 1e-3, 1e-4)])


def check_encoder_encode(rec: Recorder, dev: torch.device) -> None:
    """`encode` (inference, tokenised ahead on a worker thread, bucketed) with continuation windows: its outputs
    come back on the CPU whatever the model's device, as documented; float32 on both sides."""
    out = []
    for device in (torch.device("cpu"), dev):
        enc = _encoder(device, max_length=32)
        docs = enc.encode(_papers() * 2, batch_size=2)
        out.append(docs)
    ref, got = out
    rec.on_device("encode (documented: CPU)", got.emb, got.mask, got.whole, device=torch.device("cpu"))
    rec.equal("paper ids", list(range(len(got.paper_ids))), list(range(len(ref.paper_ids))))
    rec.true("paper order", got.paper_ids == ref.paper_ids)
    rec.close("emb", got.emb, ref.emb, 1e-4, 1e-5)
    rec.equal("mask", got.mask, ref.mask)
    rec.close("whole", got.whole, ref.whole, 1e-4, 1e-5)


def check_encoder_half(rec: Recorder, dev: torch.device) -> None:
    """`forward` with a half-precision model (bfloat16; float16 too on a GPU): vectors in the model's dtype, close
    to a float32 CPU pass at the dtype's precision."""
    dtypes = [torch.bfloat16] + ([torch.float16] if dev.type == "cuda" else [])
    ref_enc = _encoder(torch.device("cpu"), torch.float32, max_length=32)
    with torch.no_grad():
        ref = ref_enc(ref_enc.tokenize(_papers()))
        for dt in dtypes:
            enc = _encoder(dev, dt, max_length=32)
            got = enc(enc.tokenize(_papers()).to(dev))
            rec.on_device(f"{dt}", got.emb, got.whole)
            rec.true(f"{dt} kept", got.emb.dtype == dt and got.whole.dtype == dt)
            rec.close(f"emb {dt}", got.emb.float(), ref.emb, 0.1, 0.05)
            rec.close(f"whole {dt}", got.whole.float(), ref.whole, 0.1, 0.05)


# ---- a tiny training run -------------------------------------------------------------------------------------
def _train_steps(device, dtype, kind: str, loss_kind: str, steps: int = 2):
    from aspire.data.papers import Paper
    from aspire.train.config import LossConfig, ModelConfig
    from aspire.train.data import Example, TripletCollator
    from aspire.train.document_model import DocumentModel

    words = TINY_WORDS
    gen = torch.Generator().manual_seed(40)

    def sentence(k):
        pick = torch.randint(0, len(words), (k,), generator=gen).tolist()
        return " ".join(words[i] for i in pick) + " ."

    papers = {f"p{i}": Paper(f"p{i}", sentence(3), [sentence(6) for _ in range(2 + i % 3)]) for i in range(10)}
    examples = [Example(f"p{i}", f"p{i + 5}", (f"p{i}", f"p{i + 5}"), f"p{(i + 2) % 10}" if i % 2 else None,
                        (0, 1)) for i in range(5)]
    torch.manual_seed(0)
    encoder = _encoder(device, dtype, max_length=64)
    model_cfg = ModelConfig(kind=kind, encoder="tiny", ot_tol=1e-5) if "ot" in kind else ModelConfig(kind=kind, encoder="tiny")
    model = DocumentModel(encoder, model_cfg, LossConfig(kind=loss_kind, **({"negatives": "all"} if loss_kind == "triplet" else {})))
    model.train()
    collate = TripletCollator(model.tokenize, papers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        batch = collate(examples).to(device)
        out = model(batch)
        opt.zero_grad()
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(out["loss"].detach())
    return torch.stack(losses), {n: p.detach() for n, p in model.named_parameters()}, out


def _check_train(rec: Recorder, dev: torch.device, kind: str, loss_kind: str) -> None:
    ref_loss, ref_params, _ = _train_steps(torch.device("cpu"), torch.float64, kind, loss_kind)
    got_loss, got_params, out = _train_steps(dev, torch.float32, kind, loss_kind)
    rec.on_device("outputs", *(v for v in out.values() if isinstance(v, torch.Tensor)))
    rec.on_device("parameters", *got_params.values())
    rec.true("loss moved", bool(ref_loss[0] != ref_loss[-1]))
    rec.close("losses", got_loss, ref_loss, 1e-3, 1e-3)
    for name in ("encoder.model.embeddings.word_embeddings.weight", "encoder.model.encoder.layer.1.output.dense.weight"):
        rec.close(name, got_params[name], ref_params[name], 1e-4, 1e-4)


def check_train_ts_triplet(rec: Recorder, dev: torch.device) -> None:
    """Two AdamW steps of kind `ts` (aligned sentence positive, min-L2 negatives, hard negatives) with the triplet
    loss."""
    _check_train(rec, dev, "ts", "triplet")


def check_train_ot_triplet(rec: Recorder, dev: torch.device) -> None:
    """Two AdamW steps of kind `ts+ot` (aligned + OT terms, implicit Sinkhorn gradient) with the triplet loss."""
    _check_train(rec, dev, "ts+ot", "triplet")


def check_train_hybrid_mnrl(rec: Recorder, dev: torch.device) -> None:
    """Two AdamW steps of kind `hybrid+ts` (whole, facet and aligned terms) with the mnrl matrix loss."""
    _check_train(rec, dev, "hybrid+ts", "mnrl")


CHECKS = [
    check_sinkhorn_forward, check_sinkhorn_autograd, check_sinkhorn_implicit, check_sinkhorn_newton,
    check_sinkhorn_half, check_sinkhorn_large_cost_f32,
    check_scorer_minl2, check_scorer_ot, check_scorer_ot_autograd, check_scorer_ot_nograd, check_scorer_attention,
    check_scorer_hybrid,
    check_loss_triplet_aligned, check_loss_ot_triplet, check_loss_matrix, check_loss_vectors,
    check_encoder_forward, check_encoder_encode, check_encoder_half,
    check_train_ts_triplet, check_train_ot_triplet, check_train_hybrid_mnrl,
]


def run_check(fn, dev: torch.device) -> dict:
    name = fn.__name__.removeprefix("check_")
    rec = Recorder(dev)
    start = time.perf_counter()
    status, detail = "pass", ""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn(rec, dev)
        for w in caught:  # a check that expects one catches it itself: any left is a failure
            if w.category.__name__ == "SinkhornConvergenceWarning":
                rec.failures.append(f"SinkhornConvergenceWarning: {w.message}")
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if rec.failures:
            status, detail = "FAIL", "; ".join(rec.failures)
        elif rec.compared == 0:
            status, detail = "FAIL", "compared nothing"
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        status = f"needs {missing}" if missing else "error"
        detail = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001  (one check's crash is its result, the rest still run)
        status = "error"
        detail = f"{type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=6)
    diff, tol, _ = rec.worst
    return {"check": name, "status": status, "max_abs_diff": diff, "tolerance": tol,
            "seconds": round(time.perf_counter() - start, 3), "detail": detail,
            "doc": " ".join((fn.__doc__ or "").split())}


def machine(dev: torch.device) -> dict:
    info = {"python": sys.version.split()[0], "torch": torch.__version__, "device": str(dev),
            "cuda_available": torch.cuda.is_available(), "cuda": torch.version.cuda,
            "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(), "threads": torch.get_num_threads()}
    if dev.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(dev)
    for mod in ("transformers", "tokenizers", "numba"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001
            info[mod] = f"unavailable ({type(exc).__name__})"
    return info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="device to check against the CPU reference (cuda, cpu)")
    parser.add_argument("--out", required=True, type=Path, help="folder for gpu_check.json")
    parser.add_argument("--only", nargs="*", default=None, help="run only these checks (names without check_)")
    args = parser.parse_args(argv)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    checks = [fn for fn in CHECKS if args.only is None or fn.__name__.removeprefix("check_") in args.only]
    if args.only is not None and len(checks) != len(args.only):
        known = [fn.__name__.removeprefix("check_") for fn in CHECKS]
        parser.error(f"unknown checks {sorted(set(args.only) - set(known))}; valid: {', '.join(known)}")
    rows = []
    print(f"{'check':<28} {'status':<14} {'max abs diff':>12} {'tolerance':>10} {'seconds':>8}")
    for fn in checks:
        row = run_check(fn, dev)
        rows.append(row)
        print(f"{row['check']:<28} {row['status']:<14} {row['max_abs_diff']:>12.3g} {row['tolerance']:>10.3g} "
              f"{row['seconds']:>8.2f}", flush=True)
        if row["status"] != "pass":
            print("    " + row["detail"].replace("\n", "\n    "), flush=True)
    failed = [r["check"] for r in rows if r["status"] != "pass"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps({"machine": machine(dev), "checks": rows,
                                                         "failed": failed}, indent=1))
    print(f"{len(rows) - len(failed)} of {len(rows)} checks passed" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
