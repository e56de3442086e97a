"""Configs for building a sentence index and searching it (nested dataclasses, see `aspire.config`).

`IndexBuildConfig` is what `configs/index*.yaml` hold and what is saved, resolved, beside every index:

    index:  which faiss structure stores the sentence vectors (flat / HNSW / IVF(-PQ))
    encode: how the corpus is encoded (batch size, papers per chunk)
    search: defaults for queries against this index (k, re-ranking, shortlist size)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class IndexConfig:
    """The faiss structure over all sentence vectors (L2 metric).

    kind: "flat" (exact), "hnsw", "ivf" (IVF-Flat, or IVF-PQ when `pq_m > 0`), or "auto":
        flat up to `flat_max_sentences` sentence vectors, ivf above.
    vector_dtype: dtype of the exact sentence vectors stored beside the faiss index (used for
        exact re-scoring, OT re-ranking and explanations); float16 halves their size.
    """

    kind: Literal["auto", "flat", "hnsw", "ivf"] = "auto"
    flat_max_sentences: int = 200_000
    hnsw_m: int = 32
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int = 128
    ivf_nlist: int = 0  # 0: about 4 * sqrt(number of sentence vectors)
    ivf_nprobe: int = 32
    ivf_train_size: int = 100_000  # sentence vectors sampled to train the coarse quantizer / PQ
    pq_m: int = 0  # 0: IVF-Flat; > 0: IVF-PQ with this many sub-quantizers (must divide D)
    pq_nbits: int = 8
    vector_dtype: Literal["float32", "float16"] = "float32"
    seed: int = 0


@dataclass
class EncodeConfig:
    """Corpus encoding: papers are encoded `chunk_papers` at a time (bounded memory, progress)."""

    batch_size: int = 32
    chunk_papers: int = 1024


@dataclass
class SearchConfig:
    """Query defaults.

    rerank: "none" ranks by the ANN single-match distances (exact L2 for flat, HNSW and IVF-Flat;
        approximate with IVF-PQ codes); "minl2" re-scores the shortlist with the exact min-L2
        scorer on the stored vectors; "ot" re-ranks it with the OT scorer (aspire.scoring).
    stages: the first stage: "ann" (the sentence index, single match), "bm25" (lexical, over each
        paper's title and sentences, the query's selected sentences as text) or "ann,bm25" (both,
        fused by `fuse`: `z:ALPHA` / `minmax:ALPHA`, weight ALPHA on ANN, or `rrf[:K]`).
    sentence_k: neighbours fetched per selected query sentence; 0 picks
        max(`sentence_k_min`, `sentence_k_factor` x (`shortlist` when re-ranking, else `k`)).
        A paper is found when one of its sentences is among some selected query sentence's
        `sentence_k` nearest, so larger values approach the exhaustive single-match ranking.
    """

    k: int = 10
    stages: Literal["ann", "bm25", "ann,bm25"] = "ann"
    fuse: str = "z:0.815"  # z-score fusion, 0.815 on the dense scores (the published setting)
    bm25_k1: float = 1.25
    bm25_b: float = 0.75
    rerank: Literal["none", "minl2", "ot"] = "none"
    shortlist: int = 1000
    sentence_k: int = 0
    sentence_k_factor: float = 1.0
    sentence_k_min: int = 100
    exclude_query: bool = True
    ot_tau: float = 1.0  # OT sentence-weight temperature (aspire.scoring.OTScorer)
    ot_eps: float = 0.05  # entropic regularisation
    ot_tol: float = 1e-4  # Sinkhorn marginal tolerance
    ot_max_iter: int = 1000


@dataclass
class IndexBuildConfig:
    index: IndexConfig = field(default_factory=IndexConfig)
    encode: EncodeConfig = field(default_factory=EncodeConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
