"""Running a model on CSFCube (`aspire.benchmarks.csfcube` says what the benchmark is): encode, rank
every facet's pools, score with the benchmark's protocol, write the run files and `results.json`."""

from __future__ import annotations

import logging
from pathlib import Path

from aspire.benchmarks.csfcube import (
    ABSTRACTS_FILE,
    LABEL_TO_FACET,
    evaluate_csfcube_rankings,
    load_csfcube,
    write_results,
)
from aspire.benchmarks.pools import write_trec
from aspire.data.papers import read_paper_map

log = logging.getLogger(__name__)


def run_csfcube(
    root: str | Path,
    model: str | None,
    scorer: str | None,
    out: str | Path,
    exp: str | None = None,
    encoding: str = "contextual",
    scorer_options: dict | None = None,
    cache_dir: str | Path | None = None,
    batch_size: int = 32,
    device: str | None = None,
    encode_options: dict | None = None,
    query_text: str = "abstract",
    cand_sentences: str = "all",
    encoder_options: dict | None = None,
    facet_code: str = "auto",
    bm25: bool = False,
    alpha: float | None = None,
    k1: float = 1.25,
    b: float = 0.75,
    rerank=None,
) -> dict:
    """Encode CSFCube with `model`, rank every facet's pools with `scorer`, write and return results.

    `scorer="abstract"` always uses the `abstract` encoding (one vector per paper); the facet is
    ignored unless `query_text` is `facet` or `title+facet`. `cand_sentences="facet"` matches only
    the candidates' sentences of the query's facet (see `aspire.evaluate.facets`). `encoder_options` go to
    `load_encoder` (the inference backend: `backend="onnx"`, `quantize="int8"`; `code`: the control code of
    every paper). `facet_code` is the control code of a facet's queries (default `auto`: the facet's own,
    for a model trained with facet codes; see `aspire.encoders.codes.query_code`).
    The search pipeline's stages (`aspire.evaluate.pool_stages`): `bm25` ranks by BM25 (k1, b) of the facet's
    sentences, alone (no model) or fused with the model's run at weight `alpha` on the model; `rerank` (an
    `aspire.retrieval.crossencoder.RerankOptions`) re-scores each pool's top N with a cross-encoder.
    Writes `out/test-pid2pool-csfcube-EXP-{facet}-ranked.json` (similarities, best first; each stage's own
    files beside them), the per-query CSV and `out/results.json` (with timings: encoding vs scoring seconds).
    """
    from aspire.evaluate.options import EvalOptions
    from aspire.evaluate.pool_stages import run_stages, stage_exp
    from aspire.evaluate.rank import default_exp, rank_pool_set

    if (model is None) != (scorer is None) or (model is None and not bm25):
        raise ValueError("give a model and a scorer, BM25, or both")
    root, out = Path(root), Path(out)
    pool_set = load_csfcube(root)
    papers = read_paper_map(root / ABSTRACTS_FILE, ids=pool_set.paper_ids(), needed_by="pooled")
    base = None if model is None else default_exp(model, scorer, encoding, scorer_options, query_text, cand_sentences)
    staged = bm25 or rerank is not None
    exp = exp or (stage_exp(base, bm25, alpha, rerank) if staged else base)
    info: dict = {}
    if model is not None:
        options = EvalOptions(encoding, dict(scorer_options or {}), cache_dir, batch_size, device,
                              dict(encode_options or {}), query_text, cand_sentences, dict(encoder_options or {}),
                              facet_code)
        rankings, info = rank_pool_set(pool_set, papers, model, scorer, out, base if staged else exp, options,
                                       LABEL_TO_FACET)
    if staged:
        rankings, stages = run_stages(pool_set, papers, LABEL_TO_FACET, out, exp, base, bm25, alpha, k1, b, rerank)
        info.update(stages, experiment=exp)
    results, per_query = evaluate_csfcube_rankings(root, rankings)
    results.update(info)
    write_results(out, root, exp, results, per_query)
    write_trec(out, pool_set, rankings, exp)
    log.info("wrote %s", out / "results.json")
    return results


def fuse_csfcube(
    root: str | Path,
    inputs: list[tuple[str | Path, str]],
    out: str | Path,
    exp: str,
    weights: list[float] | None = None,
    fusion: str = "z",
) -> dict:
    """Ensemble of ranked CSFCube runs [(folder, exp), ...] fused by `fusion` (`aspire.scoring.fusion`), scored."""
    from aspire.evaluate.fuse import fuse_pool_set

    out = Path(out)
    rankings = fuse_pool_set(load_csfcube(root), inputs, out, exp, weights, fusion)
    results, per_query = evaluate_csfcube_rankings(root, rankings)
    results.update(experiment=exp, fused_from=[f"{folder}:{e}" for folder, e in inputs],
                   fusion={"method": fusion, "weights": weights or "equal"})
    write_results(out, root, exp, results, per_query)
    write_trec(out, load_csfcube(root), rankings, exp)
    return results


def run_csfcube_search(root: str | Path, model: str, pipeline: list[str], out: str | Path, exp: str | None = None,
                       cache_dir: str | Path | None = None, batch_size: int = 32,
                       encoder_options: dict | None = None) -> dict:
    """CSFCube answered by `aspire search`'s Searcher with the search-config overrides `pipeline`
    (`aspire.evaluate.search_run.rank_pools_by_search`), scored by the benchmark's protocol; writes the
    per-query CSV, the TREC files and `out/results.json`."""
    import time

    from aspire.encoders import load_encoder
    from aspire.evaluate.search_run import rank_pools_by_search, search_exp
    from aspire.index.store import model_fingerprint

    root, out = Path(root), Path(out)
    pool_set = load_csfcube(root)
    papers = read_paper_map(root / ABSTRACTS_FILE, ids=pool_set.paper_ids(), needed_by="pooled")
    exp = exp or search_exp(model, pipeline)
    encoder = load_encoder(model, **dict(encoder_options or {}))
    t0 = time.perf_counter()
    rankings = rank_pools_by_search(pool_set, papers, encoder, pipeline, LABEL_TO_FACET, cache_dir, batch_size)
    results, per_query = evaluate_csfcube_rankings(root, rankings)
    results.update(experiment=exp, model=str(model), encoder_fingerprint=model_fingerprint(encoder),
                   search={"overrides": list(pipeline), "index": "flat, one a pool"},
                   seconds=time.perf_counter() - t0)
    write_results(out, root, exp, results, per_query)
    write_trec(out, pool_set, rankings, exp)
    log.info("wrote %s", out / "results.json")
    return results
