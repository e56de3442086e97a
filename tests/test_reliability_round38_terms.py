"""Round 38: the document models' distance terms (`aspire.train.terms`) and self-training's pseudo labels
(`aspire.train.self_training.pseudo_labels`), checked against hand loops."""

from __future__ import annotations

import pytest
import torch

from aspire.batch import DocBatch
from aspire.train.config import ModelConfig
from aspire.train.self_training import pseudo_labels
from aspire.train.terms import CosineTerm, PassCosine, ScorerDist, VectorDist, make_scorer


def _batch(b: int, s: int, d: int, seed: int, lens=None, whole=True) -> DocBatch:
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(b, s, d, generator=g, dtype=torch.float64)
    lens = lens or [s] * b
    mask = torch.arange(s)[None, :] < torch.tensor(lens)[:, None]
    emb = emb * mask[..., None]
    w = torch.randn(b, d, generator=g, dtype=torch.float64) if whole else None
    return DocBatch(emb, mask, [f"p{seed}-{i}" for i in range(b)], whole=w)


def _set_terms():
    cfg = ModelConfig()
    return [ScorerDist(make_scorer(n, cfg), n) for n in ("minl2", "ot", "attention")] + [
        PassCosine("whole"), PassCosine("facet")]


@pytest.mark.parametrize("i", range(5))
def test_set_terms_diagonal_padding_and_gradients(i):
    term = _set_terms()[i]
    a, b = _batch(3, 4, 5, 1, [4, 2, 1]), _batch(3, 4, 5, 2, [3, 4, 2])
    all_pairs, aligned = term.dist(a, b), term.pairwise_dist(a, b)
    assert all_pairs.shape == (3, 3) and aligned.shape == (3,)
    torch.testing.assert_close(all_pairs.diagonal(), aligned, rtol=1e-5, atol=1e-6)
    # padding rows never change a distance
    noisy = [DocBatch(x.emb + 7.0 * (~x.mask)[..., None], x.mask, x.paper_ids, whole=x.whole) for x in (a, b)]
    torch.testing.assert_close(term.dist(*noisy), all_pairs, rtol=1e-5, atol=1e-6)
    if isinstance(term, PassCosine):  # similarity the cosine, distance 1 - cosine
        torch.testing.assert_close(term.sim(a, b), 1 - all_pairs)
        torch.testing.assert_close(term.pairwise_sim(a, b), 1 - aligned)
        q = a.whole if term.name == "whole" else torch.stack(
            [a.emb[k][a.mask[k]].mean(0) for k in range(3)])
        ref = torch.tensor([[float(torch.nn.functional.cosine_similarity(q[x], b.whole[y], dim=0))
                             for y in range(3)] for x in range(3)], dtype=torch.float64)
        torch.testing.assert_close(term.sim(a, b), ref)
    else:
        torch.testing.assert_close(term.sim(a, b), -all_pairs)
        torch.testing.assert_close(term.pairwise_sim(a, b), -aligned)
    emb, whole = a.emb.clone().requires_grad_(True), a.whole.clone().requires_grad_(True)
    term.dist(DocBatch(emb, a.mask, a.paper_ids, whole=whole), b).sum().backward()
    grad = whole.grad if getattr(term, "name", "") == "whole" else emb.grad
    assert grad is not None and torch.isfinite(grad).all()


def test_single_vector_terms_match_hand_loops():
    a, b = _batch(3, 1, 4, 3, whole=False), _batch(3, 1, 4, 4, whole=False)
    l2 = torch.tensor([[float((a.emb[x, 0] - b.emb[y, 0]).norm()) for y in range(3)] for x in range(3)],
                      dtype=torch.float64)
    cos = torch.tensor([[float(torch.nn.functional.cosine_similarity(a.emb[x, 0], b.emb[y, 0], dim=0))
                         for y in range(3)] for x in range(3)], dtype=torch.float64)
    v, c = VectorDist(), CosineTerm()
    torch.testing.assert_close(v.dist(a, b), l2)
    torch.testing.assert_close(v.pairwise_dist(a, b), l2.diagonal())
    torch.testing.assert_close(v.sim(a, b), -l2)
    torch.testing.assert_close(c.sim(a, b), cos)
    torch.testing.assert_close(c.pairwise_sim(a, b), cos.diagonal())
    torch.testing.assert_close(c.dist(a, b), 1 - cos)
    torch.testing.assert_close(c.pairwise_dist(a, b), 1 - cos.diagonal())


def test_pseudo_labels_band_is_one_based_inclusive_and_seeded():
    docs = [f"d{k}" for k in range(1, 21)]  # d<k> at rank k
    ranked = {"q1": docs, "q2": docs[:7], "q3": docs[:4]}
    pos, neg = pseudo_labels(ranked, 3, (6, 20), 0, seed=1)
    assert pos["q1"] == ["d1", "d2", "d3"] and neg["q1"] == docs[5:20]
    assert neg["q2"] == ["d6", "d7"] and neg["q3"] == []  # the band cut where the ranking ends; none ranked
    assert set(ranked) == set(pos) == set(neg)  # no query dropped
    again = pseudo_labels(ranked, 3, (6, 20), 4, seed=5)
    assert again == pseudo_labels(ranked, 3, (6, 20), 4, seed=5)
    assert all(set(n) <= set(docs[5:20]) and len(n) == min(4, len(docs[5:len(ranked[q])]))
               for q, n in again[1].items())
    with pytest.raises(ValueError, match="q9"):
        pseudo_labels({"q9": ["d1", "d2"]}, 3, (6, 20), 0, seed=1)


def test_abstract_text_matches_encode_abstract_with_and_without_code(tiny_model_dir):
    from aspire.data.papers import Paper
    from aspire.encoders import ContextualSentenceEncoder
    from aspire.train.config import AbstractConfig
    from aspire.train.terms import AbstractText

    papers = [Paper("a", "the model", ["we propose a new method.", "results show it improves the task."]),
              Paper("b", "", ["the data is text. " * 30, "two documents."]),  # cut at max_length
              Paper("c", "neural text", ["we show."])]
    for coded in (False, True):
        enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=24)
        if coded:
            enc.add_codes(["[METHOD]", "[DOC]"], "[DOC]")
        enc.eval()
        want = enc.encode_abstract(papers, joiner=" ", normalize=True)  # (B, D)
        text = AbstractText(enc, AbstractConfig(joiner=" ", normalize=True))
        inputs = text.tokenize(papers)
        got = text.embed(inputs)
        assert got.emb.shape == (3, 1, want.shape[1]) and got.paper_ids == ["a", "b", "c"]
        torch.testing.assert_close(got.emb[:, 0].detach(), want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(text.embed(inputs.rows(2, 3)).emb[:, 0].detach(), want[2:], atol=1e-5, rtol=1e-5)
        got.emb.sum().backward()  # the training path keeps gradients
        grads = [p.grad for p in enc.model.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g).all() for g in grads)


def test_self_training_check_bounds_are_one_based_inclusive():
    from aspire.config import ConfigError
    from aspire.train.self_training import SelfTrainingConfig

    SelfTrainingConfig(shortlist=20, positives=3, band_from=4, band_to=20, negatives=17).check()  # ranks 4..20: 17
    for bad in ({"band_from": 3}, {"band_to": 21}, {"negatives": 18}, {"band_from": 21, "band_to": 20}):
        with pytest.raises(ConfigError):
            SelfTrainingConfig(**{"shortlist": 20, "positives": 3, "band_from": 4, "band_to": 20, "negatives": 17,
                                  **bad}).check()
