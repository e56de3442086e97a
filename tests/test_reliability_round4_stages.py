"""Round 4 of hostile inputs to the pool sets' search stages (`aspire.evaluate.pool_stages`) and to the benchmarks
scored through `aspire search` (`aspire.evaluate.search_run`): tiny random models, no network."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_formats_query import coded_model_dir  # noqa: F401  (a fixture)
from test_pool_stages import LABEL_TO_FACET, faceted  # noqa: F401  (faceted: a fixture)

from aspire.evaluate.options import EvalOptions, Stages
from aspire.evaluate.pool_stages import run_stages
from aspire.evaluate.rank import rank_pool_set
from aspire.evaluate.search_run import rank_pools_by_search, run_reviewers_search, run_search_pipeline
from aspire.retrieval.crossencoder import RerankOptions


def test_an_exp_naming_an_earlier_stage_is_refused_not_overwritten(faceted, tmp_path, tiny_model_dir):  # noqa: F811
    """`--bm25-alpha 0.5 --exp bm25` wrote the fused ranking over BM25's own ranked files (and `--exp` the model's
    name over the model's run), so a stage scored on its own was silently another stage's ranking."""
    pool_set, papers = faceted
    out = tmp_path / "out"
    rank_pool_set(pool_set, papers, str(tiny_model_dir), "minl2", out, "dense", EvalOptions(), LABEL_TO_FACET)
    dense = (out / "test-pid2pool-toy-dense-method-ranked.json").read_text()
    with pytest.raises(ValueError, match="'bm25' is the name of the BM25 stage's ranked files"):
        run_stages(pool_set, papers, LABEL_TO_FACET, out, "bm25", "dense", Stages(True, 0.5))
    with pytest.raises(ValueError, match="'dense' is the name of the model's run's ranked files"):
        run_stages(pool_set, papers, LABEL_TO_FACET, out, "dense", "dense", Stages(rerank=RerankOptions("x", 2)))
    with pytest.raises(ValueError, match="'dense-bm25-a0.5' is the name of the fusion stage's"):
        run_stages(pool_set, papers, LABEL_TO_FACET, out, "dense-bm25-a0.5", "dense",
                   Stages(True, 0.5, rerank=RerankOptions("x", 2)))
    assert (out / "test-pid2pool-toy-dense-method-ranked.json").read_text() == dense
    # the last stage may carry its own name: BM25 alone as `bm25`, the fusion as its fused name
    run_stages(pool_set, papers, LABEL_TO_FACET, out, "bm25", None, Stages(bm25=True))
    run_stages(pool_set, papers, LABEL_TO_FACET, out, "dense-bm25-a0.5", "dense", Stages(True, 0.5))


def test_csfcube_refuses_an_exp_naming_an_earlier_stage_before_the_model_runs(small_csfcube, tmp_path):
    from aspire.evaluate.csfcube import run_csfcube

    with pytest.raises(ValueError, match="'m-contextual-minl2' is the name of the model's run's ranked files"):
        run_csfcube(small_csfcube, "/no/such/m", "minl2", tmp_path / "out", "m-contextual-minl2",
                    stages=Stages(rerank=RerankOptions("x", 2)))
    assert not (tmp_path / "out").exists()


def test_search_pipeline_keys_the_benchmark_sets_are_refused_before_encoding():
    """`csfcube --search-pipeline k=2 shortlist=3` ranked every pool whole anyway while results.json listed the
    overrides as applied; the keys are refused, naming the key, before the model or the data are touched."""
    for key in ("k=2", "shortlist=3"):
        with pytest.raises(ValueError, match=f"'{key[:-2]}' is set by the benchmark .every pool is"):
            rank_pools_by_search(None, {}, None, ["rerank=ot", key])  # no pool set, no encoder: never reached
        with pytest.raises(ValueError, match=f"'{key[:-2]}' is set by the benchmark .every archive"):
            run_reviewers_search(None, "out", "x", "/no/such/model", [key])
    with pytest.raises(ValueError, match="'k' is set by the benchmark .--depth sets it"):
        run_search_pipeline(SimpleNamespace(candidates=list(range(768))), "out", "x", "/no/such/model", ["k=5"])


def test_the_cross_encoder_search_stage_is_refused_before_encoding():
    """`csfcube --search-pipeline cross_encoder=true` encoded every pooled paper, then failed asking for a
    `--cross-encoder DIR` option evaluate does not have."""
    why = "the cross-encoder stage needs a loaded cross-encoder; evaluate it with --rerank MODEL"
    with pytest.raises(ValueError, match=why):
        rank_pools_by_search(None, {}, None, ["cross_encoder=true"])
    with pytest.raises(ValueError, match=why):
        run_reviewers_search(None, "out", "x", "/no/such/model", ["cross_encoder=true"])
    with pytest.raises(ValueError, match=why):
        run_search_pipeline(SimpleNamespace(candidates=list(range(768))), "out", "x", "/no/such/model",
                            ["cross_encoder=true"])


def test_search_pipeline_queries_get_their_facet_code(small_csfcube, coded_model_dir, tmp_path):  # noqa: F811
    """With a facet-coded model, `csfcube --search-pipeline` encoded a facet's queries with the papers' code
    ([DOC]) while `aspire search` and `csfcube --scorer` give them their facet's ([METHOD]): the figure was not
    the one of the pipeline a user runs."""
    from aspire.benchmarks.csfcube import ABSTRACTS_FILE, load_csfcube
    from aspire.benchmarks.csfcube import LABEL_TO_FACET as CSFCUBE_LABELS
    from aspire.data.papers import read_paper_map
    from aspire.encoders import load_encoder

    pool_set = load_csfcube(small_csfcube)
    papers = read_paper_map(small_csfcube / ABSTRACTS_FILE, pool_set.paper_ids(), needed_by="pooled")
    encoder, cache = load_encoder(str(coded_model_dir)), tmp_path / "cache"
    pipeline = ["stages=ann", "rerank=minl2"]
    runs = {}
    for code in ("auto", "none"):
        runs[code], info = rank_pool_set(pool_set, papers, str(coded_model_dir), "minl2", tmp_path / code, code,
                                         EvalOptions(cache_dir=cache, facet_code=code), CSFCUBE_LABELS)
        given = {} if code == "auto" else {"facet_code": code}  # auto: the default, as `csfcube --search-pipeline`
        assert rank_pools_by_search(pool_set, papers, encoder, pipeline, CSFCUBE_LABELS, cache, **given) == runs[code]
    assert info.get("query_codes") is None and runs["auto"] != runs["none"]  # the code changes the rankings


def test_a_candidate_without_labels_is_not_called_a_query(faceted, tiny_model_dir):  # noqa: F811
    """`--cand-sentences facet` with a pooled candidate lacking `pred_labels` said "a facet-conditional query
    needs them", sending the user to the queries; the error names the paper and the facet only."""
    from aspire.data.papers import Paper
    from aspire.encoders import load_encoder
    from aspire.evaluate.facets import facet_candidates

    pool_set, papers = faceted
    papers = {**papers, "c1": Paper("c1", "paper c1", papers["c1"].sentences)}  # no labels
    batch = load_encoder(str(tiny_model_dir)).encode([papers[c] for c in ("c1", "c2")], progress=False)
    with pytest.raises(ValueError, match="paper c1 has no sentence labels; choosing its sentences of facet "
                                         "'method' needs them") as err:
        facet_candidates(batch, papers, "method", LABEL_TO_FACET)
    assert "query" not in str(err.value)


@pytest.mark.parametrize("k1, b", [(float("nan"), 0.75), (-1.0, 0.75), (float("inf"), 0.75), (1.2, 1.5)])
def test_bm25_settings_out_of_range_are_refused_with_the_stages(k1, b):
    """`--k1 nan`, `-1` or a `--b` above 1 were found only when BM25 was built, after the model had encoded every
    paper; `Stages.checked` runs before."""
    from aspire.evaluate.options import Stages

    with pytest.raises(ValueError, match=r"BM25 needs a finite k1 >= 0 and 0 <= b <= 1"):
        Stages(bm25=True, alpha=0.5, k1=k1, b=b).checked(has_model=True)
    assert Stages(bm25=False, k1=k1, b=b).checked(has_model=True).k1 is k1  # unused without BM25
