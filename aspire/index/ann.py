"""Making, training and filling the faiss structure over all sentence vectors (L2), batch by batch.

The same three steps serve an index built from vectors in RAM (`build_faiss`) and one streamed from
shards (`aspire.index.stream`), so the two give the same faiss index for the same config and seed, except an
HNSW graph: faiss inserts the rows of one `add` call level by level in a shuffled order, so its links depend on
how the rows were split into calls (shards, `batch`), and its searches (approximate) can differ:

    new_faiss(config, n, d)      the empty structure `config` resolves to at n vectors: flat, HNSW, IVF(-PQ)
    train_faiss(index, sample)   IVF: coarse k-means on the sample, then (IVF-PQ) the product quantizer
    add_vectors(index, batch)    append a batch (rows keep their order: faiss row r = sentence row r)

The IVF coarse step (k-means while training, and assigning every added vector to its list) runs in
torch, not in faiss: it is the same exact nearest-centroid search, but faiss's bundled BLAS was 3x
slower than torch's on the 2-core machine (20,000 vectors against 16,384 centroids: 12.6 s in faiss,
4.2 s in torch; experiments/results/bench_million.md). The vectors then enter faiss with their lists
given (`IndexIVF.add_core`). Product-quantizer training and encoding stay in faiss.

IVF-PQ indexes never build faiss's precomputed distance tables (nlist x pq_m x 2^nbits floats: 1 GiB
at nlist 16,384, pq_m 64): a query computes its tables per probed list instead, which costs little
at the nprobe values used here. `read_faiss` loads an index without them.
"""

from __future__ import annotations

import math

import faiss
import numpy as np
import torch

from aspire.config import check_ranges, is_whole
from aspire.index.config import IndexConfig

KMEANS_ITERS = 10  # faiss's default for an IVF coarse quantizer
_CHUNK = 8192  # vectors per torch distance block (8192 x nlist floats)


def resolve_kind(config: IndexConfig, n_sentences: int) -> str:
    """The faiss structure `config` asks for at this size: "flat", "hnsw" or "ivf"; ValueError listing the valid
    kinds for another `config.kind`."""
    if config.kind == "auto":
        return "flat" if n_sentences <= config.flat_max_sentences else "ivf"
    if config.kind not in ("flat", "hnsw", "ivf"):  # was returned as the kind, unchecked
        raise ValueError(f"unknown index kind {config.kind!r}; valid kinds: ['auto', 'flat', 'hnsw', 'ivf']")
    return config.kind


def outgrown(config: IndexConfig, kind: str, index, n_sentences: int) -> str | None:
    """What an index grown by `aspire index add` to `n_sentences` vectors is no longer, where `config` would build
    another structure at that size: a flat index (`kind: auto`) past `flat_max_sentences`, where a build makes an
    IVF one, or an IVF index whose list count (`ivf_nlist: 0`) is under half what a build at this size trains. An
    add keeps the built structure (its lists trained on the first corpus); None when nothing has been outgrown."""
    if config.kind == "auto" and kind == "flat" and resolve_kind(config, n_sentences) == "ivf":
        return (f"the index holds {n_sentences} sentence vectors, past index.flat_max_sentences "
                f"({config.flat_max_sentences}) where kind auto builds an IVF index; adding kept it flat (exact, "
                "each query reads every vector)")
    ivf = faiss.try_extract_index_ivf(index) if kind == "ivf" and config.ivf_nlist == 0 else None
    wanted = ivf_lists(config, n_sentences)
    if ivf is not None and 2 * ivf.nlist < wanted:
        return (f"the IVF index holds {n_sentences} sentence vectors in the {ivf.nlist} lists trained on its first "
                f"corpus; a build at this size trains {wanted} (ivf_nlist 0), so each query visits more vectors a list")
    return None


def ivf_lists(config: IndexConfig, n: int) -> int:
    """nlist of an IVF index over `n` vectors: the config's, or, when it is 0, about 4 * sqrt(n), at most one
    list a training vector (min(n, ivf_train_size)): a corpus under 16 sentence vectors gets one list a vector."""
    return config.ivf_nlist or max(1, min(int(4 * math.sqrt(max(n, 1))), n, config.ivf_train_size))


def new_faiss(config: IndexConfig, n: int, d: int) -> tuple[faiss.Index, str]:
    """The empty faiss L2 structure `config` resolves to for `n` vectors of dimension `d`; (index, kind).

    Raises ConfigError for a key outside its range (a config made in Python is checked as a file is: faiss
    crashes the process on some, e.g. `hnsw_m` < 2) and ValueError naming the `index.` key when the IVF(-PQ)
    settings do not fit `n` vectors (`check_ivf_fits`), before any training."""
    check_ranges(config, "index")
    kind = resolve_kind(config, n)
    if kind == "flat":
        return faiss.IndexFlatL2(d), kind
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, config.hnsw_m)
        index.hnsw.efConstruction = config.hnsw_ef_construction
        index.hnsw.efSearch = config.hnsw_ef_search
        return index, kind
    nlist = ivf_lists(config, n)
    check_ivf_fits(config, nlist, n, d)
    quantizer = faiss.IndexFlatL2(d)
    if config.pq_m > 0:
        index = faiss.IndexIVFPQ(quantizer, d, nlist, config.pq_m, config.pq_nbits)
        index.use_precomputed_table = -1  # never build the nlist x pq_m x 2^nbits table (see above)
        index.pq.cp.seed = config.seed
    else:
        index = faiss.IndexIVFFlat(quantizer, d, nlist)
    index.nprobe = config.ivf_nprobe
    return index, kind


def check_ivf_fits(config: IndexConfig, nlist: int, n: int, d: int | None, most: bool = False) -> None:
    """ValueError naming the `index.` keys when an IVF index of `nlist` lists (and `config`'s PQ) cannot be made over
    `n` vectors of dimension `d`: more lists than vectors or training vectors, a `pq_m` that does not divide `d`,
    more PQ centroids (2^pq_nbits) than training vectors (faiss fails there with a traceback, after the k-means).
    `most`: `n` is the most vectors the corpus can give, before it is encoded (`check_ivf_fits_before_encoding`);
    `d` None: not known yet, not checked."""
    trained = min(n, config.ivf_train_size)  # the vectors k-means and the PQ train on (`train_rows`)
    has = f"at most {n}" if most else str(n)
    if nlist > n:
        raise ValueError(f"index.ivf_nlist={nlist}: an IVF index needs at least one sentence vector a list and the "
                         f"corpus has {has}; lower index.ivf_nlist (0 picks it from the corpus size) or use index.kind=flat")
    if nlist > trained:
        raise ValueError(f"index.ivf_nlist={nlist}: the coarse k-means needs at least one training vector a list and "
                         f"index.ivf_train_size={config.ivf_train_size} samples {trained}; raise index.ivf_train_size "
                         "or lower index.ivf_nlist")
    if config.pq_m > 0 and d is not None and d % config.pq_m:
        raise ValueError(f"index.pq_m={config.pq_m} must divide the vector dimension {d}")
    if config.pq_m > 0 and 2**config.pq_nbits > trained:
        raise ValueError(f"index.pq_nbits={config.pq_nbits}: IVF-PQ trains 2^{config.pq_nbits} = {2**config.pq_nbits} "
                         f"centroids a sub-quantizer on at least as many vectors and has {'at most ' if most else ''}"
                         f"{trained} (corpus {has}, index.ivf_train_size={config.ivf_train_size}); lower "
                         "index.pq_nbits, or use index.pq_m=0 (IVF-Flat)")


def check_ivf_fits_before_encoding(config: IndexConfig, most: int, d: int | None) -> None:
    """`check_ivf_fits` for a build that will ask for an IVF index (`config.kind` "ivf"), called before the corpus is
    encoded: `most`, the most sentence vectors the corpus can give (each paper read, with its title; the encoding
    rejects papers, never adds vectors), and `d`, the encoder's dimension (None: not known). An IVF index that cannot
    be made over `most` vectors cannot be made over fewer, so what would be refused after the whole corpus was
    encoded (configs/index-large.yaml's 16,384 lists over a sample of a few thousand sentences, a `pq_m` that does not
    divide the model's dimension) is refused before. `kind: auto` is left to the build: it may resolve to flat."""
    if config.kind == "ivf":
        check_ivf_fits(config, ivf_lists(config, most), most, d, most=True)


def train_rows(n: int, config: IndexConfig) -> np.ndarray | None:
    """Which of `n` rows train an IVF index (positions, in the order training sees them), or None for all."""
    if n <= config.ivf_train_size:
        return None
    return np.random.default_rng(config.seed).choice(n, config.ivf_train_size, replace=False)


def train_faiss(index: faiss.Index, sample: np.ndarray, config: IndexConfig, rows: np.ndarray | None = None) -> None:
    """Train an untrained IVF index on `sample (n, D)`: coarse k-means in torch, then faiss trains the
    product quantizer (IVF-PQ) on the residuals. Flat and HNSW indexes need no training. `rows (n,)`: the row of
    the vectors each sample row was drawn from (`train_rows`), which a NaN or infinity is named by (`check_finite`);
    None: the sample is rows 0..n-1.

    Few rows: the coarse k-means needs one a list (fewer: ValueError, `check_ivf_fits` says so at `new_faiss`) and,
    unlike faiss's, says nothing below 39 a list; faiss's PQ training prints its own warning below 39 x 2^pq_nbits
    rows and fails below 2^pq_nbits (`check_ivf_fits` refuses that first). ValueError when `sample` is not
    (n, index.d)."""
    if index.is_trained:
        return
    sample = np.ascontiguousarray(sample, dtype=np.float32)
    _check_shape(index, sample, "the training sample")
    check_finite(sample, "the training sample", rows=rows)
    ivf = faiss.extract_index_ivf(index)
    ivf.quantizer.add(kmeans(sample, ivf.nlist, config.seed))  # a full quantizer: faiss skips its own k-means
    index.train(sample)


def add_vectors(index: faiss.Index, vectors: np.ndarray, batch: int = 65536) -> None:
    """Append `vectors (n, D)` (any float dtype) to a trained index (ValueError for an untrained one), `batch` rows at a time; IVF lists
    are assigned in torch (`assign_nearest`). NonFiniteVectors (a ValueError) naming every row of `vectors` that
    holds NaN or infinity as float32, when one does (the batches before the first such row's are added), and,
    before any is added, when `vectors` is not (n, index.d) or `batch` is not a positive integer."""
    if not is_whole(batch, 1):
        # a negative batch added nothing, silently (an empty range); 0 failed in range()
        raise ValueError(f"add_vectors: batch must be a positive integer, got {batch!r}")
    _check_shape(index, vectors, "the vectors added")
    if not index.is_trained:  # faiss failed in reconstruct_n with an assertion about ntotal
        raise ValueError(f"add_vectors: the {faiss_kind(index) or type(index).__name__} index is not trained; "
                         "train it first (train_faiss)")
    ivf = faiss.try_extract_index_ivf(index)
    centroids = ivf.quantizer.reconstruct_n(0, ivf.nlist) if ivf is not None else None  # (nlist, D)
    for start in range(0, len(vectors), batch):
        x = np.ascontiguousarray(vectors[start : start + batch], dtype=np.float32)
        if len(nonfinite_rows(x)):  # name every such row of `vectors`, not only this batch's (an error path)
            bad = [nonfinite_rows(x) + start] + [nonfinite_rows(np.asarray(vectors[s : s + batch], dtype=np.float32)) + s
                                                 for s in range(start + batch, len(vectors), batch)]
            _raise_nonfinite(np.concatenate(bad), "the vectors added")
        if centroids is None:
            index.add(x)
        else:
            lists = assign_nearest(centroids, x)
            index.add_core(len(x), faiss.swig_ptr(x), None, faiss.swig_ptr(lists))


def _check_shape(index: faiss.Index, x: np.ndarray, what: str) -> None:
    """ValueError unless `x`, `what`, is (n, index.d): faiss's `add_core` reads n x index.d floats whatever x's width
    (a narrower batch into a one-list IVF index was added from memory past its end), and its wrappers assert bare."""
    shape = np.shape(x)
    if len(shape) != 2 or shape[1] != index.d:
        raise ValueError(f"{what}: expected (n, {index.d}) vectors of the index's dimension {index.d}, got shape "
                         f"{tuple(shape)}")


def nonfinite_rows(x: np.ndarray) -> np.ndarray:
    """Positions of the rows of `x (n, D)` holding NaN or an infinity."""
    return np.flatnonzero(~np.isfinite(x).all(axis=1))


class NonFiniteVectors(ValueError):
    """Sentence vectors holding NaN or an infinity (`check_finite`); `rows`: every one of them, by its row number."""

    def __init__(self, message: str, rows: np.ndarray) -> None:
        super().__init__(message)
        self.rows = rows


def check_finite(x: np.ndarray, what: str, first_row: int = 0, rows: np.ndarray | None = None) -> None:
    """NonFiniteVectors (a ValueError) naming the rows of `x (n, D)`, part of `what`, that hold NaN or an infinity,
    numbered from `first_row`, or by `rows (n,)`, the row number of each of x's rows (a sample's rows in the vectors
    it was drawn from): faiss never returns such a vector (its paper would be left out of every ranking unsaid), and
    one in an IVF training sample turns centroids to NaN, so that searches find nothing."""
    bad = nonfinite_rows(x)
    if len(bad):
        _raise_nonfinite(bad + first_row if rows is None else np.sort(np.asarray(rows)[bad]), what)


def _raise_nonfinite(bad: np.ndarray, what: str) -> None:
    """NonFiniteVectors naming the rows `bad (m,)`, ascending, of `what`."""
    raise NonFiniteVectors(f"{len(bad)} sentence vector(s) of {what} hold NaN or infinite values (rows "
                           f"{bad[:10].tolist()}{' ...' if len(bad) > 10 else ''}); an index cannot rank them: "
                           "re-encode those papers", bad)


def assign_nearest(centroids: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(n,) int64 position of the nearest of `centroids (k, D)` (L2) for each row of `x (n, D)`, the lowest on a tie.

    One float32 GEMM a block of rows ranks the centroids (|c|^2 - 2 x.c; |x|^2 is common to a row); its last bits
    depend on the rows it is batched with, so a row whose runner-up lies within the GEMM's rounding error
    (`_gemm_slack`) of its nearest is settled by exact float64 distances to those candidates (`_exact_nearest`).
    A row's list thus never depends on the batch or block it comes in (an index merged shard by shard has the
    lists of one built at once) and is the nearest centroid by exact distance."""
    c = torch.from_numpy(np.ascontiguousarray(centroids, dtype=np.float32))
    out = np.zeros(len(x), dtype=np.int64)
    if len(c) < 2:
        return out
    c_sq = (c * c).sum(1)  # (k,)
    c64 = c.numpy().astype(np.float64)  # (k, D)
    slack, c_sq_max = _gemm_slack(c.shape[1]), float(c_sq.max())
    for start in range(0, len(x), _CHUNK):
        xb = torch.from_numpy(np.ascontiguousarray(x[start : start + _CHUNK], dtype=np.float32))
        dist = c_sq[None, :] - 2.0 * (xb @ c.T)  # (b, k)
        two, pick = torch.topk(dist, 2, dim=1, largest=False)  # (b, 2) the nearest and the runner-up
        bound = two[:, 0] + slack * ((xb * xb).sum(1) + c_sq_max)  # (b,) distances within rounding of the nearest
        tied = torch.nonzero(two[:, 1] <= bound).flatten()
        pick = pick[:, 0].numpy()
        if len(tied):
            near = dist[tied] <= bound[tied, None]  # (t, k)
            candidates = torch.topk(dist[tied], int(near.sum(1).max()), dim=1, largest=False).indices  # (t, m)
            candidates = torch.sort(candidates, dim=1).values  # ascending positions: the lowest wins a tie
            rows = tied.numpy()
            pick[rows] = _exact_nearest(c64, xb.numpy()[rows], candidates.numpy(),
                                        torch.gather(near, 1, candidates).numpy())
        out[start : start + len(xb)] = pick
    return out


def _gemm_slack(d: int) -> float:
    """Twice the worst rounding error of a float32 |c|^2 - 2 x.c over `d` dimensions, as a fraction of
    |x|^2 + max |c|^2 (error <= 2 d u (|x|^2 + |c|^2) with u = 2^-24; two distances compared)."""
    return 8.0 * (d + 2) * 2.0**-24


def _exact_nearest(c64: np.ndarray, x: np.ndarray, candidates: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(t,) for each row of `x (t, D)`: of its `candidates (t, m)` (ascending positions in `c64 (k, D)`) where
    `valid (t, m)`, the first with the least float64 squared distance (each row reduced alone, in one order)."""
    out = np.empty(len(x), dtype=np.int64)
    for start in range(0, len(x), 1024):
        xr = x[start : start + 1024].astype(np.float64)  # (r, D)
        cand = candidates[start : start + 1024]
        exact = np.full(cand.shape, np.inf)  # (r, m)
        for j in range(cand.shape[1]):
            diff = xr - c64[cand[:, j]]  # (r, D)
            exact[:, j] = np.where(valid[start : start + 1024, j], (diff * diff).sum(1), np.inf)
        out[start : start + len(xr)] = cand[np.arange(len(xr)), np.argmin(exact, axis=1)]
    return out


def kmeans(x: np.ndarray, k: int, seed: int, iters: int = KMEANS_ITERS) -> np.ndarray:
    """(k, D) float32 centroids of `x (n, D)` by Lloyd's algorithm, as faiss clusters: k distinct rows
    drawn at random to start, `iters` rounds of assign and average, and a centroid left without points
    replaced by splitting a populated one (picked in proportion to its size) in two."""
    n = len(x)
    if n < k:
        raise ValueError(f"k-means with k={k} needs at least that many training vectors, got {n}")
    rng = np.random.default_rng(seed)
    centroids = np.ascontiguousarray(x[np.sort(rng.choice(n, k, replace=False))], dtype=np.float32)
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    for _ in range(iters):
        lists = assign_nearest(centroids, x)  # (n,)
        counts = np.bincount(lists, minlength=k)
        sums = torch.zeros(k, x.shape[1]).index_add_(0, torch.from_numpy(lists), xt).numpy()  # (k, D)
        full = counts > 0
        centroids[full] = sums[full] / counts[full, None]
        for empty in np.flatnonzero(~full).tolist():  # split a populated centroid, as faiss does
            donor = int(rng.choice(k, p=np.maximum(counts - 1, 0) / max(int(np.maximum(counts - 1, 0).sum()), 1)))
            nudge = np.where(np.arange(x.shape[1]) % 2 == 0, 1 / 1024, -1 / 1024).astype(np.float32)
            centroids[empty], centroids[donor] = centroids[donor] * (1 + nudge), centroids[donor] * (1 - nudge)
            counts[empty] = counts[donor] // 2
            counts[donor] -= counts[empty]
    return centroids


def build_faiss(vectors: np.ndarray, config: IndexConfig) -> tuple[faiss.Index, str]:
    """A faiss L2 index over `vectors (N, D)` of the kind `config` resolves to; returns (index, kind)."""
    n, d = vectors.shape
    index, kind = new_faiss(config, n, d)
    if not index.is_trained:
        rows = train_rows(n, config)
        train_faiss(index, vectors if rows is None else vectors[rows], config, rows)
    add_vectors(index, vectors)
    return index, kind


def read_faiss(path: str) -> faiss.Index:
    """A saved faiss index, IVF-PQ without precomputed distance tables (see above)."""
    return faiss.read_index(path, faiss.IO_FLAG_SKIP_PRECOMPUTE_TABLE)


def faiss_kind(index) -> str | None:
    """The kind ("flat", "hnsw", "ivf": `resolve_kind`'s names) of the faiss L2 structure `index`, None for another
    (an inner-product one, too: its scores would be read as L2 distances)."""
    if index.metric_type != faiss.METRIC_L2:
        return None
    if faiss.try_extract_index_ivf(index) is not None:  # IVF-Flat and IVF-PQ
        return "ivf"
    if isinstance(index, faiss.IndexHNSW):
        return "hnsw"
    return "flat" if isinstance(index, faiss.IndexFlat) else None


def faiss_bytes(index) -> int:
    """About how many bytes `index` takes when written, at least: its codes, plus the ids of an IVF index
    and the level-0 links of an HNSW one."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        return int(index.ntotal) * (ivf.code_size + 8)
    if hasattr(index, "hnsw"):
        codes = faiss.downcast_index(index.storage)
        return int(index.ntotal) * (codes.sa_code_size() + 4 * index.hnsw.nb_neighbors(0))
    try:
        return int(index.ntotal) * index.sa_code_size()
    except RuntimeError:  # a structure without a standalone codec: count float32 vectors
        return int(index.ntotal) * 4 * index.d
