"""Round 42: aspire.index.ann against numpy brute force and faiss's own serialization (small random vectors)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from aspire.index import ann
from aspire.index.config import IndexConfig


def _vectors(n: int = 300, d: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _sq_dist(q: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(nq, n) float64 squared L2 distances of the float32 values."""
    q, x = np.asarray(q, np.float32).astype(np.float64), np.asarray(x, np.float32).astype(np.float64)
    return ((q[:, None, :] - x[None]) ** 2).sum(-1)


@pytest.mark.parametrize("batch", [100, 7, 300])
def test_add_vectors_names_every_nonfinite_row_of_the_vectors_not_only_the_first_bad_batchs(batch):
    x = _vectors()
    x[[5, 200]] = np.nan
    x[250, 3] = np.inf
    index, _ = ann.new_faiss(IndexConfig(kind="flat"), len(x), x.shape[1])
    with pytest.raises(ann.NonFiniteVectors, match=r"3 sentence vector\(s\) of the vectors added .*\[5, 200, 250\]") as e:
        ann.add_vectors(index, x, batch=batch)
    assert e.value.rows.tolist() == [5, 200, 250]
    assert index.ntotal == (5 // batch) * batch  # the batches before the first bad row's are added


def test_add_vectors_nonfinite_rows_after_a_clean_batch_are_all_named_and_the_clean_batch_added():
    x = _vectors()
    x[[150, 280]] = np.nan
    cfg = IndexConfig(kind="ivf", ivf_nlist=4)
    index, _ = ann.new_faiss(cfg, len(x), x.shape[1])
    ann.train_faiss(index, _vectors(seed=1), cfg)
    with pytest.raises(ann.NonFiniteVectors, match=r"2 sentence vector\(s\) .*\[150, 280\]") as e:
        ann.add_vectors(index, x, batch=100)
    assert e.value.rows.tolist() == [150, 280] and index.ntotal == 100


def test_resolve_kind_refuses_an_unknown_kind_listing_the_valid_ones():
    cfg = IndexConfig(kind="ivfx")  # a config made in Python is not checked against the Literal
    with pytest.raises(ValueError, match=r"unknown index kind 'ivfx'; valid kinds: \['auto', 'flat', 'hnsw', 'ivf'\]"):
        ann.resolve_kind(cfg, 10)
    with pytest.raises(ValueError, match="valid kinds"):
        ann.new_faiss(cfg, 10, 8)


def test_resolve_kind_as_documented():
    assert ann.resolve_kind(IndexConfig(kind="auto", flat_max_sentences=300), 300) == "flat"
    assert ann.resolve_kind(IndexConfig(kind="auto", flat_max_sentences=299), 300) == "ivf"
    for kind in ("flat", "hnsw", "ivf"):
        assert ann.resolve_kind(IndexConfig(kind=kind, flat_max_sentences=10**6), 5) == kind


def test_flat_search_is_numpy_brute_force():
    x, q = _vectors(), _vectors(7, seed=2)
    index, kind = ann.build_faiss(x, IndexConfig(kind="flat"))
    dist, ids = index.search(q, 20)
    ref = _sq_dist(q, x)
    assert kind == "flat"
    assert (ids == np.argsort(ref, axis=1, kind="stable")[:, :20]).all()
    np.testing.assert_allclose(dist, np.sort(ref, axis=1)[:, :20], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pq_m", [0, 4])
def test_ivf_at_nprobe_nlist_and_one_call_equals_batches(pq_m):
    x, q = _vectors(), _vectors(5, seed=3)
    cfg = IndexConfig(kind="ivf", ivf_nlist=8, ivf_nprobe=8, pq_m=pq_m, pq_nbits=5)
    one, _ = ann.new_faiss(cfg, len(x), x.shape[1])
    ann.train_faiss(one, x, cfg)
    split = faiss.clone_index(one)
    ann.add_vectors(one, x)
    ann.add_vectors(split, x, batch=13)
    assert faiss.serialize_index(one).tobytes() == faiss.serialize_index(split).tobytes()
    if pq_m == 0:  # IVF-Flat visiting every list: exact
        _, ids = one.search(q, 10)
        assert (ids == np.argsort(_sq_dist(q, x), axis=1, kind="stable")[:, :10]).all()


def test_ivf_lists_and_check_ivf_fits_name_the_numbers():
    assert [ann.ivf_lists(IndexConfig(), n) for n in (1, 15, 16, 100, 10_000)] == [1, 15, 16, 40, 400]
    assert ann.ivf_lists(IndexConfig(ivf_train_size=50), 10_000) == 50
    assert ann.ivf_lists(IndexConfig(ivf_nlist=7), 10_000) == 7
    with pytest.raises(ValueError, match=r"ivf_nlist=50: .* the corpus has 20"):
        ann.new_faiss(IndexConfig(kind="ivf", ivf_nlist=50), 20, 8)
    with pytest.raises(ValueError, match=r"ivf_nlist=50: .*ivf_train_size=20 samples 20"):
        ann.new_faiss(IndexConfig(kind="ivf", ivf_nlist=50, ivf_train_size=20), 100, 8)
    with pytest.raises(ValueError, match=r"pq_m=3 must divide the vector dimension 8"):
        ann.new_faiss(IndexConfig(kind="ivf", ivf_nlist=2, pq_m=3), 100, 8)
    with pytest.raises(ValueError, match=r"2\^8 = 256 centroids .* has 100"):
        ann.new_faiss(IndexConfig(kind="ivf", ivf_nlist=2, pq_m=2), 100, 8)


def test_train_rows_deterministic_and_never_repeating():
    cfg = IndexConfig(ivf_train_size=100, seed=3)
    rows = ann.train_rows(1000, cfg)
    assert (rows == ann.train_rows(1000, cfg)).all() and len(set(rows.tolist())) == 100
    assert rows.min() >= 0 and rows.max() < 1000
    assert ann.train_rows(100, cfg) is None
    assert not (rows == ann.train_rows(1000, IndexConfig(ivf_train_size=100, seed=4))).all()


def test_assign_nearest_and_kmeans_against_numpy():
    rng = np.random.default_rng(4)
    for offset in (0.0, 1e4):  # far from the origin, the float32 GEMM cancels most bits: exact ties settle it
        c = (rng.standard_normal((32, 24)) + offset).astype(np.float32)
        x = np.vstack([(rng.standard_normal((300, 24)) * 0.01 + offset), (c[:31] + c[1:]) / 2]).astype(np.float32)
        assert (ann.assign_nearest(c, x) == np.argmin(_sq_dist(x, c), axis=1)).all()
    c = np.vstack([np.ones((3, 8)), np.zeros((2, 8))]).astype(np.float32)
    assert ann.assign_nearest(c, np.zeros((2, 8))).tolist() == [3, 3]  # the lowest on a tie
    x, k = _vectors(400, 8, seed=5), 6
    ref = x[np.sort(np.random.default_rng(9).choice(400, k, replace=False))].astype(np.float64)
    for _ in range(ann.KMEANS_ITERS):  # Lloyd's in float64 from the same start
        lists = np.argmin(_sq_dist(x, ref), axis=1)
        assert np.bincount(lists, minlength=k).min() > 0
        ref = np.stack([x[lists == j].astype(np.float64).mean(0) for j in range(k)])
    np.testing.assert_allclose(ann.kmeans(x, k, 9), ref, atol=1e-5)


@pytest.mark.parametrize("cfg", [IndexConfig(kind="flat"), IndexConfig(kind="hnsw", hnsw_m=8),
                                 IndexConfig(kind="ivf", ivf_nlist=8), IndexConfig(kind="ivf", ivf_nlist=8, pq_m=4,
                                                                                    pq_nbits=5)])
def test_faiss_kind_and_bytes_true_for_each_kind_after_a_reread(cfg, tmp_path):
    x = _vectors()
    index, kind = ann.build_faiss(x, cfg)
    path = str(tmp_path / "i.faiss")
    faiss.write_index(index, path)
    again = ann.read_faiss(path)
    for idx in (index, again):
        assert ann.faiss_kind(idx) == kind == cfg.kind
        assert 0 < ann.faiss_bytes(idx) <= len(faiss.serialize_index(idx))  # "at least" the codes
    assert ann.faiss_kind(faiss.IndexFlatIP(16)) is None


def test_add_vectors_names_float64_values_past_float32_range_in_every_batch():
    x = _vectors().astype(np.float64)
    x[[3, 250]] = 1e300  # finite in float64, infinity in the float32 faiss stores
    index, _ = ann.new_faiss(IndexConfig(kind="flat"), len(x), x.shape[1])
    with np.errstate(over="ignore"), pytest.raises(ann.NonFiniteVectors, match=r"2 sentence vector\(s\)") as e:
        ann.add_vectors(index, x, batch=100)
    assert e.value.rows.tolist() == [3, 250] and index.ntotal == 0
