"""Scorers over DocBatch: brute-force checks, sign convention, masks, gradients, the triplet direction."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from aspire import DocBatch
from aspire.losses import triplet_margin_dist_loss
from aspire.scoring import (
    SCORERS,
    attention_dist,
    cross_l2_cost,
    gathered_l2_cost,
    gathered_ot_match,
    get_scorer,
    l2_cost,
    minl2_match,
    ot_match,
    ot_weights,
    pairwise_minl2_match,
    pairwise_ot_dist,
    pairwise_ot_match,
    sinkhorn,
)
from aspire.scoring.distance import gathered_l2_minima, gathered_l2_weights
from aspire.scoring.scorers import valid_minima

F64 = torch.float64


def random_batch(lengths, dim=6, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return DocBatch.from_list([0.4 * torch.randn(n, dim, generator=g, dtype=dtype) for n in lengths],
                              paper_ids=[f"p{i}" for i in range(len(lengths))])


def test_registry_names_and_unknown_name():
    assert set(SCORERS) == {"minl2", "ot", "attention", "maxpassage", "hybrid"}
    assert get_scorer("ot", tau=2.0, eps=0.1).tau == 2.0
    with pytest.raises(ValueError, match="valid: minl2, ot, attention, maxpassage, hybrid"):
        get_scorer("cosine")


@pytest.mark.parametrize("name, options, said", [
    ("ot", {"tau": -1.0}, "tau must be > 0, got -1.0"),  # once accepted: the farthest sentences weighed most
    ("ot", {"tau": 0.0}, "tau must be > 0, got 0.0"),  # once a Sinkhorn error about the weights' mass
    ("ot", {"eps": 0.0}, "eps must be > 0, got 0.0"),  # once raised only at the first score
    ("attention", {"tau": float("nan")}, "tau must be > 0, got nan"),
    ("hybrid", {"tau": -5.0}, "tau must be > 0, got -5.0"),
    ("ot", {"eps": "0.1"}, "eps must be a number > 0, got '0.1'"),  # once a TypeError comparing str and int
])
def test_a_temperature_or_regularisation_not_above_zero_is_refused_when_the_scorer_is_made(name, options, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        get_scorer(name, **options)
    assert get_scorer("ot", tau=math.inf).tau == math.inf  # uniform weights


def test_evaluate_refuses_tau_and_eps_not_above_zero_by_their_flags():
    from aspire.evaluate.options import scorer_options

    assert scorer_options("ot", tau=5000.0, eps=0.05) == {"tau": 5000.0, "eps": 0.05}
    with pytest.raises(ValueError, match=re.escape("--tau must be > 0, got -1.0 (inf: uniform weights)")):
        scorer_options("ot", tau=-1.0)
    with pytest.raises(ValueError, match=re.escape("--eps must be > 0, got 0.0")):
        scorer_options("ot", eps=0.0)


def test_l2_costs_equal_brute_force_and_have_finite_gradient_at_zero():
    q, c = random_batch([3, 4], seed=1), random_batch([5, 2, 4], seed=2)
    cross = cross_l2_cost(q.emb, c.emb)  # (2, 3, S, T)
    for i in range(2):
        for j in range(3):
            for s in range(q.emb.shape[1]):
                for t in range(c.emb.shape[1]):
                    assert abs(cross[i, j, s, t] - (q.emb[i, s] - c.emb[j, t]).norm()) < 1e-10
    aligned = l2_cost(q.emb, c.emb[:2, :4])
    torch.testing.assert_close(aligned, torch.stack([cross[0, 0, :, :4], cross[1, 1, :, :4]]))
    x = torch.randn(2, 3, 5, dtype=F64, requires_grad=True)
    d = l2_cost(x, x.detach().clone())  # zero distances on the diagonal
    (grad,) = torch.autograd.grad(d.sum(), x)
    assert torch.isfinite(grad).all()


def test_a_nan_vector_is_nan_apart_not_zero():
    """sqrt(max(sq, 0)) once mapped NaN to 0, so a NaN candidate was every query's nearest paper."""
    q, c = random_batch([2], seed=1), random_batch([2, 2], seed=2)
    c.emb[1, 0] = float("nan")
    for cost in (cross_l2_cost(q.emb, c.emb)[0, 1], l2_cost(q.emb, c.emb[1:])[0]):
        assert torch.isnan(cost[:, 0]).all() and torch.isfinite(cost[:, 1]).all()
    scores = get_scorer("minl2").score(q, c)[0]
    assert torch.isfinite(scores[0]) and torch.isnan(scores[1])


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_vectors_of_two_models_or_dtypes_are_an_error_not_a_shape_error(name):
    q = random_batch([2], seed=1)
    q = DocBatch(q.emb, q.mask, q.paper_ids, whole=q.emb[:, 0])
    for c, said in ((random_batch([3], dim=8, seed=2), "query vectors are 6-d and candidate vectors 8-d"),
                    (random_batch([3], seed=2, dtype=torch.float32), "are torch.float64 and candidate vectors torch.float32"),
                    (random_batch([3], seed=2).emb.long(), "are torch.float64 and candidate vectors torch.int64")):
        c = c if isinstance(c, DocBatch) else DocBatch(c, torch.ones(c.shape[:2], dtype=torch.bool))
        c = DocBatch(c.emb, c.mask, whole=c.emb[:, 0])
        for score in (get_scorer(name).score, get_scorer(name).pairwise_score):
            with pytest.raises(ValueError, match=re.escape(said)):
                score(q.index([0]), c)
    half = DocBatch(q.emb.half(), q.mask, whole=q.whole.half())
    with pytest.raises(ValueError, match=re.escape("are torch.float64 and candidate vectors torch.float16")):
        get_scorer(name).score(q, half)
    assert torch.isfinite(get_scorer(name).score(half, half)).all()


def test_from_list_refuses_sentences_that_do_not_match_the_vectors():
    with pytest.raises(ValueError, match="paper b has 3 vectors and 2 sentences"):
        DocBatch.from_list([torch.zeros(1, 4), torch.zeros(3, 4)], ["a", "b"], [["x"], ["y", "z"]])


def test_minl2_equals_brute_force_double_loop():
    q, c = random_batch([3, 5, 1], seed=3), random_batch([4, 2], seed=4)
    q = q.with_mask(q.mask & ~torch.tensor([[False, True, False, False, False]] * 3))  # drop sentence 1
    m = minl2_match(q.emb, q.mask, c.emb, c.mask)
    for i in range(3):
        for j in range(2):
            best, arg = math.inf, None
            for s in range(q.emb.shape[1]):
                for t in range(c.emb.shape[1]):
                    if q.mask[i, s] and c.mask[j, t]:
                        d = (q.emb[i, s] - c.emb[j, t]).norm().item()
                        if d < best:
                            best, arg = d, (s, t)
            assert abs(m.dist[i, j].item() - best) < 1e-10
            assert (m.query_sent[i, j].item(), m.cand_sent[i, j].item()) == arg
    pm = pairwise_minl2_match(q.emb[:2], q.mask[:2], c.emb, c.mask)
    torch.testing.assert_close(pm.dist, torch.stack([m.dist[0, 0], m.dist[1, 1]]))


@pytest.mark.parametrize("name", ["minl2", "ot", "attention"])
def test_score_is_minus_dist_and_all_pairs_match_aligned(name):
    scorer = get_scorer(name)
    q, c = random_batch([3, 5, 2], seed=5), random_batch([4, 2, 6], seed=6)
    score = scorer.score(q, c)
    assert score.shape == (3, 3)
    torch.testing.assert_close(score, -scorer.dist(q, c))
    torch.testing.assert_close(scorer.pairwise_score(q, c), torch.diagonal(score), atol=1e-6, rtol=0)
    torch.testing.assert_close(scorer.pairwise_dist(q, c), -torch.diagonal(score), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="equal batch sizes"):
        scorer.pairwise_score(q, c.index([0, 1]))


@pytest.mark.parametrize("name", ["minl2", "ot", "attention"])
def test_narrower_query_mask_equals_dropping_the_sentences(name):
    """Aspect-conditional query = narrower mask; padding and unselected sentences are ignored."""
    scorer = get_scorer(name)
    q, c = random_batch([5, 4], seed=7), random_batch([3, 6, 2], seed=8)
    keep = [[0, 3], [1, 2, 3]]
    narrowed = q.select_sentences(keep)
    dropped = DocBatch.from_list([q.emb[i, k] for i, k in enumerate(keep)])
    torch.testing.assert_close(scorer.score(narrowed, c), scorer.score(dropped, c), atol=1e-6, rtol=0)
    assert not torch.allclose(scorer.score(narrowed, c), scorer.score(q, c))
    extra_pad = DocBatch.concat([c, random_batch([9], seed=9)]).index([0, 1, 2])  # more padding columns
    torch.testing.assert_close(scorer.score(q, extra_pad), scorer.score(q, c), atol=1e-6, rtol=0)


def test_select_sentences_checks_positions_against_the_mask_not_the_selected_count():
    """Positions are the paper's own (0-based): after narrowing {0, 1, 2} to {1, 2}, position 2 is still
    a selected sentence although only two are selected (a check against mask.sum() refused it), and a
    padded position is refused, naming the paper (a check against the padded length let it through)."""
    q = random_batch([3, 5], seed=12)  # paper 0 has 3 sentences, padded to 5
    q = DocBatch(q.emb, q.mask, ["a", "b"], [["s0", "s1", "s2"], ["t0", "t1", "t2", "t3", "t4"]])
    narrowed = q.select_sentences([[1, 2], [0, 4]])
    again = narrowed.select_sentences([[2], [4]])
    assert again.mask.tolist() == [[False, False, True, False, False], [False, False, False, False, True]]
    with pytest.raises(ValueError, match=r"paper a: sentence indices \[3\] out of range 0..2"):
        q.select_sentences([[3], [0]])  # padding of paper a (a padded-length check accepts it)
    with pytest.raises(ValueError, match=r"paper a: sentences \[0\] are not selected in this batch"):
        narrowed.select_sentences([[0], [0]])  # left out by the first selection: cannot come back
    without_texts = DocBatch(q.emb, q.mask)
    with pytest.raises(ValueError, match=r"paper row 0: sentences \[4\] are not selected in this batch"):
        without_texts.select_sentences([[4], [4]])
    with pytest.raises(ValueError, match="out of range"):
        without_texts.select_sentences([[-1], [0]])


def test_empty_selection_is_refused():
    q, c = random_batch([3], seed=10), random_batch([2], seed=11)
    for name in SCORERS:
        with pytest.raises(ValueError, match="no sentence selected"):
            get_scorer(name).score(q.with_mask(torch.zeros_like(q.mask)), c)


def test_ot_weights_softmax_of_min_distance_and_uniform_limit():
    q, c = random_batch([4], seed=12), random_batch([3], seed=13)
    cost = l2_cost(q.emb, c.emb)
    x, y = ot_weights(cost, q.mask, c.mask, tau=0.5)
    torch.testing.assert_close(x, torch.softmax(-cost.amin(2) / 0.5, 1))
    torch.testing.assert_close(y, torch.softmax(-cost.amin(1) / 0.5, 1))
    qp, cp = random_batch([4, 2], seed=12), random_batch([3, 1], seed=13)
    x, y = ot_weights(l2_cost(qp.emb, cp.emb), qp.mask, cp.mask, tau=math.inf)
    torch.testing.assert_close(x, qp.mask / qp.mask.sum(1, keepdim=True).to(F64))
    torch.testing.assert_close(y, cp.mask / cp.mask.sum(1, keepdim=True).to(F64))


def test_ot_match_is_sinkhorn_on_the_l2_cost():
    q, c = random_batch([4, 3], seed=14), random_batch([5, 2], seed=15)
    m = ot_match(q.emb, q.mask, c.emb, c.mask, tau=2.0, eps=0.05, tol=1e-10, max_iter=50_000)
    assert m.plan.shape == (2, 2, 4, 5) and m.dist.shape == (2, 2)
    for i in range(2):
        for j in range(2):
            cost = torch.cdist(q.emb[i, : q.mask[i].sum()], c.emb[j, : c.mask[j].sum()])[None]
            x = torch.softmax(-cost.amin(2) / 2.0, 1)
            y = torch.softmax(-cost.amin(1) / 2.0, 1)
            ref = sinkhorn(cost, x, y, 0.05, tol=1e-10, max_iter=50_000)
            assert abs(m.dist[i, j] - ref.value[0]) < 1e-8
            torch.testing.assert_close(m.plan[i, j, : cost.shape[1], : cost.shape[2]], ref.plan[0], atol=1e-8, rtol=0)
            assert m.plan[i, j].sum() == pytest.approx(1.0, abs=1e-6)
    assert (m.err <= 1e-10 * 2).all()


def test_attention_equals_formula_and_tends_to_minl2():
    q, c = random_batch([3, 4], seed=16), random_batch([2, 5], seed=17)
    att = attention_dist(q.emb, q.mask, c.emb, c.mask, tau=0.7)
    for i in range(2):
        for j in range(2):
            d = torch.cdist(q.emb[i, : q.mask[i].sum()], c.emb[j, : c.mask[j].sum()]).flatten()
            assert abs(att[i, j] - (torch.softmax(-d / 0.7, 0) * d).sum()) < 1e-10
    sharp = attention_dist(q.emb, q.mask, c.emb, c.mask, tau=1e-4)
    torch.testing.assert_close(sharp, minl2_match(q.emb, q.mask, c.emb, c.mask).dist, atol=1e-6, rtol=0)


@pytest.mark.parametrize("grad", ["autograd", "implicit"])
def test_ot_distance_gradients_are_finite_for_identical_papers(grad):
    g = torch.Generator().manual_seed(22)
    x = torch.randn(40, 4, 6, generator=g, dtype=torch.float32, requires_grad=True)
    mask = torch.ones(40, 4, dtype=torch.bool)
    mask[::2, 3] = False
    d = pairwise_ot_dist(x, mask, x, mask, tau=1.0, eps=0.05, grad=grad)
    (grad_x,) = torch.autograd.grad(d.sum(), x)
    assert torch.isfinite(grad_x).all() and torch.isfinite(d).all()


def test_all_pairs_memory_sane_shapes():
    q, c = random_batch([7], dim=32, seed=18, dtype=torch.float32), random_batch([3 + i % 9 for i in range(250)], dim=32, seed=19, dtype=torch.float32)
    assert get_scorer("ot").score(q, c).shape == (1, 250)
    b = random_batch([2 + i % 10 for i in range(64)], dim=32, seed=20, dtype=torch.float32)
    assert get_scorer("ot").score(b, b).shape == (64, 64)


@pytest.mark.parametrize("name", ["minl2", "ot", "attention"])
def test_triplet_direction_known_answer(name):
    """Anchor near the positive, far from the negative: zero loss at a small margin; with a large
    margin a gradient step must bring the positive closer (guards against training backwards)."""
    scorer = get_scorer(name)
    g = torch.Generator().manual_seed(21)
    anchor = torch.randn(1, 3, 8, generator=g, dtype=F64)
    positive = (anchor + 0.05 * torch.randn(1, 3, 8, generator=g, dtype=F64)).requires_grad_()
    negative = anchor + 3.0 + torch.randn(1, 3, 8, generator=g, dtype=F64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    A, N = DocBatch(anchor, mask), DocBatch(negative, mask)

    def dists():
        P = DocBatch(positive, mask)
        return scorer.pairwise_dist(A, P), scorer.pairwise_dist(A, N)

    def loss_at(margin):  # the loss training uses (aspire.train.document_model), one allowed negative an anchor
        d_pos, d_neg = dists()
        return triplet_margin_dist_loss(d_pos, d_neg[:, None], torch.ones(1, 1, dtype=torch.bool), margin)

    d_pos, d_neg = dists()
    assert (scorer.pairwise_score(A, DocBatch(positive, mask)) > scorer.pairwise_score(A, N)).all()
    assert loss_at(0.1).item() == 0.0
    loss = loss_at(100.0)
    assert loss.item() > 0
    (grad,) = torch.autograd.grad(loss, positive)
    with torch.no_grad():
        positive -= 0.01 * grad
    new_pos, _ = dists()
    assert new_pos.item() < d_pos.item()


def stored_pairs(B, N, M, P=40, dim=16, seed=0, dtype=F64):
    """A store of P vectors and aligned pairs of row numbers into it, ragged (-1: padding), the first sentence
    of each pair's two sides the same vector."""
    g = torch.Generator().manual_seed(seed)
    store = 0.4 * torch.randn(P, dim, generator=g, dtype=dtype)
    q_rows, c_rows = torch.randint(0, P, (B, N), generator=g), torch.randint(0, P, (B, M), generator=g)
    c_rows[:, 0] = q_rows[:, 0]  # the same sentence on both sides: distance exactly 0
    q_rows[torch.arange(N) >= torch.randint(1, N + 1, (B, 1), generator=g)] = -1
    c_rows[torch.arange(M) >= torch.randint(1, M + 1, (B, 1), generator=g)] = -1
    return store, q_rows, c_rows


def brute_force_cost(store, q_rows, c_store, c_rows):
    """The pairs' distances (B, N, M) from their gathered rows, float64, and where both sides are real sentences."""
    x, y = store[q_rows.clamp_min(0)].double(), c_store[c_rows.clamp_min(0)].double()
    return (x[:, :, None] - y[:, None]).norm(dim=-1), (q_rows >= 0)[:, :, None] & (c_rows >= 0)[:, None, :]


@pytest.mark.parametrize(("dtype", "pairs", "two_stores"), [
    (torch.float32, 50, False),  # the store's norms summed once (it holds fewer rows than the pairs read)
    (F64, 50, False),
    (torch.float32, 3, False),  # each pair sums its own rows' norms
    (F64, 3, True),  # the candidates in a store of their own
])
def test_gathered_l2_cost_equals_l2_cost_of_the_gathered_rows(dtype, pairs, two_stores):
    store, q_rows, c_rows = stored_pairs(pairs, 6, 7, seed=30, dtype=dtype)
    c_store = store.clone() if two_stores else store
    cost, row_min, col_min = gathered_l2_minima(store, q_rows, c_store, c_rows)  # compiled (CPU, no tape)
    exact, valid = brute_force_cost(store, q_rows, c_store, c_rows)
    q_mask, c_mask = q_rows >= 0, c_rows >= 0
    tol = 1e-5 if dtype == torch.float32 else 1e-12  # on squared distances: sqrt amplifies the rounding near 0
    torch.testing.assert_close(cost.double()[valid] ** 2, exact[valid] ** 2, atol=tol, rtol=0)
    assert (cost[~valid] == 0).all()  # padding
    assert (cost[:, 0, 0] == 0).all()  # a row against itself, or equal vectors of two stores: exactly 0
    minima = valid_minima(cost, q_mask, c_mask)
    torch.testing.assert_close(row_min, minima[0], atol=0, rtol=0)
    torch.testing.assert_close(col_min, minima[1], atol=0, rtol=0)
    assert torch.isinf(row_min[~q_mask]).all() and torch.isinf(col_min[~c_mask]).all()
    # the taped path (gathers, then l2_cost) gives the same values
    taped = gathered_l2_cost(store.clone().requires_grad_(), q_rows, c_store, c_rows)
    torch.testing.assert_close(taped.detach().double()[valid] ** 2, exact[valid] ** 2, atol=tol, rtol=0)
    with pytest.raises(ValueError, match="c_rows must lie in"):
        gathered_l2_cost(store, q_rows, store, c_rows + 100)


def test_gathered_l2_cost_every_block_edge():
    # the compiled dot products run in blocks of 2 x 4, then 2 x 2 (an odd last row or column repeated): every
    # remainder of N by 2 and of M by 4, against brute force (float64, where the expansion's rounding is ~1e-15)
    for N in range(1, 10):
        for M in range(1, 10):
            store, q_rows, c_rows = stored_pairs(5, N, M, seed=100 + 10 * N + M)
            cost = gathered_l2_minima(store, q_rows, store, c_rows)[0]
            exact, valid = brute_force_cost(store, q_rows, store, c_rows)
            torch.testing.assert_close(cost ** 2, exact.masked_fill(~valid, 0.0) ** 2, atol=1e-12, rtol=0,
                                       msg=f"N {N}, M {M}")


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_pairs_without_padding_give_the_padded_pairs_distances_and_minima(dtype):
    # padding changes nothing of a pair's real entries: the same pairs with a padded row and column (BLAS's
    # products then go through the scratch) give the same distances and minima to the bit
    g = torch.Generator().manual_seed(35)
    store = 0.4 * torch.randn(40, 16, generator=g, dtype=dtype)
    q_rows = torch.randint(0, 35, (8, 1), generator=g) + torch.arange(5)  # each side a run of the store
    c_rows = torch.randint(0, 34, (8, 1), generator=g) + torch.arange(6)
    pad = torch.full((8, 1), -1)
    whole = gathered_l2_minima(store, q_rows, store, c_rows)
    padded = gathered_l2_minima(store, torch.cat([q_rows, pad], 1), store, torch.cat([pad, c_rows], 1))
    assert torch.equal(padded[0][:, :5, 1:], whole[0])
    assert (padded[0][:, 5] == 0).all() and (padded[0][..., 0] == 0).all()  # padding's distances
    assert torch.equal(padded[1][:, :5], whole[1]) and torch.equal(padded[2][:, 1:], whole[2])
    assert torch.isinf(padded[1][:, 5]).all() and torch.isinf(padded[2][:, 0]).all()
    minima = valid_minima(whole[0], q_rows >= 0, c_rows >= 0)
    assert torch.equal(whole[1], minima[0]) and torch.equal(whole[2], minima[1])
    exact, _ = brute_force_cost(store, q_rows, store, c_rows)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(whole[0].double() ** 2, exact ** 2, atol=tol, rtol=0)


def test_store_runs_found_and_taken_by_blas_within_its_size():
    from aspire.scoring._distance_cpu import _BLAS_MACS, _blas_fits, _run

    pos = np.empty(4, np.int64)
    assert _run(np.array([5, 6, -1, 7]), pos) == (5, 3) and list(pos[:3]) == [0, 1, 3]  # padding anywhere
    assert _run(np.array([5, 7]), pos)[0] == -1  # a gap
    assert _run(np.array([3, 2]), pos)[0] == -1  # out of order
    assert _run(np.array([-1, -1]), pos) == (-1, 0)
    assert _blas_fits(5, 2, 9, 2, 384) and not _blas_fits(5, 1, 9, 10, 384) and not _blas_fits(-1, 4, 9, 10, 384)
    assert _blas_fits(0, 10, 0, _BLAS_MACS // 768, 384) and not _blas_fits(0, 10, 0, _BLAS_MACS // 768 + 1, 384)


def test_pair_order_sorts_by_the_first_real_rows_query_then_candidate():
    from aspire.scoring._distance_cpu import pair_order

    q = np.array([[7, 8], [-1, 2], [7, 9], [0, 1], [-1, -1]])
    c = np.array([[5, 6], [9, -1], [1, 2], [3, 4], [0, 1]])
    # keys (q first, c first): (7, 5), (2, 9), (7, 1), (0, 3), (-1, 0)
    assert list(pair_order(q, c, 10, 10)) == [4, 3, 1, 2, 0]
    assert list(pair_order(q[[4, 3, 1, 2, 0]], c[[4, 3, 1, 2, 0]], 10, 10)) == [0, 1, 2, 3, 4]  # already in order
    # stores too large for q * (rows + 1) + c in int64: the query's first row alone (a stable order is not needed)
    order = pair_order(q, c, 1 << 40, 1 << 40)
    assert [q[p][q[p] >= 0][:1].tolist() for p in order] == [[], [0], [2], [7], [7]]
    assert len(pair_order(q[:0], c[:0], 10, 10)) == 0
    assert list(pair_order(np.empty((3, 0), np.int64), np.empty((3, 0), np.int64), 10, 10)) == [0, 1, 2]


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_each_pair_lands_in_its_own_place_whatever_order_the_pass_runs_them(dtype):
    # the pass runs the pairs sorted by the rows they read (`pair_order`) and writes each at its own index: the same
    # pairs given in another order give each pair's distances and minima to the bit, and equal brute force
    g = torch.Generator().manual_seed(41)
    store = 0.4 * torch.randn(300, 24, generator=g, dtype=dtype)
    q_rows = torch.randint(0, 290, (64, 1), generator=g) + torch.arange(6)
    c_rows = torch.randint(0, 291, (64, 1), generator=g) + torch.arange(5)
    q_rows[5, 3:] = -1
    c_rows[9] = c_rows[9].flip(0)  # not a run: the compiled loop
    perm = torch.randperm(64, generator=g)
    given = gathered_l2_minima(store, q_rows, store, c_rows)
    permuted = gathered_l2_minima(store, q_rows[perm], store, c_rows[perm])
    for a, b in zip(given, permuted):
        assert torch.equal(a[perm], b)
    exact, valid = brute_force_cost(store, q_rows, store, c_rows)
    tol = 1e-4 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(given[0].double()[valid] ** 2, exact[valid] ** 2, atol=tol, rtol=0)


@pytest.mark.parametrize("reverse", [False, True])  # the rows as runs (BLAS), or reversed (the compiled loop)
def test_near_vectors_summed_directly_equal_ones_exactly_zero_apart(reverse):
    # float32, 384-d: the expansion |x|^2 + |y|^2 - 2 x.y leaves ~1e-3 between equal vectors whenever the products
    # and the norms are summed in different orders (BLAS's and the loop's); near pairs are summed directly instead
    g = torch.Generator().manual_seed(7)
    store = torch.randn(40, 384, generator=g)
    store[20:30] = store[:10]  # the candidates' rows: copies of the query's ...
    store[25, 3] += 1e-3  # ... one of them 1e-3 off in one coordinate
    q_rows, c_rows = torch.arange(10)[None], torch.arange(20, 30)[None]
    if reverse:
        q_rows, c_rows = q_rows.flip(1), c_rows.flip(1)
    cost = gathered_l2_minima(store, q_rows, store, c_rows)[0][0]
    off = 4 if reverse else 5  # the place of rows 5 and 25 on the diagonal
    diagonal = cost.diagonal()
    assert (diagonal[torch.arange(10) != off] == 0).all()
    assert diagonal[off].item() == pytest.approx(1e-3, rel=1e-3)
    exact, _ = brute_force_cost(store, q_rows, store, c_rows)
    torch.testing.assert_close(cost.double(), exact[0], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize(("N", "M", "D"), [
    (10, 10, 384),  # the benchmark's pairs: one BLAS call
    (11, 100, 512),  # calls of 5 rows, the last single row joining the call before it (5 + 6)
    (12, 100, 512),  # 5 + 7
    (1, 9, 16), (9, 1, 16),  # one sentence a side: the compiled loop
    (3, 300, 512),  # two query rows past _BLAS_MACS: the compiled loop
])
def test_gathered_l2_cost_of_store_runs_equals_brute_force(dtype, N, M, D):
    # each side's real rows consecutive rows of the store (a document's sentences), padding anywhere in some pairs:
    # the dot products by BLAS over the rows where they lie, written in place or through the scratch
    from aspire.scoring._distance_cpu import _run, _run_dots

    g = torch.Generator().manual_seed(N * M + D)
    store = 0.4 * torch.randn(500, D, generator=g, dtype=dtype)
    B = 6
    q_rows = torch.randint(0, 500 - N, (B, 1), generator=g) + torch.arange(N)
    c_rows = torch.randint(0, 500 - M, (B, 1), generator=g) + torch.arange(M)
    q_rows[1, N // 2 + 1:] = -1  # trailing padding
    real = torch.arange(M) % 3 != 1  # padding inside, the real rows still a run
    c_rows[2] = torch.where(real, c_rows[2, 0] + real.cumsum(0) - 1, -1)
    q_rows[3, 0] = c_rows[3, -1] = -1
    c_rows[4, M // 2:] = c_rows[4, M // 2:].flip(0)  # not a run where M > 3: the compiled loop
    cost = gathered_l2_minima(store, q_rows, store, c_rows)[0]
    exact, valid = brute_force_cost(store, q_rows, store, c_rows)
    tol = 1e-5 * D if dtype == torch.float32 else 1e-12 * D
    torch.testing.assert_close(cost.double()[valid] ** 2, exact[valid] ** 2, atol=tol, rtol=0)
    assert (cost[~valid] == 0).all()
    if min(N, M) > 1:  # BLAS's own products, pair by pair, against brute force's
        v = store.numpy()
        q_pos, c_pos = np.empty(N, np.int64), np.empty(M, np.int64)
        dots, scratch = np.empty((N, M), v.dtype), np.empty(N * M, v.dtype)
        for p in range(B):
            qs, nq = _run(q_rows[p].numpy(), q_pos)
            cs, nc = _run(c_rows[p].numpy(), c_pos)
            assert (qs >= 0 and cs >= 0) == (p != 4 or M <= 3), f"pair {p}: runs {qs}, {cs}"
            if qs < 0 or cs < 0:
                continue
            _run_dots(v, qs, nq, q_pos, v, cs, nc, c_pos, dots, scratch)
            x, y = store[q_rows[p].clamp_min(0)].double(), store[c_rows[p].clamp_min(0)].double()
            pad = (q_rows[p] < 0)[:, None] | (c_rows[p] < 0)[None, :]
            torch.testing.assert_close(torch.from_numpy(dots).double(), (x @ y.T).masked_fill(pad, 0.0),
                                       atol=tol, rtol=0, msg=f"pair {p}")


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("tau", [0.02, 1.0, math.inf])
def test_gathered_l2_weights_compiled_equal_ot_weights_of_the_cost(dtype, tau):
    # the compiled pass leaves logits that numpy's exp and a normalisation finish; ot_weights is the reference.
    # tau 0.02 spreads the logits over ~100 (weights down to exp(-100): underflow in float32, not NaN);
    # tau inf: uniform over real sentences
    store, q_rows, c_rows = stored_pairs(50, 6, 7, seed=34, dtype=dtype)
    cost, x, y = gathered_l2_weights(store, q_rows, store, c_rows, tau)
    assert not x.requires_grad and torch.equal(cost, gathered_l2_minima(store, q_rows, store, c_rows)[0])
    q_mask, c_mask = q_rows >= 0, c_rows >= 0
    ref_x, ref_y = ot_weights(cost.double(), q_mask, c_mask, tau)
    atol = 1e-6 if dtype == torch.float32 else 1e-13
    torch.testing.assert_close(x.double(), ref_x, atol=atol, rtol=0)
    torch.testing.assert_close(y.double(), ref_y, atol=atol, rtol=0)
    assert (x[~q_mask] == 0).all() and (y[~c_mask] == 0).all()
    torch.testing.assert_close(x.sum(1).double(), torch.ones(50, dtype=F64), atol=atol * 10, rtol=0)
    # only where the compiled pass runs: elsewhere gathered_ot_match takes gathered_l2_minima and ot_weights
    with pytest.raises(ValueError, match="without a gradient"):
        gathered_l2_weights(store.clone().requires_grad_(), q_rows, store, c_rows, tau)


@pytest.mark.slow
def test_gathered_ot_match_equals_pairwise_ot_match_of_the_copies():
    store, q_rows, c_rows = stored_pairs(60, 5, 8, seed=31)
    q_mask, c_mask = q_rows >= 0, c_rows >= 0
    x, y = store[q_rows.clamp_min(0)], store[c_rows.clamp_min(0)]
    kw = dict(tau=0.5, eps=0.05, tol=1e-10, max_iter=50_000)
    ref = pairwise_ot_match(x.requires_grad_(), q_mask, y, c_mask, **kw)  # a tape: the torch path (l2_cost)
    ref = type(ref)(*(t.detach() for t in vars(ref).values()))
    m = gathered_ot_match(store, q_rows, store, c_rows, **kw)
    # the copies' cost of a sentence to itself is sqrt(rounding) ~ 1e-8, not 0: agreement to 1e-6
    torch.testing.assert_close(m.dist, ref.dist, atol=1e-6, rtol=0)
    torch.testing.assert_close(m.plan, ref.plan, atol=1e-6, rtol=0)
    torch.testing.assert_close(m.query_weights, ref.query_weights, atol=1e-6, rtol=0)
    torch.testing.assert_close(m.cand_weights, ref.cand_weights, atol=1e-6, rtol=0)
    assert (m.err <= 2e-10).all()
    half = gathered_ot_match(store.half(), q_rows, store.half(), c_rows, tau=0.5, eps=0.05)  # gathers, float32 inside
    assert half.dist.dtype == torch.float16
    torch.testing.assert_close(half.dist.double(), ref.dist, atol=2e-2, rtol=0)
    with pytest.raises(ValueError, match="no sentence selected"):
        gathered_ot_match(store, torch.full_like(q_rows, -1), store, c_rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pairwise_ot_match_without_a_tape_reads_the_batches_as_stores_and_equals_the_torch_path(dtype):
    store, q_rows, c_rows = stored_pairs(40, 6, 9, seed=33)
    x, y = store[q_rows.clamp_min(0)].to(dtype), store[c_rows.clamp_min(0)].to(dtype)
    x[q_rows < 0] = 7.0  # padding holds anything: neither path may read it into a distance or a weight
    q_mask, c_mask = q_rows >= 0, c_rows >= 0
    single = dtype == torch.float32
    kw = dict(tau=0.5, eps=0.05, tol=1e-5 if single else 1e-10, max_iter=50_000)
    fast = pairwise_ot_match(x, q_mask, y, c_mask, **kw)  # compiled cost (distance.compiled_cost)
    taped = pairwise_ot_match(x.clone().requires_grad_(), q_mask, y, c_mask, **kw)
    atol = 2e-3 if single else 1e-7  # a sentence against its own copy: up to sqrt(rounding) on the torch path
    for name in ("dist", "plan", "query_weights", "cand_weights"):
        torch.testing.assert_close(getattr(fast, name), getattr(taped, name).detach(), atol=atol, rtol=0)
    valid = q_mask[:, :, None] & c_mask[:, None, :]
    torch.testing.assert_close(fast.cost[valid], taped.cost.detach()[valid], atol=atol, rtol=0)
    assert (fast.cost[~valid] == 0).all()  # 0 on padding (the torch path's cost there is the padding's distance)
    assert fast.dist.dtype == dtype and not fast.dist.requires_grad and taped.dist.requires_grad


@pytest.mark.parametrize("grad", ["autograd", "implicit"])
def test_gathered_ot_gradient_to_the_store_equals_the_copies(grad):
    store, q_rows, c_rows = stored_pairs(20, 4, 5, seed=32)
    kw = dict(tau=1.0, eps=0.1, tol=1e-10, max_iter=50_000, grad=grad)
    s1, s2 = store.clone().requires_grad_(), store.clone().requires_grad_()
    d1 = gathered_ot_match(s1, q_rows, s1, c_rows, **kw).dist
    d2 = pairwise_ot_match(s2[q_rows.clamp_min(0)], q_rows >= 0, s2[c_rows.clamp_min(0)], c_rows >= 0, **kw).dist
    (g1,), (g2,) = torch.autograd.grad(d1.sum(), s1), torch.autograd.grad(d2.sum(), s2)
    torch.testing.assert_close(d1, d2, atol=1e-9, rtol=0)
    torch.testing.assert_close(g1, g2, atol=1e-7, rtol=0)
    assert g1.abs().sum() > 0
