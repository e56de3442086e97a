"""Round 14, re-ranking and fusion against independent references: the fusion against ranx's `fuse` on runs with
ties, documents missing from some runs and weights that do not sum to 1; the max-passage mix against brute force;
the cross-encoder's cut of a long pair against the tokenizer.

Each test either pins one defect (a constant list z-scored to -1 by rounding, a NaN score ranked last without a word,
an error naming no query) or checks a part against a reference.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import aspire.retrieval.rerank as rerank_module
from aspire.retrieval.crossencoder import rerank_run
from aspire.scoring.crossencoder import CrossEncoderReranker
from aspire.scoring.fusion import fuse_ranked, normalise


def _ranx_fuse(runs: list[dict], weights, norm: str | None, method: str) -> dict:
    from ranx import Run, fuse

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        params = {"weights": weights} if method == "wsum" else {"k": 60}
        kwargs = {"norm": norm} if norm else {}
        return fuse([Run(r) for r in runs], method=method, params=params, **kwargs).to_dict()


# ------------------------------------------------------------------ references


@pytest.mark.slow
def test_fusion_equals_ranx_with_ties_missing_documents_and_unnormalised_weights():
    """z / minmax: the scores of ranx's `fuse(norm=zmuv|min-max, method=wsum)` for every document of the union (none
    cut), on lists with tied scores, of different documents, weights summing to 3.1; rrf on lists without ties."""
    rng = np.random.default_rng(0)
    for ties in (True, False):
        runs = []
        for _ in range(3):
            run = {}
            for q in range(8):
                docs = rng.choice(30, rng.integers(3, 20), replace=False)
                values = rng.normal(size=len(docs))
                run[f"q{q}"] = {f"d{d:02d}": float(v) for d, v in zip(docs, values.round(1) if ties else values)}
            runs.append(run)
        weights = [0.4, 2.2, 0.5]
        methods = [("z", "zmuv", "wsum", weights), ("minmax", "min-max", "wsum", weights)]
        methods += [] if ties else [("rrf", None, "rrf", None)]
        for mine, norm, method, w in methods:
            ref = _ranx_fuse(runs, w, norm, method)
            for q, want in ref.items():
                got = fuse_ranked([r[q] for r in runs], w, mine)
                assert {d for d, _ in got} == set().union(*(r[q] for r in runs)) == set(want)
                np.testing.assert_allclose([s for _, s in got], [want[d] for d, _ in got], atol=1e-12)
                assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)


def test_cross_encoder_cuts_the_longer_side_from_its_end_as_the_tokenizer_does(tiny_cross_encoder_dir):
    """A pair past `max_length`: the text (the longer side here) loses its end, the query is read whole: the logit
    is the tokenizer's `longest_first` cut read by the model, whatever the batch size."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    cut = CrossEncoderReranker(str(tiny_cross_encoder_dir), 24, batch_size=1)
    text = ("citation " * 60).strip()
    logits = cut.score_pairs([("neural model", text + " aspect"), ("neural model", text + " title"),
                              ("language model", text + " aspect")])
    assert logits[0] == pytest.approx(logits[1], abs=1e-6)  # the text's end is cut
    assert abs(logits[0] - logits[2]) > 1e-5  # the query is read
    model = AutoModelForSequenceClassification.from_pretrained(tiny_cross_encoder_dir).eval()
    enc = AutoTokenizer.from_pretrained(tiny_cross_encoder_dir)("language model", text + " aspect",
                                                                 truncation="longest_first", max_length=24,
                                                                 return_tensors="pt")
    with torch.no_grad():
        assert model(**enc).logits[0, 0].item() == pytest.approx(float(logits[2]), abs=1e-5)
    cut.batch_size = 3
    np.testing.assert_allclose(cut.score_pairs([("language model", text + " aspect")] * 3), logits[2], atol=1e-5)


# ------------------------------------------------------------------ defects


def test_a_constant_list_z_scores_to_zero_though_its_spread_is_rounding():
    """Three 0.1s have a computed spread of 1.4e-17: each was z-scored to -1, not the documented 0, so a fused list
    put the documents of a constant list a whole unit below those it does not hold. ranx (spread floored at 1e-9)
    gives them about 0."""
    assert np.array_equal(normalise(np.full(3, 0.1), "z"), np.zeros(3))
    assert np.array_equal(normalise(np.full(7, 0.7), "z"), np.zeros(7))
    lists = [{"a": 0.1, "b": 0.1, "c": 0.1}, {"d": 2.0, "e": 1.0, "a": 0.0}]
    got = dict(fuse_ranked(lists, [0.5, 0.5], "z"))
    want = _ranx_fuse([{"q": x} for x in lists], [0.5, 0.5], "zmuv", "wsum")["q"]
    assert {d: round(s, 6) for d, s in got.items()} == {d: round(s, 6) for d, s in want.items()}
    assert got["b"] == got["c"] == 0.0 and got["e"] == 0.0


def test_the_passage_mix_of_a_constant_head_does_not_blow_up_by_rounding(monkeypatch):
    """maxpassage over a first stage whose scored head is constant (0.1 three times): the head's spread is rounding
    (1.4e-17) and the unscored papers were scored near -1.8e15; a constant head z-scores to 0 (`normalise`)."""
    own = np.array([1.0, 3.0, 2.0])
    monkeypatch.setitem(rerank_module.RERANK_STAGES, "maxpassage", lambda s, q, papers, cfg: (own[papers], None))
    first = np.array([0.1, 0.1, 0.1, 0.05, 0.0])
    final, _ = rerank_module._passage_mix(None, None, np.arange(5), first,
                                          SimpleNamespace(passage_depth=3, passage_beta=0.5))
    z_own = (own - own.mean()) / own.std()
    np.testing.assert_allclose(final, 0.5 * np.concatenate([z_own, [z_own.min()] * 2]), atol=1e-12)


def test_rerank_run_names_the_query_of_a_refused_list():
    """A NaN, a duplicate or a list out of order in one query of many was refused naming the document alone."""
    ok = [("a", 2.0), ("b", 1.0)]
    cross = {q: {"a": 0.1, "b": 0.2} for q in ("q1", "q7")}
    with pytest.raises(ValueError, match=r"query q7: document 'a': first-stage score nan is not finite"):
        rerank_run({"q1": ok, "q7": [("a", float("nan")), ("b", 1.0)]}, cross, 2, 0.5)
    with pytest.raises(ValueError, match=r"query q7: document 'a' is listed twice"):
        rerank_run({"q1": ok, "q7": [("a", 2.0), ("a", 1.0)]}, cross, 2, 0.5)
    with pytest.raises(ValueError, match=r"query q1: cross-encoder score nan of document 'b'"):
        rerank_run({"q1": ok, "q7": ok}, {**cross, "q1": {"a": 0.1, "b": float("nan")}}, 2, 0.5)
    assert [d for d, _ in rerank_run({"q1": ok}, cross, 2, 1.0)["q1"]] == ["b", "a"]


@pytest.mark.parametrize("name", ["minl2", "maxpassage"])
def test_rerank_refuses_a_stage_score_that_is_not_finite(monkeypatch, name):
    """A NaN from a re-ranker was sorted last (minl2, ot, hybrid) or zeroed every max-passage z-score (the
    passages then did not count at all), without a word; it is a ValueError naming the paper."""
    own = np.array([0.5, np.nan, 0.2, 0.1])
    monkeypatch.setitem(rerank_module.RERANK_STAGES, name, lambda s, q, papers, cfg: (own[papers], None))
    searcher = SimpleNamespace(index=SimpleNamespace(paper_ids=["p0", "p1", "p2", "p3"]))
    cfg = SimpleNamespace(rerank=name, k=2, passage_depth=4, passage_beta=0.5)
    with pytest.raises(ValueError, match=rf"re-ranker '{name}' scored paper 'p1' nan: not a finite score"):
        rerank_module.rerank(searcher, None, np.arange(4), np.array([4.0, 3.0, 2.0, 1.0]), cfg)
