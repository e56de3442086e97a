"""Round 40: the one fusion of ranked lists (`aspire.scoring.fusion`) against hand computations, and the benchmark
scored through `aspire search` (`aspire.evaluate.search_run`) against the Searcher's own answers scored by hand."""

from __future__ import annotations

import numpy as np
import pytest
from test_benchmarks import tiny_context2doc

from aspire.benchmarks.runs import read_run
from aspire.config import apply_overrides
from aspire.encoders import load_encoder
from aspire.evaluate import search_run
from aspire.scoring.fusion import fuse_ranked, normalise, parse_fusion
from aspire.search import Searcher

A = {"a": 3.0, "b": 1.0, "c": 1.0, "d": 0.0}  # a tie (b, c)
B = {"b": 5.0, "e": 5.0}  # a tie, and documents A does not hold


def _by_hand(lists, weights, norm):
    fused: dict[str, float] = {}
    for scores, w in zip(lists, weights):
        v = list(scores.values())
        mean = sum(v) / len(v)
        sd = (sum((x - mean) ** 2 for x in v) / len(v)) ** 0.5
        lo, hi = min(v), max(v)
        for d, x in scores.items():
            if hi == lo:
                c = 0.0
            elif norm == "z":
                c = (x - mean) / sd
            else:
                c = (x - lo) / (hi - lo)
            fused[d] = fused.get(d, 0.0) + w * c
    return fused


@pytest.mark.parametrize("norm", ["z", "minmax"])
def test_weighted_sums_equal_a_hand_computation_with_ties_missing_documents_and_weights_not_summing_to_one(norm):
    got = fuse_ranked([A, B], [0.7, 0.5], norm)
    want = _by_hand([A, B], [0.7, 0.5], norm)
    assert set(dict(got)) == set(want) == {"a", "b", "c", "d", "e"}
    for doc, score in got:
        assert score == pytest.approx(want[doc], abs=1e-12)
    assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
    ties = [d for d, s in got if s == pytest.approx(dict(got)["c"])]
    assert ties == sorted(ties)  # equal scores: by document id


def test_rrf_equals_a_hand_computation_ties_in_the_lists_own_order():
    got = dict(fuse_ranked([A, B], [0.7, 0.5], "rrf", rrf_k=1))
    # A ranks a, b, c, d (b before c: its own order); B ranks b, e
    want = {"a": 0.7 / 2, "b": 0.7 / 3 + 0.5 / 2, "c": 0.7 / 4, "d": 0.7 / 5, "e": 0.5 / 3}
    assert got == pytest.approx(want)


@pytest.mark.parametrize("norm", ["z", "minmax"])
def test_a_constant_list_or_an_empty_one_adds_nothing(norm):
    assert normalise(np.array([0.1, 0.1, 0.1]), norm).tolist() == [0.0, 0.0, 0.0]
    alone = fuse_ranked([A], None, norm)
    assert fuse_ranked([A, {"a": 2.0, "x": 2.0}], None, norm) == sorted(alone + [("x", 0.0)], key=lambda kv: (-kv[1], kv[0]))
    assert fuse_ranked([A, {}], None, norm) == alone
    assert fuse_ranked([{}], None, norm) == []


def test_unknown_methods_are_refused_listing_the_valid_ones():
    with pytest.raises(ValueError, match="valid: z, minmax, rrf"):
        fuse_ranked([A], None, "wsum")
    with pytest.raises(ValueError, match="valid: z:ALPHA, minmax:ALPHA"):
        parse_fusion("wsum:0.5")
    with pytest.raises(ValueError, match="valid: z, minmax"):
        normalise(np.array([1.0, 2.0]), "rrf")


def test_fusing_no_list_is_an_error_that_says_so_not_one_blaming_the_weights():
    """`fuse_ranked([])` said "fusion weights must be finite, >= 0 and sum to more than 0, got " (no weights given)."""
    for weights in (None, []):
        with pytest.raises(ValueError, match="at least one ranked list"):
            fuse_ranked([], weights, "z")


@pytest.mark.parametrize("pipeline", [  # ~27 s each: the fused first stage by default, the others in slow runs
    pytest.param([], marks=pytest.mark.slow), ["stages=ann,bm25"], pytest.param(["rerank=ot"], marks=pytest.mark.slow)])
def test_the_search_run_is_the_searchers_answers_and_its_mrr_the_hand_computed_one(tmp_path, tiny_model_dir, pipeline):
    bench = tiny_context2doc(tmp_path)
    encoder = load_encoder(str(tiny_model_dir))
    depth = len(bench.candidates)
    res = search_run.run_search_pipeline(bench, tmp_path / "out", "x", str(tiny_model_dir), pipeline, depth=depth,
                                         encoder=encoder)
    run = read_run(tmp_path / "out" / "run.trec")
    assert set(run) == set(bench.queries)  # every query answered
    index = search_run.index_candidates(encoder, bench.candidates)
    assert set(index.paper_ids) == {p.paper_id for p in bench.candidates}  # the benchmark's pool, nothing else
    searcher = Searcher(index, apply_overrides(index.config.search, pipeline, "search"))
    rr = []
    for qid, query in search_run.encode_text_queries(encoder, bench.queries).items():
        hits = [h.paper_id for h in searcher.search(query, k=depth, shortlist=max(searcher.config.shortlist, depth),
                                                    exclude=[])]
        assert [d for d, _ in run[qid]] == hits
        first = next((i for i, d in enumerate(hits, 1) if bench.qrels[qid].get(d, 0) > 0), None)
        rr.append(1.0 / first if first else 0.0)
    assert res["metrics"]["MRR"] == pytest.approx(sum(rr) / len(rr))
    assert res["n_queries"] == len(bench.queries) and res["short_of_depth"]["queries"] == 0
