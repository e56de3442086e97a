"""Rank judged pools with an encoder and a scorer (the encodings: `aspire.evaluate.encode`; facet queries and
candidates: `aspire.evaluate.facets`).

Scorers: `minl2`, `ot`, `attention`, `maxpassage` from `aspire.scoring` (sentence sets), and `abstract`: cosine
similarity of the single vectors (`aspire.scoring.vector.VectorCosine`). All are similarities, higher is better.
With a model trained with facet control codes (`aspire.encoders.codes`), a facet's queries are
re-encoded with that facet's code (`options.facet_code`, default `auto`) while the candidates keep the
model's own code (`[DOC]`); the codes used are in the run info.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Mapping, Sequence

import torch

from aspire.batch import DocBatch
from aspire.data.papers import Paper
from aspire.encoders.codes import query_code
from aspire.evaluate.encode import encode_papers
from aspire.evaluate.facets import facet_candidates, facet_queries, facet_text_queries
from aspire.evaluate.options import SCORERS, EvalOptions
from aspire.scoring.chunked import score_chunked
from aspire.scoring.vector import VectorCosine


def get_eval_scorer(name: str, **kwargs):
    """`abstract` -> VectorCosine; a sentence scorer -> `aspire.scoring.get_scorer(name, **kwargs)`."""
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; valid: {list(SCORERS)}")
    if name == "abstract":
        if kwargs:
            raise ValueError(f"scorer 'abstract' takes no options, got {sorted(kwargs)}")
        return VectorCosine()
    from aspire.scoring import get_scorer

    return get_scorer(name, **kwargs)


def run_record(encoder, scored_on, batch_size: int, cache_dir, encoded: list[dict]) -> dict:
    """What a run ran on, for its results file (none of it moves a figure): the devices the encoder and the scorer
    used, the batch size asked for, and the vector cache's folder and the entries read or written
    (`aspire.evaluate.encode.encode_papers`' `record`)."""
    return {"encoder_device": str(encoder.device), "score_device": str(scored_on), "batch_size": batch_size,
            "vector_cache": None if cache_dir is None else str(cache_dir), "encoded": list(encoded)}


def rank_pools(
    queries: DocBatch,
    candidates: DocBatch,
    pools: Mapping[str, Sequence[str]],
    scorer,
) -> dict[str, list[tuple[str, float]]]:
    """Rank each query's pool by `scorer.score` (similarity, higher first; ties keep pool order).

    Args:
        queries: one row per query pid of `pools` (masks possibly narrowed to a facet).
        candidates: rows holding every pooled candidate (looked up by paper id).
        pools: `{query_pid: [cand_pid, ...]}`.
        scorer: object with `.score(DocBatch (1, S, D), DocBatch (P, S, D)) -> (1, P)`, called on
            length-bucketed chunks under a memory budget (`aspire.scoring.chunked.score_chunked`).
    Returns:
        `{query_pid: [(cand_pid, similarity), ...]}` best first.
    Raises:
        ValueError naming the query and candidates when a similarity is NaN (a NaN has no place in an order), or
        when a pool names a candidate twice (it would be ranked twice).
    """
    qrow = {pid: i for i, pid in enumerate(queries.paper_ids)}
    crow = {pid: i for i, pid in enumerate(candidates.paper_ids)}
    missing = sorted({c for pool in pools.values() for c in pool if c not in crow} | (set(pools) - set(qrow)))
    if missing:
        raise ValueError(f"{len(missing)} pooled papers were not encoded: {missing[:10]}")
    for qid, pool in pools.items():
        if len(set(pool)) != len(pool):
            repeated = sorted({c for c in pool if pool.count(c) > 1})
            raise ValueError(f"query {qid}: its pool names candidates {repeated[:10]} more than once")
    out: dict[str, list[tuple[str, float]]] = {}
    for qid, pool in pools.items():
        sims = score_chunked(scorer, queries.index([qrow[qid]]), candidates.index([crow[c] for c in pool]))[0]  # (P,)
        nan = torch.isnan(sims).nonzero().flatten().tolist()
        if nan:
            raise ValueError(f"query {qid}: the scorer gave NaN similarities for {len(nan)} of {len(pool)} candidates: "
                             f"{[pool[j] for j in nan][:10]} (NaN vectors from the encoder, or a numerical overflow)")
        # sorted in float64 on the CPU: exact for every float dtype (float32 would merge close float64 similarities
        # into ties, ranked by pool order against their scores)
        order = torch.sort(-sims.detach().to("cpu", torch.float64), stable=True).indices.tolist()
        out[qid] = [(pool[j], float(sims[j])) for j in order]
    return out


def rank_pool_set(
    pool_set,
    papers: Mapping[str, Paper],
    model: str,
    scorer: str,
    out,
    exp: str,
    options: EvalOptions,
    label_to_facet: Mapping[str, str] | None = None,
) -> tuple[dict[str, dict[str, list[str]]], dict]:
    """Encode every pooled paper once, rank each facet's pools, write the ranked files to `out`.

    A faceted set (facet != "") narrows each query to its facet's sentences through
    `label_to_facet`. The `abstract` scorer ignores the facet with `options.query_text="abstract"`;
    with `"facet"` or `"title+facet"` each query is re-encoded from its facet sentences
    (`facet_text_queries`) and the candidates keep their whole-abstract vectors. With a sentence
    scorer, `options.cand_sentences="facet"` narrows the candidates to the facet too (`facet_candidates`).
    `options.encoder_options` go to `load_encoder` (e.g. `backend="onnx"`, `quantize="int8"`).
    Returns:
        (`{facet: {query_pid: [cand_pid, ...]}}`, run info with the model (and, for a training run's folder, the
        checkpoint it loaded: the encoder's `loaded_checkpoint`), the encoder fingerprint, the
        seconds spent loading, encoding and scoring (wall clock, and process CPU time as `*_cpu`),
        what it ran on (`run_record`) and, with `cand_sentences="facet"`, per facet the number of pooled
        candidates that had no sentence of it and kept all theirs (`cands_kept_whole`).
    Raises:
        ValueError, before the model loads, for options that do not fit (`EvalOptions.checked`, a batch size that is
        no whole number >= 1, a device torch cannot parse) and for a faceted set whose queries or candidates are
        narrowed to a facet without a `label_to_facet`, or a pooled paper that `papers` lacks (naming it).
    """
    from aspire.benchmarks.pools import ranked_path, write_ranked
    from aspire.encoders import load_encoder

    opts = options.checked(scorer, faceted=pool_set.facets != [""])
    encoding, scorer_options, cache_dir, batch_size, device, encode_options, query_text, cand_sentences = (
        opts.encoding, opts.scorer_options, opts.cache_dir, opts.batch_size, opts.device, opts.encode_options,
        opts.query_text, opts.cand_sentences)
    score_fn = get_eval_scorer(scorer, **(scorer_options or {}))
    pool_set.check_texts(papers)
    ordered = [papers[pid] for pid in sorted(pool_set.paper_ids())]
    # what does not fit is refused before the model loads (it was refused after loading it and encoding every paper)
    from aspire.encoders.contextual import check_batch_size

    check_batch_size(batch_size)
    if device:
        try:
            torch.device(device)
        except RuntimeError:
            raise ValueError(f"unknown device {device!r}; use cpu, cuda, cuda:N or mps") from None
    single = encoding in ("abstract", "pass")  # one vector a paper: the facet does not narrow it
    for facet in pool_set.facets:
        if facet and (not single or query_text != "abstract") and label_to_facet is None:
            raise ValueError(f"facet {facet!r} needs a label_to_facet mapping")

    t0 = time.perf_counter()
    encoder = load_encoder(model, **opts.encoder_options)
    loaded = encoder.loaded_checkpoint  # a training run's folder: the checkpoint it loaded (one read of its pointer)
    if device:
        encoder.to(device)
    t_load = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    encoded: list[dict] = []  # each encode_papers call: its cache entry, read or written
    batch, from_cache = encode_papers(encoder, ordered, encoding, cache_dir, batch_size, encode_options, encoded)
    t_encode, c_encode = time.perf_counter() - t0, time.process_time() - c0

    t0, c0 = time.perf_counter(), time.process_time()
    batch = batch.to(torch.device(device) if device else encoder.device)
    row = {pid: i for i, pid in enumerate(batch.paper_ids)}
    rankings: dict[str, dict[str, list[str]]] = {}
    kept_whole: dict[str, int] = {}
    codes: dict[str, str] = {}
    for facet in pool_set.facets:
        pools = {q: list(p) for q, p in pool_set.pools[facet].items()}
        code = query_code(getattr(encoder, "codes", ()), opts.facet_code, facet)
        with encoder.using_code(code) if code else contextlib.nullcontext():
            if code:  # the queries again, with their facet's code; the candidates keep the model's code
                codes[facet] = code
                asked = [papers[q] for q in pools]
                queries, _ = encode_papers(encoder, asked, encoding, cache_dir, batch_size, encode_options, encoded)
                queries = queries.to(batch.emb.device)
            else:
                queries = batch.index([row[q] for q in pools])
            if facet and not single:
                queries = facet_queries(queries, papers, facet, label_to_facet)
            elif facet and query_text != "abstract":
                queries = facet_text_queries(encoder, [papers[q] for q in pools], facet, label_to_facet,
                                             query_text, encode_options, batch_size).to(batch.emb.device)
        cands = batch
        if cand_sentences == "facet":
            cands, empty = facet_candidates(batch, papers, facet, label_to_facet)
            pooled = {c for pool in pools.values() for c in pool}
            kept_whole[facet] = len(pooled & set(empty))
        ranked = rank_pools(queries, cands, pools, score_fn)
        write_ranked(ranked_path(Path(out), pool_set.name, exp, facet), ranked)
        rankings[facet] = {q: [c for c, _ in r] for q, r in ranked.items()}
    t_score, c_score = time.perf_counter() - t0, time.process_time() - c0
    info = {
        "experiment": exp,
        "model": str(model),
        **loaded,
        "encoder_fingerprint": encoded[0]["fingerprint"],  # the candidates' encoding, no facet code in force
        "encoding": encoding,
        "scorer": scorer,
        "scorer_options": dict(scorer_options or {}),
        "encode_options": dict(encode_options or {}),
        "encoder_options": dict(opts.encoder_options),
        "query_text": query_text,
        "cand_sentences": cand_sentences,
        **({"cands_kept_whole": kept_whole} if cand_sentences != "all" else {}),
        **({"query_codes": codes, "doc_code": encoder.code} if codes else {}),
        "n_papers": len(ordered),
        "timings_s": {"load_model": t_load, "encode": t_encode, "encode_from_cache": from_cache, "score": t_score,
                      "encode_cpu": c_encode, "score_cpu": c_score},
        "run_record": run_record(encoder, batch.emb.device, batch_size, cache_dir, encoded),
    }
    return rankings, info
