"""Round 7: the hybrid scorer against its docstring on the tiny random model, and the two scripts that chose its
weightings (`experiments/aspect_model.py`, `experiments/hybrid_weights_context2doc.py`) against the scorer."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from aspire.batch import DocBatch
from aspire.data.papers import Paper
from aspire.encoders.contextual import ContextualSentenceEncoder
from aspire.evaluate.facets import facet_queries
from aspire.scoring.scorers import DEFAULT_HYBRID_WEIGHTS, HybridScorer

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
LABEL_TO_FACET = {"background_label": "background", "method_label": "method", "result_label": "result"}
PAPERS = [
    Paper("q", "Graph parsing", ["Parsing graphs is hard.", "We train a transition parser.", "It wins on three sets."],
          labels=["background_label", "method_label", "result_label"]),
    Paper("a", "Neural translation", ["Translation is hard.", "We add attention.", "BLEU rises by two."],
          labels=["background_label", "method_label", "result_label"]),
    Paper("b", "Word vectors", ["Vectors of words.", "They help tagging.", "Results improve a lot.", "Code is out."],
          labels=["background_label", "method_label", "result_label", "result_label"]),
    Paper("c", "Tagging", ["We tag words.", "A CRF is used."], labels=["background_label", "method_label"]),
]


def _script(name: str):
    sys.path.insert(0, str(EXPERIMENTS))  # hybrid_weights_context2doc imports aspect_model by its bare name
    try:
        spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXPERIMENTS))


@pytest.fixture(scope="module")
def encoded(tiny_model_dir, tmp_path_factory):
    torch.manual_seed(0)
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        return enc, enc.encode(PAPERS)


def test_facet_query_terms_on_the_tiny_model_are_the_documented_similarities(encoded):
    """A method query: `whole` is the whole vectors' cosine (no selection moves it), `facet` the cosine of the mean of
    the query's selected contextual sentence vectors with the candidate's whole vector, `minl2` over the selected query
    sentences and every candidate sentence; the score is the sum of the shares, the default weighting whole + facet."""
    _, batch = encoded
    papers = {p.paper_id: p for p in PAPERS}
    query = facet_queries(batch.index([0]), papers, "method", LABEL_TO_FACET)
    cands = batch.index([1, 2, 3])
    assert query.mask.tolist() == [[True if j == 1 else False for j in range(query.mask.shape[1])]]
    match = HybridScorer({"whole": 1.0, "facet": 1.0, "minl2": 0.5}).dist_details(query, cands)
    whole = F.normalize(batch.whole[0], dim=-1) @ F.normalize(cands.whole, dim=-1).T
    facet = F.normalize(batch.emb[0, 1], dim=-1) @ F.normalize(cands.whole, dim=-1).T
    minl2 = torch.stack([-torch.cdist(batch.emb[0, 1:2], cands.emb[j][cands.mask[j]]).min() for j in range(3)])
    torch.testing.assert_close(match.terms["whole"][0], whole)
    torch.testing.assert_close(match.terms["facet"][0], facet)
    torch.testing.assert_close(match.terms["minl2"][0], minl2)
    torch.testing.assert_close(-match.dist, sum(match.shares.values()))
    torch.testing.assert_close(match.shares["minl2"], 0.5 * match.terms["minl2"])
    full = HybridScorer().dist_details(batch.index([0]), cands)  # every sentence: whole unchanged, facet moved
    torch.testing.assert_close(full.terms["whole"], match.terms["whole"])
    assert not torch.allclose(full.terms["facet"], match.terms["facet"])
    assert DEFAULT_HYBRID_WEIGHTS == {"whole": 1.0, "facet": 1.0}
    torch.testing.assert_close(HybridScorer().score(query, cands), match.terms["whole"] + match.terms["facet"])


def test_a_query_with_no_sentence_of_the_facet_is_refused_by_name(encoded):
    _, batch = encoded
    papers = {p.paper_id: p for p in PAPERS}
    with pytest.raises(ValueError, match=r"no encoded sentence of facet 'result' in queries \['c'\]"):
        facet_queries(batch.index([3]), papers, "result", LABEL_TO_FACET)
    empty = DocBatch(batch.emb[:1], torch.zeros_like(batch.mask[:1]), whole=batch.whole[:1])
    with pytest.raises(ValueError, match="query rows \\[0\\] have no sentence selected"):
        HybridScorer().score(empty, batch)


def test_float16_scores_follow_float32_and_keep_the_inputs_dtype(encoded):
    _, batch = encoded
    scorer = HybridScorer({"whole": 1, "facet": 2, "minl2": 0.5, "ot": 1},
                          {"whole": (0.1, 0.2), "facet": (0.1, 0.2), "minl2": (-3.0, 0.5), "ot": (-3.0, 0.5)})
    q, c = batch.index([0, 1]), batch.index([1, 2, 3])
    half = scorer.score(q.to(dtype=torch.float16), c.to(dtype=torch.float16))
    assert half.dtype == torch.float16 and half.device == q.emb.device
    torch.testing.assert_close(half.float(), scorer.score(q, c), atol=0.05, rtol=0.01)


def test_whole_vectors_of_another_dtype_are_refused_by_name(encoded):
    # a float16 `whole` beside float32 `emb` reached torch's matmul in the scorer: "expected m1 and m2 to have the
    # same dtype"
    _, batch = encoded
    with pytest.raises(ValueError, match=r"DocBatch\.whole is torch\.float16 and emb torch\.float32: give them one dtype"):
        DocBatch(batch.emb[:1], batch.mask[:1], whole=batch.whole[:1].half())


def test_the_grid_scripts_rank_as_the_scorer_does(encoded):
    """The study chose weightings from precomputed terms (`aspect_model.rank`, `hybrid_weights_context2doc.scored`),
    not from the scorer: both must order candidates exactly as `HybridScorer` with the same weights does."""
    aspect_model, c2d = _script("aspect_model"), _script("hybrid_weights_context2doc")
    _, batch = encoded
    q, cands = batch.index([0]), batch.index([1, 2, 3])
    terms = {t: s[0] for t, s in HybridScorer().term_scores(q, cands).items()}
    calibration = {"whole": (0.2, 0.1), "facet": (0.1, 0.3), "minl2": (-2.0, 0.7), "ot": (-2.5, 0.4)}
    weights = {"whole": 1.0, "facet": 2.0, "minl2": 0.5, "ot": 1.0}
    pool_set = SimpleNamespace(pools={"method": {"q": ["a", "b", "c"]}})
    ranked = aspect_model.rank({"method": {"q": terms}}, pool_set, weights, calibration)["method"]["q"]
    scores = HybridScorer(weights, calibration).score(q, cands)[0]
    assert ranked == [["a", "b", "c"][j] for j in torch.argsort(-scores).tolist()]

    bench = SimpleNamespace(candidates=PAPERS[1:], queries={"q": "text"}, qrels={"q": {}})
    seen = {}

    def per_query(qrels, run, metrics):
        seen.update(run)
        return {m: {"q": 0.0} for m in metrics}

    c2d.per_query = per_query
    raw = HybridScorer().score(q, cands)[0]
    c2d.scored(bench, {t: v[None] for t, v in terms.items()}, DEFAULT_HYBRID_WEIGHTS, None)  # the shipped default
    assert [pid for pid, _ in seen["q"]] == [["a", "b", "c"][j] for j in torch.argsort(-raw).tolist()]


@pytest.mark.filterwarnings(r"ignore:std\(\)")
def test_a_calibration_sample_too_small_for_a_spread_is_refused(encoded, tmp_path):
    """2 papers give one pair, so each term's sigma was NaN: every calibrated weighting then scored NaN and the grid's
    choice was made among NaN rankings, silently. Now a ValueError; 4 papers calibrate."""
    aspect_model = _script("aspect_model")
    enc, _ = encoded
    with pytest.raises(ValueError, match="calibration on 2 papers .* not usable"):
        aspect_model.fit_calibration(enc, PAPERS[:2], tmp_path)
    calibration = aspect_model.fit_calibration(enc, PAPERS, tmp_path)
    assert set(calibration) == {"whole", "facet", "minl2", "ot"}
    assert all(torch.isfinite(torch.tensor(pair)).all() and pair[1] > 0 for pair in calibration.values())
