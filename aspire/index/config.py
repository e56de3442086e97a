"""Configs for building a sentence index and searching it (nested dataclasses, see `aspire.config`).

`IndexBuildConfig` is what `configs/index*.yaml` hold and what is saved, resolved, beside every index:

    index:  which faiss structure stores the sentence vectors (flat / HNSW / IVF(-PQ))
    encode: how the corpus is encoded (batch size, papers per chunk)
    search: defaults for queries against this index (k, re-ranking, shortlist size, the cross-encoder stage)
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Collection, Literal, Sequence, get_args, get_origin, get_type_hints

from aspire.config import ConfigError, apply_overrides, check_ranges, load_config, parse_overrides, ranged, read_yaml
from aspire.encoders.trained import trained_defaults


@dataclass
class IndexConfig:
    """The faiss structure over all sentence vectors (L2 metric).

    kind: "flat" (exact), "hnsw", "ivf" (IVF-Flat, or IVF-PQ when `pq_m > 0`), or "auto":
        flat up to `flat_max_sentences` sentence vectors, ivf above. Decided when the index is built: `aspire index
        add` keeps the structure (an IVF index its lists trained on the first corpus) and warns when the index has
        outgrown it (`aspire.index.ann.outgrown`); build it again to change it.
    vector_dtype: dtype of the exact sentence vectors stored beside the faiss index (used for
        exact re-scoring, OT re-ranking, exhaustive search and explanations); float16 halves their size,
        rounding each value to float16. The faiss structure is always built from the float32 vectors, so with
        float16 the first stage's distances (`rerank: none`) and the re-scored ones differ by that rounding.
    store_bm25: write the BM25 index into every saved generation. Off, an index holds no BM25 and a
        search that asks for the bm25 stage builds one first (`aspire.index.lexical.stored_bm25`);
        for millions of abstracts, where bm25s needs gigabytes and many minutes to build it
        (experiments/results/bench_million.md).
    """

    kind: Literal["auto", "flat", "hnsw", "ivf"] = "auto"
    flat_max_sentences: int = ranged(200_000, ge=0)
    hnsw_m: int = ranged(32, ge=2)  # faiss's HNSW crashes the process below 2 links a node
    hnsw_ef_construction: int = ranged(80, ge=1)
    hnsw_ef_search: int = ranged(128, ge=1)
    ivf_nlist: int = ranged(0, ge=0)  # 0: about 4 * sqrt(number of sentence vectors), at most one list a vector
    ivf_nprobe: int = ranged(32, ge=1)  # lists a query visits (nlist or more: every list, exact for IVF-Flat)
    ivf_train_size: int = ranged(100_000, ge=1)  # sentence vectors sampled to train the coarse quantizer / PQ
    pq_m: int = ranged(0, ge=0)  # 0: IVF-Flat; > 0: IVF-PQ with this many sub-quantizers (must divide D)
    pq_nbits: int = ranged(8, ge=1, le=24)  # bits a sub-quantizer code (faiss reads 1..24); 2^pq_nbits <= training vectors
    vector_dtype: Literal["float32", "float16"] = "float32"
    store_bm25: bool = True
    seed: int = ranged(0, ge=0, le=2**31 - 1)  # numpy and faiss (a C int) both take it


READING_LIMITS = ("max_sentences", "max_sentence_chars", "max_line_bytes")  # the EncodeConfig keys deciding the records

@dataclass
class EncodeConfig:
    """Corpus reading and encoding, bounded per paper (memory does not grow with the worst paper).

    Papers are encoded `chunk_papers` at a time, `batch_size` papers (and windows) a pass. The rule
    for an over-long paper is rejection with its reason (listed in `rejected.jsonl`), never silent
    truncation: a line longer than `max_line_bytes` (default 1 MiB) is skipped unread; a paper with
    more than `max_sentences` (default 1000) sentences or a sentence longer than
    `max_sentence_chars` (default 20,000 characters) is rejected. 0 lifts a limit.
    """

    batch_size: int = ranged(32, ge=1)
    chunk_papers: int = ranged(1024, ge=1)
    max_sentences: int = ranged(1000, ge=0)
    max_sentence_chars: int = ranged(20_000, ge=0)
    max_line_bytes: int = ranged(1 << 20, ge=0)
    # recorded by `aspire index build` from its --backend / --quantize (not read by encoding): the inference
    # backend and reduced precision the vectors were encoded with, which `aspire search` encodes its queries
    # with by default (None: not recorded, an index built before this key or through the Python API)
    backend: str | None = None
    quantize: str | None = None

    def encoder_options(self) -> dict:
        """The `load_encoder` keywords of the recorded backend and precision ({} for the exact torch model)."""
        if self.backend in (None, "torch") and self.quantize is None:
            return {}
        return {"backend": self.backend or "torch", "quantize": self.quantize}


# no re-rank, or a stage of aspire.retrieval.rerank.RERANK_STAGES: the names alone, so that the search options (and
# `aspire search --help`) load no torch; tests/test_recipes.py checks they are the registry's
RERANKERS = ("none", "minl2", "ot", "maxpassage", "hybrid")
STAGES = ("ann", "bm25", "ann,bm25", "whole")  # first stages (aspire.retrieval.lexical.first_stage): dense, BM25, fused, whole vector


@dataclass
class SearchConfig:
    """Query defaults.

    rerank: "none" ranks by the ANN single-match distances: each paper's smallest distance among the sentence
        pairs the lookup found (L2 distances exact for flat, HNSW and IVF-Flat, approximate with IVF-PQ codes;
        the pairs found are all of them for flat, while HNSW and IVF may miss a paper's nearest pair, so its
        score can lie above its exact minimum, which the hit's explanation, computed over all its pairs, shows:
        "minl2" makes them agree); "minl2" re-scores the shortlist with the exact min-L2
        scorer on the stored vectors; "ot" re-ranks it with the OT scorer (aspire.scoring);
        "maxpassage" by the best window of `passage_window` sentences, mixed with the first stage's
        score by weight `passage_beta` on the first stage (z-scores over the first stage's best
        `passage_depth`, the only papers it scores; the rest keep the first stage's order below them);
        "hybrid" by the hybrid aspect score (whole-abstract cosine + the selected sentences' cosine to each
        paper's whole vector; needs an index that stores whole vectors).
    stages: the first stage: "ann" (the sentence index, single match), "bm25" (lexical, over each
        paper's title and sentences, the query's selected sentences as text) or "ann,bm25" (both,
        fused by `fuse`: `z:ALPHA` / `minmax:ALPHA`, weight ALPHA on ANN, or `rrf[:K]`) or "whole" (the
        cosine of the query's and each paper's whole-abstract vectors, exact; needs an index storing them).
        The fused stage fuses each stage's best `shortlist` papers (at least k), re-ranked or not
        (`aspire.retrieval.lexical.first_stage_depth`): a list's normalisation reads its depth, and lists k deep
        ranked the k best of one query otherwise at each k (the top 10 of k=10 were not those of k=50).
    shortlist: the papers the first stage passes to a re-ranker, and the depth of each list the fused stage fuses.
    sentence_k: neighbours fetched per selected query sentence; 0 picks
        max(`sentence_k_min`, `sentence_k_factor` x (`shortlist` when re-ranking or fusing, else `k`, plus the number
        of excluded papers)); either way the excluded papers' sentence count is added, and the lookups widen while
        they reach fewer papers than needed.
        A paper is found when one of its sentences is among some selected query sentence's
        `sentence_k` nearest, so larger values approach the exhaustive single-match ranking. With `rerank: none`
        after the ann stage alone the lookups also widen until the k-th paper is within every lookup's reach, so over
        a flat index the k papers and their distances are the exhaustive single match's
        (`aspire.search.Searcher.retrieve`); a re-ranker's shortlist and the fused stage's list are not widened so, and a paper beyond the `sentence_k` nearest of the query sentence
        it is nearest to can miss it (`Searcher.exhaustive` ranks every paper exactly).
    cross_encoder: a final stage after the first stage and any re-rank (`aspire.retrieval.crossencoder`): a
        trained cross-encoder reads the query's selected sentences with each of the `cross_top` best
        papers' title and abstract; its logits are mixed with the previous score by `cross_weight`. The stages before
        it give `cross_top` papers: `k` and a re-ranker's `shortlist` grow to it (`aspire.search.cross_depth`).
    A key set for a stage the search does not run is read by nothing: `unused_settings` names such keys.
    """

    k: int = ranged(10, ge=1)
    stages: Literal[STAGES] = "ann"
    fuse: str = "z:0.815"  # z-score fusion, 0.815 on the dense scores (the published setting)
    bm25_k1: float = ranged(1.25, ge=0)
    bm25_b: float = ranged(0.75, ge=0, le=1)
    rerank: Literal[RERANKERS] = "none"  # one of RERANKERS (the registry of aspire.retrieval.rerank)
    shortlist: int = ranged(1000, ge=1)
    sentence_k: int = ranged(0, ge=0)
    sentence_k_factor: float = ranged(1.0, gt=0)
    sentence_k_min: int = ranged(100, ge=1)
    exclude_query: bool = True
    ot_tau: float = ranged(1.0, gt=0)  # OT sentence-weight temperature (aspire.scoring.OTScorer)
    ot_eps: float = ranged(0.05, gt=0)  # entropic regularisation
    ot_tol: float = ranged(1e-4, gt=0)  # Sinkhorn marginal tolerance
    ot_max_iter: int = ranged(1000, ge=1)
    passage_window: int = ranged(2, ge=1)  # sentences per passage of the maxpassage re-ranker (chosen on context2doc dev)
    passage_beta: float = ranged(0.9, ge=0, le=1)  # maxpassage: weight of the first stage's z-score (context2doc dev)
    passage_depth: int = ranged(100, ge=1)  # maxpassage scores the first stage's best this many (its cost; dev tuning's)
    cross_encoder: bool = False  # the cross-encoder stage; needs a loaded model (`--cross-encoder DIR`)
    cross_top: int = ranged(50, ge=1)  # papers of the previous stage's ranking the cross-encoder re-scores
    cross_weight: float = ranged(1.0, ge=0, le=1)  # weight of its z-scored logits (1: its order alone; 0: none)


def trained_search_config(search: SearchConfig, model: str, given: Collection[str] = ()) -> SearchConfig:
    """`search` with the OT settings `model` was trained with (`model.ot_tau`, `model.ot_eps` of a kind trained through
    the OT distance: `aspire.encoders.trained.trained_defaults`, said in one line) in `ot_tau` / `ot_eps` where
    `given` (the search keys a config file or an override set) names neither: the `ot` re-ranker then scores as the
    model was trained. A model without them (or trained at the defaults) leaves `search` as it is."""
    keys = {"tau": "ot_tau", "eps": "ot_eps"}
    asked = {kw: getattr(search, key) for kw, key in keys.items() if key in given}
    filled = trained_defaults(model, ["ot"], asked, flag="search.ot_{}")
    return replace(search, **{keys[kw]: value for kw, value in filled.items()})


def given_search_keys(path: str | Path | None, overrides: Sequence[str]) -> set[str]:
    """The `search` keys the YAML config at `path` (None: none) and the dotted `overrides` set."""
    from_file = read_yaml(path, cls=IndexBuildConfig).get("search") if path is not None else None
    from_overrides = parse_overrides(list(overrides), IndexBuildConfig).get("search")
    return {k for part in (from_file, from_overrides) if isinstance(part, dict) for k in part}


def _rerank_stages() -> dict:
    from aspire.retrieval.rerank import RERANK_STAGES

    return RERANK_STAGES


class SearchArgumentError(ValueError):
    """A search argument outside its valid range; the message names the argument and the range."""


def checked_search_config(base: SearchConfig, **changes) -> SearchConfig:
    """`base` with `changes` applied (None values leave a field as it is), every field checked.

    The one validation of search arguments for every entry point (Python API, CLI, page, server):
    `k`, `shortlist`, `sentence_k_min`, `ot_max_iter` >= 1 and `sentence_k` >= 0 (integers);
    `ot_tau`, `ot_eps`, `ot_tol`, `sentence_k_factor` finite and > 0; `bm25_k1` >= 0, `bm25_b`,
    `passage_beta`, `cross_weight` in [0, 1], `passage_window`, `passage_depth`, `cross_top` >= 1; `rerank` and `stages`
    one of their values; `fuse` a fusion `parse_fusion` reads, whatever the stages; `exclude_query` and `cross_encoder`
    True or False (a string such as "no" or a 0 / 1 is refused: "no" is true).
    Raises SearchArgumentError naming the first bad (or unknown) argument.
    """
    names = [f.name for f in fields(SearchConfig)]
    unknown = sorted(set(changes) - set(names))
    if unknown:
        raise SearchArgumentError(f"unknown search argument(s) {unknown}; valid: {names}")
    config = replace(base, **{k: v for k, v in changes.items() if v is not None})
    for name, tp in get_type_hints(SearchConfig).items():
        value = getattr(config, name)
        if (tp is bool and not isinstance(value, bool)) or (tp is str and not isinstance(value, str)):
            # else cross_encoder="no" turned the stage on (a non-empty string is true) and fuse=0.5 failed deep inside
            raise SearchArgumentError(f"{name}: must be {'True or False' if tp is bool else 'a string'}, "
                                      f"got {type(value).__name__} {value!r}")
        # rerank, stages: one of their values; rerank: the stage registry as it is now (a stage registered after
        # import counts too)
        valid = ("none", *_rerank_stages()) if name == "rerank" else get_args(tp)
        if get_origin(tp) is Literal and value not in valid:
            raise SearchArgumentError(f"{name}: unknown {name} {value!r}; valid: {list(valid)}")
    try:
        check_ranges(config)
    except ConfigError as err:
        raise SearchArgumentError(str(err)) from None
    from aspire.scoring.fusion import parse_fusion  # numpy only

    try:  # read only where two lists are fused: a bad one was accepted beside stages=ann
        parse_fusion(config.fuse)
    except ValueError as err:
        raise SearchArgumentError(f"fuse: {err}") from None
    return config


# the SearchConfig keys only some pipelines read: key -> (whether a search with that config reads it, which part does)
_READ_BY = {
    "fuse": (lambda c: c.stages == "ann,bm25", "the fused first stage (stages ann,bm25)"),
    **dict.fromkeys(("bm25_k1", "bm25_b"), (lambda c: "bm25" in c.stages.split(","), "a bm25 first stage")),
    **dict.fromkeys(("sentence_k", "sentence_k_factor", "sentence_k_min"),
                    (lambda c: "ann" in c.stages.split(","), "an ann first stage")),
    "shortlist": (lambda c: c.rerank != "none" or c.stages == "ann,bm25",
                  "a re-ranker (rerank other than none) and the fused first stage (stages ann,bm25)"),
    **dict.fromkeys(("ot_tau", "ot_eps", "ot_tol", "ot_max_iter"), (lambda c: c.rerank == "ot", "rerank ot")),
    **dict.fromkeys(("passage_window", "passage_beta", "passage_depth"),
                    (lambda c: c.rerank == "maxpassage", "rerank maxpassage")),
    **dict.fromkeys(("cross_top", "cross_weight"), (lambda c: c.cross_encoder, "the cross-encoder stage")),
}


def unused_settings(config: SearchConfig, keys: Sequence[str]) -> list[str]:
    """Of the SearchConfig `keys` a caller set, those a search with `config` reads nowhere (a setting of a stage the
    pipeline does not run), each as "KEY (read only by ...; this search runs stages S, rerank R)", for the caller to
    refuse or say: a setting silently unused looks applied."""
    out = []
    for key in keys:
        used, reader = _READ_BY.get(key, (lambda c: True, ""))
        if not used(config):
            out.append(f"{key} (read only by {reader}; this search runs stages {config.stages}, rerank "
                       f"{config.rerank}{', the cross-encoder stage' if config.cross_encoder else ''})")
    return out


def exhaustion_reason(kind: str, available: int) -> str:
    """Why a search returned fewer papers than asked: the index (of faiss `kind`, `available` papers
    besides the excluded ones) is that small, or its ANN structure reaches no more (IVF probes too few
    lists, HNSW's graph search stops): the `IndexConfig` key to raise (that kind's own)."""
    if kind == "flat":
        return f"the index holds {available} paper(s) besides the excluded ones"
    key = {"ivf": "index.ivf_nprobe", "hnsw": "index.hnsw_ef_search"}.get(kind, "index.ivf_nprobe or index.hnsw_ef_search")
    return (f"the {kind} index reached no more of its {available} paper(s); raise {key} "
            "when building it, or rerank from a smaller shortlist")


def check_selection(selection: Sequence[int] | None, n_sentences: int, paper: str = "the query") -> list[int] | None:
    """A query-sentence selection as a list of positions, checked against the paper's `n_sentences`:
    non-empty, integers (numpy's too), each in 0..n_sentences-1 (repeats are merged). None selects every sentence.
    Raises SearchArgumentError naming the paper and the bad positions."""
    if selection is None:
        return None
    chosen = list(selection)
    if not chosen:
        raise SearchArgumentError(f"sentences: the selection for {paper} is empty; give at least one position")
    bad_type = [j for j in chosen if isinstance(j, bool) or not isinstance(j, numbers.Integral)]
    if bad_type:
        raise SearchArgumentError(f"sentences: positions must be integers, got {bad_type[:5]}")
    bad = [j for j in chosen if not 0 <= j < n_sentences]
    if bad:
        raise SearchArgumentError(f"sentences: positions {bad[:10]} out of range 0..{n_sentences - 1} for {paper} "
                                  f"({n_sentences} sentence(s))")
    return sorted({int(j) for j in chosen})  # numpy integers (np.flatnonzero's) as plain ints


@dataclass
class IndexBuildConfig:
    index: IndexConfig = field(default_factory=IndexConfig)
    encode: EncodeConfig = field(default_factory=EncodeConfig)
    search: SearchConfig = field(default_factory=SearchConfig)


def check_search_overrides(index_dir: str | Path, generation: str, overrides: Sequence[str]) -> None:
    """The early check of `aspire search` / `serve`'s `search.key=value` overrides, before torch and faiss load:
    unknown keys, types, ranges and choices (ConfigError naming the key), against the search config saved in
    the index's live `generation`. A saved config that cannot be read is left to the index's own load, which
    says what is wrong with it."""
    if not overrides:
        return
    try:
        base = load_config(IndexBuildConfig, Path(index_dir) / generation / "config.yaml").search
    except (OSError, ValueError):
        return
    apply_overrides(base, overrides, "search")
