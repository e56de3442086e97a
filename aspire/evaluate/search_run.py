"""A benchmark scored through `aspire search` itself: the candidates indexed as `aspire index build` indexes
them, every query answered by the same `Searcher` (first stage, re-rank, cross-encoder) that `aspire search`,
the page and the Python API run, so the figure is the figure of the pipeline a user runs.

    aspire evaluate context2doc --model minilm --search-pipeline search.stages=ann,bm25 search.rerank=none --out DIR
    aspire evaluate csfcube --model minilm --search-pipeline search.rerank=ot --out DIR
    aspire evaluate reviewers --model minilm --search-pipeline search.rerank=minl2 --out DIR

Each citing sentence is a one-sentence query paper with an empty title (encoded with the model's query side,
as the benchmark's dense runner encodes it); its hits (`depth` of them) are the run, scored by the benchmark's
own metrics (`aspire.evaluate.context2doc_run.score_and_write`). `pipeline` holds search-config overrides
(`stages=...`, `rerank=...`, `shortlist=...`, `fuse=...`: the keys of `aspire.index.config.SearchConfig`); the
index is exact (`flat`; `index_candidates` takes another `index`). The benchmark's own whole-abstract runs (`--scorer`) use
a vector the index does not hold; this runner answers what the index's pipelines reach.

Pool sets (CSFCube: `rank_pools_by_search`) and reviewer matching (`run_reviewers_search`) index each query's
own candidates (a pool; a reviewer's archive papers in one draw) and search them all with the query (a facet's
sentences; a submission's whole abstract); reviewer matching then aggregates each submission's hit scores over
the archive as its own runner does (`max`, `mean`, `topk:K`; an archive that lists a paper twice is refused when
the draw is read, naming its line).
A key the benchmark sets itself is refused by name (`pipeline_config`): `k` everywhere (the depth, or the whole
pool), `shortlist` for pools and archives (ranked whole), `exclude_query` (no candidate is ever left out), the
cross-encoder stage (its own runner's `--rerank`), and a key of a stage the pipeline does not run (it would be
recorded and read by nothing). The results record the resolved search config the queries ran with (`config`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Mapping, Sequence

from aspire.benchmarks.context2doc import Context2Doc
from aspire.config import apply_overrides
from aspire.data.papers import Paper
from aspire.evaluate.context2doc_run import check_depth, score_and_write
from aspire.index.config import IndexBuildConfig, IndexConfig, trained_search_config, unused_settings
from aspire.index.corpus import encode_corpus
from aspire.index.fingerprint import encoder_include_title, model_fingerprint
from aspire.index.store import SentenceIndex
from aspire.search import Searcher

log = logging.getLogger(__name__)


def index_candidates(encoder, papers: Sequence[Paper], index: IndexConfig | None = None) -> SentenceIndex:
    """The benchmark's candidates as an in-memory sentence index (the `aspire index build` path); a candidate
    the index rejects is an error naming it, so every candidate can be found."""
    corpus = encode_corpus(encoder, papers, progress=log.isEnabledFor(logging.INFO))
    if corpus.rejected:
        raise ValueError(f"{len(corpus.rejected)} candidate(s) could not be indexed, e.g. {corpus.rejected[0]}")
    config = IndexBuildConfig(index=index or IndexConfig(kind="flat"))
    return SentenceIndex.build(corpus, config, model_fingerprint(encoder), getattr(encoder, "name", ""),
                               encoder_include_title(encoder))


def encode_text_queries(encoder, texts: Mapping[str, str]) -> dict:
    """`{qid: DocBatch (1, 1, D)}`: each text a one-sentence query paper with an empty title, encoded with the
    model's query side (a query adapter, if it has one), as the benchmark's dense runner encodes them."""
    with encoder.query_side():
        return {qid: encoder.encode([Paper(qid, "", [text])], progress=False) for qid, text in texts.items()}


def answer_queries(searcher: Searcher, queries: Mapping, depth: int) -> dict[str, list[tuple[str, float]]]:
    """The run of `searcher` over encoded `queries`: `depth` hits each (the shortlist at least as deep), no
    paper left out as the query's own."""
    shortlist = max(searcher.config.shortlist, depth)
    return {qid: [(hit.paper_id, hit.score) for hit in searcher.search(query, k=depth, shortlist=shortlist, exclude=[])]
            for qid, query in queries.items()}


POOL_KEYS = {"k": "every pool is ranked whole", "shortlist": "every pool is re-ranked whole"}  # the benchmark's own
# every runner passes its own exclusion (none: a query is never one of its own candidates), so the key is read by nothing
EXCLUDE_KEY = {"exclude_query": "no candidate is left out; a query is never one of its own candidates"}


def pipeline_config(pipeline: Sequence[str], fixed: Mapping[str, str] = POOL_KEYS, model: str | None = None):
    """The search config `pipeline` (search-config overrides) gives the defaults, checked before any encoding (a
    typo once surfaced after every candidate was encoded): ConfigError naming a bad key or value; ValueError
    naming a key the benchmark sets itself (`fixed`: key -> why; it was once ignored while the results listed
    it), `exclude_query` (`EXCLUDE_KEY`: every runner passes its own exclusion) or the cross-encoder stage, which
    needs a loaded cross-encoder; and one naming a key of a stage the pipeline does not run (`fuse` without
    stages=ann,bm25, `ot_tau` without rerank=ot, ...: once taken, recorded among the overrides and read by
    nothing). With `model`, the OT settings it was trained with where the pipeline sets none
    (`aspire.index.config.trained_search_config`)."""
    from aspire.config import parse_overrides

    config = apply_overrides(IndexBuildConfig().search, list(pipeline), "search")
    fixed = {**fixed, **EXCLUDE_KEY}
    keys = list(parse_overrides(list(pipeline)))
    for key in keys:
        if key in fixed:
            raise ValueError(f"search-pipeline: {key!r} is set by the benchmark ({fixed[key]}); leave it out")
    if config.cross_encoder:
        raise ValueError("search-pipeline: the cross-encoder stage needs a loaded cross-encoder; evaluate it with "
                         "--rerank MODEL on the benchmark's own runner")
    unused = unused_settings(config, keys)
    if unused:
        raise ValueError(f"search-pipeline: a setting of a stage this pipeline does not run: {'; '.join(unused)}; "
                         "leave it out")
    return config if model is None else trained_search_config(config, model, keys)


def run_search_pipeline(bench: Context2Doc, out, exp: str, model: str, pipeline: Sequence[str] = (),
                        depth: int = 100, encoder=None, encoder_options: dict | None = None,
                        device: str | None = None) -> dict:
    """Score `bench` with the search pipeline `pipeline` (search-config overrides) over an index of its
    candidates built with `model` (or the loaded `encoder`); writes the run, qrels and `results.json`.
    `device`: the torch device the model is loaded on (None: the CPU, or where the given `encoder` is); the queries
    are searched on the encoder's device, as `aspire search --device` runs them."""
    from aspire.evaluate.rank import run_record

    check_depth(bench, depth)
    search = pipeline_config(pipeline, {"k": "--depth sets it"}, model)  # a mistyped key before the candidates are encoded
    encoder, loaded = load_search_encoder(model, encoder, encoder_options, device)
    t0 = time.perf_counter()
    index = index_candidates(encoder, bench.candidates)
    # no encoder given: the queries come encoded, and the index was built by this encoder just now (checking it
    # again would hash every weight a second time)
    searcher = Searcher(index, search)
    searcher.shortfalls = []  # a query answered with fewer than `depth` papers is counted, not warned each time
    cfg = searcher.config
    queries = {qid: query.to(encoder.device) for qid, query in encode_text_queries(encoder, bench.queries).items()}
    run = answer_queries(searcher, queries, depth)
    short = searcher.shortfalls
    shortlist = max(cfg.shortlist, depth)  # as `answer_queries` searches
    info = {"model": str(model), **loaded, "encoder_fingerprint": index.model_fingerprint,
            # the queries are searched (re-ranked) on the encoder's device; the candidates encoded by the index build,
            # without the vector cache
            "run_record": run_record(encoder, encoder.device, index.config.encode.batch_size, None, [
                {"encoding": "contextual", "papers": len(bench.candidates), "batch_size": index.config.encode.batch_size,
                 "fingerprint": index.model_fingerprint, "cache_entry": None, "from_cache": False}]),
            "search": {"stages": cfg.stages, "fuse": cfg.fuse, "rerank": cfg.rerank, "shortlist": shortlist,
                       "overrides": list(pipeline), "index": index.kind,
                       "config": asdict(replace(cfg, k=depth, shortlist=shortlist))},
            "short_of_depth": {"queries": len(short), "fewest": min((f for f, _, _ in short), default=depth)},
            "seconds": time.perf_counter() - t0}
    return score_and_write(bench, run, Path(out), exp, info)


def rank_pools_by_search(pool_set, papers, encoder, pipeline: Sequence[str] = (), label_to_facet=None,
                         cache_dir=None, batch_size: int = 32, facet_code: str = "auto",
                         record: list[dict] | None = None, search=None) -> dict[str, dict[str, list[str]]]:
    """A pool set (CSFCube's facets and pools) ranked by the `Searcher`: every pooled paper encoded once
    (contextual, through the vector cache), each query's pool indexed on its own (flat), and the query — its
    facet's sentences, still encoded in the context of its whole abstract — searched with `pipeline`
    (search-config overrides) for all of its pool. With a model trained with facet control codes, a facet's
    queries are encoded with the code `facet_code` gives them (`aspire.encoders.codes.query_code`; `auto`: the
    facet's own, as `aspire search` and the benchmark's own runner encode them). The queries are searched on the
    encoder's device (their re-ranking), as `aspire search --device` searches them. Returns
    `{facet: {query: [candidate, ...]}}` best first, for the pool set's own scoring
    (`aspire.benchmarks.csfcube.evaluate_csfcube_rankings`). `record`: a list each encoding appends what it read or
    wrote to (`aspire.evaluate.encode.encode_papers`). `search`: the search config `pipeline_config(pipeline,
    model=...)` gave the caller (with the OT settings the model was trained with), else `pipeline`'s alone. A pooled
    paper `papers` lacks is a ValueError naming it, before any encoding."""
    from aspire.encoders.codes import query_code
    from aspire.evaluate.encode import encode_papers
    from aspire.evaluate.facets import facet_queries

    if search is None:  # one search config for every pool, checked before any encoding
        search = pipeline_config(pipeline)
    pool_set.check_texts(papers)  # after the settings were checked
    ordered = [papers[pid] for pid in sorted(pool_set.paper_ids())]
    record = [] if record is None else record
    batch, _ = encode_papers(encoder, ordered, "contextual", cache_dir, batch_size, record=record)
    batch = _searchable(batch, ordered)
    row, titles = {p.paper_id: i for i, p in enumerate(ordered)}, {p.paper_id: p.title for p in ordered}
    fingerprint = record[-1]["fingerprint"]
    rankings: dict[str, dict[str, list[str]]] = {}
    for facet in pool_set.facets:
        if facet and label_to_facet is None:
            raise ValueError(f"facet {facet!r} needs a label_to_facet mapping")
        pools = pool_set.pools[facet]
        code = query_code(getattr(encoder, "codes", ()), facet_code, facet)
        if code:  # the queries again, with their facet's code; the candidates keep the model's code
            asked = [papers[q] for q in pools]
            with encoder.using_code(code):
                coded, _ = encode_papers(encoder, asked, "contextual", cache_dir, batch_size, record=record)
            queries = _searchable(coded, asked)
        else:
            queries = batch.index([row[q] for q in pools])
        if facet:
            queries = facet_queries(queries, papers, facet, label_to_facet)
        queries = queries.to(encoder.device)  # encoded on the CPU (`encode`) or read from the cache
        rankings[facet] = {}
        for i, (qid, pool) in enumerate(pools.items()):
            hits = _search_all(batch, row, titles, queries.index([i]), list(pool), search, fingerprint,
                               f"query {qid} ({facet})", encoder_include_title(encoder))[0]
            rankings[facet][qid] = [pid for pid, _ in hits]
    return rankings


def load_search_encoder(model: str, encoder, encoder_options: dict | None, device: str | None) -> tuple[object, dict]:
    """(the given `encoder` (moved to `device`, when one is given), else `model` loaded with `encoder_options` on
    `device`; what the results record beside the model: the encoder's `loaded_checkpoint`, given or loaded here (for
    a training run's folder, the checkpoint it loaded; else {}))."""
    if encoder is None:
        from aspire.encoders import load_encoder

        encoder = load_encoder(model, device=device, **dict(encoder_options or {}))
    elif device is not None:
        encoder = encoder.to(device)
    # from the read of the run's pointer that picked the weights, here or where the given encoder was loaded
    return encoder, encoder.loaded_checkpoint


def _searchable(batch, papers):
    """`batch` (encoded `papers`, in order) carrying the sentence texts an index keeps beside the vectors: the
    encoder's own, as `aspire index build` keeps them (with `include_title` the title is sentence 0; the papers'
    abstract sentences alone once misaligned every text and facet mask by one, and the index build failed)."""
    from aspire.batch import DocBatch

    lengths = batch.lengths.tolist()
    texts = batch.sentences or [p.sentences for p in papers]  # an encoder that returns no texts: the papers'
    return DocBatch(batch.emb, batch.mask, [p.paper_id for p in papers],
                    [list(s[:n]) for s, n in zip(texts, lengths)], batch.whole)


def _search_all(batch, row: Mapping[str, int], titles: Mapping[str, str], query_rows, candidates: Sequence[str],
                search, fingerprint: str, what: str, include_title: bool) -> list[list[tuple[str, float]]]:
    """Each query (`query_rows`: a DocBatch of queries) searched with `search` over an index of `candidates`
    alone (flat; distinct ids, each indexed once), all of them ranked: `[[(candidate, score), ...] best first,
    ...]`, one list a query (empty for no candidates, as the benchmarks' own runners rank an empty pool).
    `include_title`: the encoder's, recorded by the index (its BM25 and cross-encoder texts read the title once)."""
    from aspire.index.corpus import EncodedCorpus

    if not candidates:  # nothing to index (an index of no paper cannot be built)
        return [[] for _ in range(query_rows.emb.shape[0])]
    corpus = EncodedCorpus.from_docbatch(batch.index([row[c] for c in candidates]), [titles[c] for c in candidates])
    searcher = Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), fingerprint,
                                            include_title=include_title), search)
    out = []
    for i in range(query_rows.emb.shape[0]):
        hits = searcher.search(query_rows.index([i]), k=len(candidates), shortlist=len(candidates), exclude=[])
        if len(hits) != len(candidates):
            raise ValueError(f"{what}: the search ranked {len(hits)} of its {len(candidates)} candidates")
        out.append([(hit.paper_id, hit.score) for hit in hits])
    return out


def run_reviewers_search(rset, out, exp: str, model: str, pipeline: Sequence[str] = (), agg: str = "max",
                         encoder=None, encoder_options: dict | None = None, cache_dir=None,
                         batch_size: int = 32, device: str | None = None) -> dict:
    """Reviewer matching answered by the `Searcher`: every paper encoded once (contextual, through the vector
    cache); for each draw and reviewer, their archive papers indexed on their own and each rated submission (its
    whole abstract) searched with `pipeline` (search-config overrides) for all of them; the hit scores
    aggregated over the archive by `agg` and scored as `aspire.evaluate.reviewer_run.run_reviewers` scores.
    `device`: the torch device the model is loaded on (None: the CPU, or where the given `encoder` is); the
    submissions are searched on the encoder's device."""
    import torch

    from aspire.evaluate.encode import encode_papers
    from aspire.evaluate.rank import run_record
    from aspire.evaluate.reviewer_run import parse_aggregate, predict, reviewer_papers, write_reviewer_results

    parse_aggregate(agg)
    search = pipeline_config(pipeline, {k: "every archive is ranked whole" for k in POOL_KEYS}, model)  # before encoding
    encoder, loaded = load_search_encoder(model, encoder, encoder_options, device)
    t0 = time.perf_counter()
    papers, counts = reviewer_papers(rset)
    encoded: list[dict] = []
    batch, _ = encode_papers(encoder, papers, "contextual", cache_dir, batch_size, record=encoded)
    batch = _searchable(batch, papers)
    row, titles = {p.paper_id: i for i, p in enumerate(papers)}, {p.paper_id: p.title for p in papers}
    fingerprint = encoded[0]["fingerprint"]

    def sims(subs: list[str], arch: list[str]) -> torch.Tensor:
        distinct = list(dict.fromkeys(arch))  # an index holds a paper once; one listed twice fills both its columns
        ranked = _search_all(batch, row, titles, batch.index([row[s] for s in subs]).to(encoder.device), distinct,
                             search, fingerprint,
                             f"submissions {subs[:2]}... against an archive of {len(distinct)} papers",
                             encoder_include_title(encoder))
        columns: dict[str, list[int]] = {}
        for j, a in enumerate(arch):
            columns.setdefault(a, []).append(j)
        table = torch.full((len(subs), len(arch)), float("nan"))
        for i, hits in enumerate(ranked):
            for pid, score in hits:
                table[i, columns[pid]] = score
        return table

    preds = predict(rset, {p.paper_id for p in papers}, sims, agg)
    info = {"model": str(model), **loaded, "encoder_fingerprint": fingerprint, "aggregate": agg,
            "run_record": run_record(encoder, encoder.device, batch_size, cache_dir, encoded),  # the submissions
            # are searched (re-ranked) on the encoder's device
            "search": {"stages": search.stages, "fuse": search.fuse, "rerank": search.rerank,
                       "overrides": list(pipeline), "index": "flat, one a reviewer's archive in a draw",
                       # k and shortlist: each archive's size (ranked whole)
                       "config": {**asdict(search), "k": "archive size", "shortlist": "archive size"}}}
    return write_reviewer_results(rset, Path(out), exp, preds, info, counts, t0)
