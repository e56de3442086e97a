"""Round 46: scorers (min-L2, OT, attention) against independent references (numpy brute force, POT)."""

import numpy as np
import ot
import pytest
import torch

from aspire.batch import DocBatch
from aspire.scoring import scorers as S


def _data(dtype, B=3, Bc=2, Sq=4, T=5, D=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Sq, D, generator=g, dtype=dtype)
    c = torch.randn(Bc, T, D, generator=g, dtype=dtype)
    qm = torch.rand(B, Sq, generator=g) > 0.3
    cm = torch.rand(Bc, T, generator=g) > 0.3
    qm[:, 0] = True
    cm[:, 1] = True
    qm[0, 1] = False  # at least one padded / unselected sentence on each side
    cm[0, 0] = False
    q[~qm] = float("nan")  # padding content must not matter
    c[~cm] = float("nan")
    return q, qm, c, cm


def _sent_cost(q, qm, c, cm, i, j):
    qi, cj = q[i][qm[i]].double().numpy(), c[j][cm[j]].double().numpy()
    return np.linalg.norm(qi[:, None] - cj[None], axis=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_minl2_matches_brute_force_and_pairwise(dtype):
    q, qm, c, cm = _data(dtype)
    m = S.minl2_match(q, qm, c, cm)
    assert m.dist.dtype == dtype
    for i in range(q.shape[0]):
        for j in range(c.shape[0]):
            best, pair = np.inf, None
            for s in range(q.shape[1]):
                for t in range(c.shape[1]):
                    if qm[i, s] and cm[j, t]:
                        d = np.linalg.norm(q[i, s].double().numpy() - c[j, t].double().numpy())
                        if d < best:  # strict: the first pair in row-major order wins a tie
                            best, pair = d, (s, t)
            assert m.dist[i, j].item() == pytest.approx(best, abs=1e-5)
            assert (m.query_sent[i, j].item(), m.cand_sent[i, j].item()) == pair
    pw = S.pairwise_minl2_match(q[:2], qm[:2], c, cm)
    assert torch.allclose(pw.dist, m.dist.diagonal(), atol=1e-6)
    assert torch.equal(pw.query_sent, m.query_sent.diagonal()) and torch.equal(pw.cand_sent, m.cand_sent.diagonal())


def test_minl2_tie_takes_first_valid_pair():
    q, c = torch.zeros(1, 3, 2), torch.zeros(1, 3, 2)
    qm, cm = torch.tensor([[False, True, True]]), torch.tensor([[True, False, True]])
    for m in (S.minl2_match(q, qm, c, cm), S.pairwise_minl2_match(q, qm, c, cm)):
        assert m.query_sent.flatten().tolist() == [1] and m.cand_sent.flatten().tolist() == [0]


@pytest.mark.parametrize("tau", [1.0, 0.3, float("inf")])
def test_ot_matches_pot_float64(tau):
    q, qm, c, cm = _data(torch.float64)
    om = S.ot_match(q, qm, c, cm, tau=tau, eps=0.5, tol=1e-11, max_iter=50000)
    for i in range(q.shape[0]):
        for j in range(c.shape[0]):
            M = _sent_cost(q, qm, c, cm, i, j)
            if np.isinf(tau):
                a, b = np.full(M.shape[0], 1 / M.shape[0]), np.full(M.shape[1], 1 / M.shape[1])
            else:
                a, b = np.exp(-M.min(1) / tau), np.exp(-M.min(0) / tau)
                a, b = a / a.sum(), b / b.sum()
            P = ot.sinkhorn(a, b, M, 0.5, method="sinkhorn_log", stopThr=1e-11, numItermax=200000)
            np.testing.assert_allclose(om.query_weights[i, j][qm[i]].numpy(), a, atol=1e-12)
            np.testing.assert_allclose(om.cand_weights[i, j][cm[j]].numpy(), b, atol=1e-12)
            np.testing.assert_allclose(om.plan[i, j][qm[i]][:, cm[j]].numpy(), P, atol=1e-7)
            assert om.dist[i, j].item() == pytest.approx((P * M).sum(), abs=1e-7)
            assert om.plan[i, j][~qm[i]].abs().sum() == 0 and om.plan[i, j][:, ~cm[j]].abs().sum() == 0
    pw = S.pairwise_ot_match(q[:2], qm[:2], c, cm, tau=tau, eps=0.5, tol=1e-11, max_iter=50000)
    assert torch.allclose(pw.dist, om.dist.diagonal(), atol=1e-10)
    assert torch.allclose(pw.plan, om.plan.diagonal(dim1=0, dim2=1).permute(2, 0, 1), atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_matches_hand_formula(dtype):
    q, qm, c, cm = _data(dtype)
    tau = 0.5
    am = S.attention_match(q, qm, c, cm, tau=tau)
    for i in range(q.shape[0]):
        for j in range(c.shape[0]):
            M = _sent_cost(q, qm, c, cm, i, j)
            A = np.exp(-M / tau)
            A /= A.sum()
            assert am.dist[i, j].item() == pytest.approx((A * M).sum(), abs=1e-5)
            assert am.attention[i, j].sum().item() == pytest.approx(1.0, abs=1e-5)
    pw = S.pairwise_attention_match(q[:2], qm[:2], c, cm, tau=tau)
    assert torch.allclose(pw.dist, am.dist.diagonal(), atol=1e-5)


def test_gradients_equal_autograd_of_references():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.randn(2, 4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    qm = torch.tensor([[1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    cm = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)

    def ref(kind, tau=0.7, eps=0.1):
        out = []
        for i in range(2):
            M = torch.cdist(q[i][qm[i]], c[i][cm[i]])
            if kind == "minl2":
                out.append(M.min())
            elif kind == "attention":
                out.append((torch.softmax((-M / tau).flatten(), 0).reshape(M.shape) * M).sum())
            else:
                a, b = torch.softmax(-M.amin(1) / tau, 0), torch.softmax(-M.amin(0) / tau, 0)
                P = ot.sinkhorn(a, b, M, eps, method="sinkhorn_log", stopThr=1e-13, numItermax=100000)
                out.append((P * M).sum())
        return torch.stack(out)

    ours = {"minl2": lambda: S.pairwise_minl2_dist(q, qm, c, cm),
            "attention": lambda: S.pairwise_attention_dist(q, qm, c, cm, tau=0.7),
            "ot": lambda: S.pairwise_ot_dist(q, qm, c, cm, tau=0.7, eps=0.1, tol=1e-12, max_iter=20000)}
    for kind, fn in ours.items():
        d, r = fn(), ref(kind)
        assert torch.allclose(d, r, atol=1e-8), kind
        g1, g2 = torch.autograd.grad(d.sum(), (q, c)), torch.autograd.grad(r.sum(), (q, c))
        for a, b in zip(g1, g2):
            assert torch.isfinite(a).all()
            assert torch.allclose(a, b, atol=1e-6), (kind, (a - b).abs().max())


@pytest.mark.parametrize("name", ["minl2", "ot", "attention"])
def test_scorer_score_is_minus_dist_and_pairwise_is_diagonal(name):
    q, qm, c, cm = _data(torch.float64, B=2, Bc=2)
    qb, cb = DocBatch(q, qm), DocBatch(c, cm)
    sc = S.get_scorer(name)
    assert torch.equal(sc.score(qb, cb), -sc.dist(qb, cb))
    assert torch.allclose(sc.pairwise_score(qb, cb), -sc.dist(qb, cb).diagonal(), atol=1e-6)


@pytest.mark.parametrize("fn", [S.minl2_match, S.ot_match, S.attention_match,
                                S.pairwise_minl2_match, S.pairwise_ot_match, S.pairwise_attention_match])
@pytest.mark.parametrize("side", ["query", "candidate"])
def test_row_without_sentence_refused_naming_side(fn, side):
    q, c = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    qm, cm = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool)
    (qm if side == "query" else cm)[1] = False
    with pytest.raises(ValueError, match=f"{side} rows \\[1\\]"):
        fn(q, qm, c, cm)


def test_unknown_scorer_lists_valid_names():
    with pytest.raises(ValueError, match="minl2, ot, attention"):
        S.get_scorer("nope")
