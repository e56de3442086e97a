"""Round 13, the cross-encoder and the search re-rankers against independent references: the scores against
sentence-transformers' `CrossEncoder.predict`, training seeded end to end, the mix by hand, the OT top-k's pruning
against solving every candidate on adversarial costs, and the fused first stage against a fusion by hand.

Each test either pins one defect (a seed that did not reach the fresh head, an option accepted and then not used)
or checks a part against a brute-force re-implementation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aspire.scoring.crossencoder import CrossEncoderReranker, load_cross_encoder, mix_rerank

WORDS = "the model of neural network language text sentence similarity scientific abstract title citation aspect".split()


def _pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    return [(" ".join(rng.choice(WORDS, rng.integers(1, 30))), " ".join(rng.choice(WORDS, rng.integers(1, 90))))
            for _ in range(n)]


def _head(model) -> torch.Tensor:
    return next(p for n, p in model.named_parameters() if "classifier" in n).detach().clone()


# ------------------------------------------------------------------ references


def test_scores_are_sentence_transformers_logits_whatever_the_batch_order_and_length(tiny_cross_encoder_dir):
    """The same logits as `CrossEncoder.predict` and as the model read one pair at a time, cut longest first at
    `max_length` (pairs up to 120 words, past a 24-piece limit), whatever the batch size and the pairs' order."""
    from sentence_transformers.cross_encoder import CrossEncoder
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    pairs = _pairs(13, seed=0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_cross_encoder_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_cross_encoder_dir)
    for max_length in (24, None):
        reranker = CrossEncoderReranker(str(tiny_cross_encoder_dir), max_length, batch_size=4)
        got = reranker.score_pairs(pairs)
        reference = CrossEncoder(str(tiny_cross_encoder_dir), max_length=max_length).predict(
            pairs, activation_fn=torch.nn.Identity(), batch_size=32)
        np.testing.assert_allclose(got, reference, atol=1e-5)
        one = []
        for q, d in pairs:
            enc = tokenizer(q, d, truncation="longest_first", max_length=max_length or 128, return_tensors="pt")
            with torch.no_grad():
                one.append(model(**enc).logits[0, 0].item())
        np.testing.assert_allclose(got, one, atol=1e-5)
        reranker.batch_size = 1
        np.testing.assert_allclose(reranker.score_pairs(pairs[::-1])[::-1], got, atol=1e-5)
    cut = CrossEncoderReranker(str(tiny_cross_encoder_dir), 24)
    long_query = ("neural " * 40).strip()  # the query is the longer side: its end is cut, the text kept
    assert cut.score_pairs([(long_query + " model", "citation title")])[0] == pytest.approx(
        cut.score_pairs([(long_query + " aspect", "citation title")])[0], abs=1e-6)
    kept = cut.score_pairs([(long_query, "citation title"), (long_query, "aspect abstract")])
    assert abs(kept[0] - kept[1]) > 1e-5  # the text is read


def test_mix_rerank_equals_the_weighted_sum_of_z_scores_by_hand():
    rng = np.random.default_rng(3)
    first = sorted(((f"d{i}", float(v)) for i, v in enumerate(rng.normal(size=9))), key=lambda kv: -kv[1])
    cross = {d: float(rng.normal()) for d, _ in first[:6]}
    for weight in (0.0, 0.3, 1.0):
        got = mix_rerank(first, cross, 6, weight)
        c = np.array([cross[d] for d, _ in first[:6]])
        f = np.array([s for _, s in first[:6]])
        mixed = weight * (c - c.mean()) / c.std() + (1 - weight) * (f - f.mean()) / f.std()
        order = np.argsort(-mixed, kind="stable")
        assert [d for d, _ in got[:6]] == [first[i][0] for i in order]
        np.testing.assert_allclose([s for _, s in got[:6]], mixed[order], atol=1e-12)
        assert [d for d, _ in got[6:]] == [d for d, _ in first[6:]] and got[6][1] < got[5][1]


# ------------------------------------------------------------------ defects


def test_a_fresh_head_is_drawn_from_the_seed_and_leaves_the_callers_generator(tiny_model_dir):
    """A plain encoder's one-logit head was drawn from torch's unseeded generator: training twice with one seed
    started from two models."""
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    a = load_cross_encoder(str(tiny_model_dir), 32, seed=13)
    assert torch.equal(torch.random.get_rng_state(), state)
    b = load_cross_encoder(str(tiny_model_dir), 32, seed=13)
    c = load_cross_encoder(str(tiny_model_dir), 32, seed=14)
    assert torch.equal(_head(a), _head(b)) and not torch.equal(_head(a), _head(c))


def test_a_loaded_cross_encoder_refuses_a_max_length_it_does_not_have(tiny_cross_encoder_dir):
    """`CrossEncoderReranker(model, max_length=64)` with a loaded model kept its own length without a word."""
    model = load_cross_encoder(str(tiny_cross_encoder_dir), 32)
    with pytest.raises(ValueError, match="reads 32 word pieces a pair, not the max_length 64"):
        CrossEncoderReranker(model, max_length=64)
    with pytest.raises(ValueError, match="is on cpu, not on the device 'meta'"):
        load_cross_encoder(model, device="meta")
    assert CrossEncoderReranker(model, max_length=32).model is model and load_cross_encoder(model, 32, "cpu") is model


def test_training_twice_with_one_seed_saves_one_model(tiny_model_dir, tmp_path, monkeypatch):
    """`train_on_context2doc` from a plain encoder, twice with one config: the saved models score alike (the fresh
    head was unseeded); the positives are the qrels, the negatives drawn from the first stage less them."""
    import copy
    import json

    from test_benchmarks import tiny_context2doc

    import aspire.benchmarks.context2doc as c2d
    import aspire.evaluate.context2doc_rerank as c2d_rerank
    import aspire.train.crossencoder as train

    bench = tiny_context2doc(tmp_path)
    scores = dict(zip(bench.queries, np.random.default_rng(0).normal(size=(len(bench.queries), len(bench.candidates)))))
    monkeypatch.setattr(c2d, "load_context2doc", lambda *args, **kwargs: copy.deepcopy(bench))  # max_queries cuts it
    monkeypatch.setattr(c2d_rerank, "first_stage_scores", lambda b, alpha, model: np.stack([scores[q] for q in b.queries]))
    fitted, heads = [], []
    fit = train.fit_cross_encoder
    monkeypatch.setattr(train, "fit_cross_encoder", lambda model, pairs, out, cfg: fitted.append(pairs)
                        or heads.append(_head(model)) or fit(model, pairs, out, cfg))
    cfg = train.CrossEncoderConfig(base_model=str(tiny_model_dir), max_length=32, negatives=2, negative_depth=5,
                                   max_queries=8, max_steps=3, batch_size=4, learning_rate=1e-3, dev_top_n=0)
    for run in ("a", "b"):
        train.train_on_context2doc(tmp_path, tmp_path / run, cfg)
    assert fitted[0] == fitted[1]
    assert torch.equal(heads[0], _head(load_cross_encoder(str(tiny_model_dir), 32, seed=cfg.seed)))  # the config's seed
    texts = {p.paper_id: p for p in bench.candidates}
    from aspire.scoring.lexical import paper_text

    for query, text, label in fitted[0]:  # a positive is a cited paper's text, a negative one a query does not cite
        cited = [{paper_text(texts[d]) for d in bench.qrels[q]} for q, t in bench.queries.items() if t == query]
        assert any((text in c) == (label == 1.0) for c in cited), (query, text, label)
    assert {y for _, _, y in fitted[0]} == {0.0, 1.0}
    pairs = [(q, d) for q, d, _ in fitted[0]]
    a = CrossEncoderReranker(str(tmp_path / "a" / "model")).score_pairs(pairs)
    b = CrossEncoderReranker(str(tmp_path / "b" / "model")).score_pairs(pairs)
    np.testing.assert_array_equal(a, b)
    assert json.loads((tmp_path / "a" / "report.json").read_text())["steps"] == 3


# ------------------------------------------------------------------ the OT top-k and the fused first stage


@pytest.mark.parametrize("case", ["near duplicates", "one sentence a candidate", "one query sentence", "scale 100"])
def test_ot_top_k_equals_solving_every_candidate_on_adversarial_costs(case):
    """Where the bound is tight (one sentence on a side: the bound is the distance) or every candidate nearly ties,
    under a budget of one problem a call: the bound stays below each distance and the k best are exhaustive OT's."""
    from aspire.scoring import cross_l2_cost
    from aspire.scoring.ot_topk import ot_dist_lower_bound, ot_top_k_dist
    from aspire.scoring.scorers import _ot_from_cost, ot_weights, valid_minima

    g = torch.Generator().manual_seed(5)
    P, S, T, D = 60, 4, 5, 6
    q = torch.randn(S, D, generator=g)
    c = torch.randn(P, T, D, generator=g)
    if case == "near duplicates":
        c = c[:1] + 1e-5 * torch.randn(P, T, D, generator=g)
    elif case == "one sentence a candidate":
        c = c[:, :1]
    elif case == "one query sentence":
        q = q[:1]
    else:
        q, c = 100 * q, 100 * c
    cost = cross_l2_cost(q[None], c)[0]
    q_mask = torch.ones(cost.shape[:2], dtype=torch.bool)
    c_mask = torch.arange(cost.shape[2])[None] < torch.randint(1, cost.shape[2] + 1, (P,), generator=g)[:, None]
    ot = dict(tau=1.0, eps=0.05 * (100 if case == "scale 100" else 1), tol=1e-4)
    ref = _ot_from_cost(cost, q_mask, c_mask, **ot).dist
    minima = valid_minima(cost, q_mask, c_mask)
    far = cost.masked_fill(~(q_mask[:, :, None] & c_mask[:, None, :]), torch.inf)
    lower = ot_dist_lower_bound(far, *ot_weights(cost, q_mask, c_mask, ot["tau"], minima), minima, q_mask, c_mask)
    c_max = cost.masked_fill(~c_mask[:, None, :], 0.0).flatten(1).amax(1)
    assert (lower - ot["tol"] * c_max <= ref).all()
    k = 7
    res = ot_top_k_dist(cost, q_mask, c_mask, k, first=2, budget_bytes=1, **ot)
    top = torch.argsort(ref, stable=True)[:k]
    assert torch.equal(torch.argsort(res.dist, stable=True)[:k], top) and res.exact[top].all()
    torch.testing.assert_close(res.dist[top], ref[top], rtol=1e-5, atol=1e-6)
    assert (res.dist[~res.exact] <= ref[~res.exact]).all() and (res.dist[~res.exact] > ref[top[-1]]).all()


@pytest.mark.parametrize("fuse", ["z:0.7", "minmax:0.3", "rrf:5"])
def test_the_fused_first_stage_equals_a_fusion_by_hand(fuse):
    """ANN + BM25: each list is its stage's best `shortlist` (exact min-L2 by hand; BM25's matching papers), scores
    normalised per list (z, min-max) or ranked (1 / (K + rank)), weighted ALPHA / 1 - ALPHA, a paper a list lacks
    adding 0, ties by paper id; excluded papers never come back."""
    from test_reliability_round11_search import random_index

    from aspire.index.config import checked_search_config
    from aspire.index.lexical import stored_bm25
    from aspire.retrieval.lexical import selected_text
    from aspire.search import Searcher

    searcher = Searcher(random_index(P=40, seed=3))
    index = searcher.index
    method, _, value = fuse.partition(":")
    value = float(value)
    for paper, selection, shortlist, exclude in (("p3", None, 10, ["p3", "p4"]), ("p7", "method", 6, ["p7"])):
        query = searcher.query_from_index(paper, selection)
        keep = [p for p in range(index.n_papers) if index.paper_ids[p] not in exclude]
        sentences = query.emb[0][query.mask[0]].double().numpy()
        dense = {index.paper_ids[p]: -min(np.linalg.norm(a - b) for a in sentences for b in
                                          np.asarray(index.vectors[index.offsets[p]:index.offsets[p + 1]], dtype=np.float64))
                 for p in keep}
        bm25 = stored_bm25(index, searcher.config.bm25_k1, searcher.config.bm25_b).scores([selected_text(query)])[0]
        lexical = {index.paper_ids[p]: float(bm25[p]) for p in keep if bm25[p] > 0}
        fused: dict[str, float] = {}
        for weight, scores in zip([value, 1 - value] if method != "rrf" else [1.0, 1.0], (dense, lexical)):
            best = sorted(scores.items(), key=lambda kv: -kv[1])[:shortlist]
            v = np.array([s for _, s in best])
            if method == "z":
                contrib = (v - v.mean()) / v.std()
            elif method == "minmax":
                contrib = (v - v.min()) / (v.max() - v.min())
            else:
                contrib = 1.0 / (value + np.arange(1, len(v) + 1))
            for (pid, _), x in zip(best, contrib):
                fused[pid] = fused.get(pid, 0.0) + weight * x
        want = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:shortlist]
        cfg = checked_search_config(searcher.config, k=3, rerank="minl2", shortlist=shortlist, stages="ann,bm25", fuse=fuse)
        papers, scores, _ = searcher.first_stage(query, cfg, exclude)
        assert [index.paper_ids[p] for p in papers] == [pid for pid, _ in want]
        np.testing.assert_allclose(scores, [x for _, x in want], atol=1e-5)
