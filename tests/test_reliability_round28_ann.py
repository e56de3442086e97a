"""Round 28: the ANN layer (aspire.index.ann, aspire.index.config's IndexConfig) against exact search.

References: a float64 numpy brute-force L2 search, faiss's own IndexFlatL2 / IndexIVFFlat / Kmeans, and the IVF-PQ
index's own reconstructions."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from aspire.config import ConfigError, from_dict
from aspire.index.ann import (
    NonFiniteVectors,
    add_vectors,
    assign_nearest,
    build_faiss,
    kmeans,
    new_faiss,
    read_faiss,
    train_faiss,
)
from aspire.index.config import IndexBuildConfig, IndexConfig


def _data(n=2000, d=16, nq=40, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)).astype(np.float32), rng.standard_normal((nq, d)).astype(np.float32)


def _sq(a, b):
    """(len(a), len(b)) float64 squared L2 distances."""
    return ((a[:, None, :].astype(np.float64) - b[None].astype(np.float64)) ** 2).sum(-1)


def _recall(found, exact):
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact)]))


# ---- fixes -------------------------------------------------------------------------------------------------------

def test_add_vectors_refuses_vectors_of_another_width_before_adding():
    """A one-list IVF index skips the torch assignment, so faiss's add_core read n x 16 floats from an (n, 8) batch
    (memory past its end) and the index took 10 rows unsaid; flat raised a bare AssertionError, IVF a torch shape
    error."""
    rng = np.random.default_rng(0)
    one_list = IndexConfig(kind="ivf", ivf_nlist=1)
    index, _ = new_faiss(one_list, 100, 16)
    train_faiss(index, rng.standard_normal((100, 16)).astype(np.float32), one_list)
    narrow = rng.standard_normal((10, 8)).astype(np.float32)
    with pytest.raises(ValueError, match=r"expected \(n, 16\).*got shape \(10, 8\)"):
        add_vectors(index, narrow)
    assert index.ntotal == 0
    flat, _ = new_faiss(IndexConfig(kind="flat"), 10, 16)
    with pytest.raises(ValueError, match=r"got shape \(10, 8\)"):
        add_vectors(flat, narrow)
    with pytest.raises(ValueError, match=r"got shape \(16,\)"):
        add_vectors(flat, np.zeros(16, dtype=np.float32))
    assert flat.ntotal == 0


def test_add_vectors_refuses_a_batch_below_one():
    """batch=-5 added nothing and returned (range(0, n, -5) is empty); batch=0 failed inside range()."""
    flat, _ = new_faiss(IndexConfig(kind="flat"), 10, 4)
    x = np.ones((10, 4), dtype=np.float32)
    for batch in (-5, 0, 2.0, True):
        with pytest.raises(ValueError, match="batch must be a positive integer"):
            add_vectors(flat, x, batch=batch)
    assert flat.ntotal == 0
    add_vectors(flat, x, batch=np.int64(3))
    assert flat.ntotal == 10


def test_train_faiss_refuses_a_sample_of_another_width_before_kmeans():
    """The k-means ran on the wrong width, then faiss's quantizer.add raised a bare AssertionError."""
    cfg = IndexConfig(kind="ivf", ivf_nlist=4)
    index, _ = new_faiss(cfg, 100, 16)
    with pytest.raises(ValueError, match=r"training sample: expected \(n, 16\).*got shape \(100, 8\)"):
        train_faiss(index, np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32), cfg)
    assert not index.is_trained


def test_hnsw_graph_depends_on_the_add_calls_flat_and_ivf_do_not():
    """The module docstring's exception: one add of 3000 rows and two of 1000 + 2000 give another HNSW graph (as
    aspire.index.stream says), the same IVF lists and flat rows."""
    x, q = _data(3000, 16)
    for cfg in (IndexConfig(kind="hnsw", hnsw_m=4, hnsw_ef_construction=8),
                IndexConfig(kind="ivf", ivf_nlist=30, ivf_nprobe=2), IndexConfig(kind="flat")):
        one, kind = build_faiss(x, cfg)
        two, _ = new_faiss(cfg, len(x), x.shape[1])
        train_faiss(two, x, cfg)
        add_vectors(two, x[:1000])
        add_vectors(two, x[1000:])
        if kind == "hnsw":
            assert not np.array_equal(faiss.vector_to_array(one.hnsw.neighbors),
                                      faiss.vector_to_array(two.hnsw.neighbors))
        else:
            np.testing.assert_array_equal(one.search(q, 10)[1], two.search(q, 10)[1])


# ---- checked against references (these held before the round) ---------------------------------------------------

def test_every_kind_at_its_documented_settings_against_brute_force():
    x, q = _data()
    exact = np.argsort(_sq(q, x), axis=1, kind="stable")[:, :10]
    exact_d = np.sort(_sq(q, x), axis=1)[:, :10]
    for cfg, floor in ((IndexConfig(kind="flat"), 1.0), (IndexConfig(kind="hnsw"), 0.99),
                       (IndexConfig(kind="ivf"), 0.9), (IndexConfig(kind="auto"), 1.0)):
        index, kind = build_faiss(x, cfg)
        dist, rows = index.search(q, 10)
        assert _recall(rows, exact) >= floor, kind
        if kind == "flat":
            np.testing.assert_allclose(dist, exact_d, rtol=1e-5, atol=1e-4)
    assert build_faiss(x, IndexConfig(kind="auto", flat_max_sentences=len(x)))[1] == "flat"
    assert build_faiss(x, IndexConfig(kind="auto", flat_max_sentences=len(x) - 1))[1] == "ivf"


def test_ivf_searches_exactly_the_probed_lists_and_is_exact_at_nprobe_nlist(tmp_path):
    x, q = _data(3000, 8, seed=1)
    d0 = _sq(q, x)
    index, _ = build_faiss(x, IndexConfig(kind="ivf", ivf_nlist=20, ivf_nprobe=3))
    ivf = faiss.extract_index_ivf(index)
    assert (ivf.nlist, ivf.nprobe) == (20, 3)
    centroids = ivf.quantizer.reconstruct_n(0, 20)
    stored = np.empty(len(x), dtype=np.int64)
    for lst in range(20):
        ids = faiss.rev_swig_ptr(ivf.invlists.get_ids(lst), ivf.invlists.list_size(lst)).copy()
        stored[ids] = lst
    np.testing.assert_array_equal(stored, np.argmin(_sq(x, centroids), axis=1))  # exact nearest centroid
    _, rows = index.search(q, 5)
    probed = np.argsort(_sq(q, centroids), axis=1)[:, :3]
    for i in range(len(q)):
        cand = np.flatnonzero(np.isin(stored, probed[i]))
        assert set(cand[np.argsort(d0[i, cand])[:5]]) == set(rows[i])
    faiss.write_index(index, str(tmp_path / "i.faiss"))
    assert faiss.extract_index_ivf(read_faiss(str(tmp_path / "i.faiss"))).nprobe == 3  # saved with the index
    for nprobe in (20, 500):  # every list: exact
        dist, rows = build_faiss(x, IndexConfig(kind="ivf", ivf_nlist=20, ivf_nprobe=nprobe))[0].search(q, 10)
        np.testing.assert_array_equal(rows, np.argsort(d0, axis=1, kind="stable")[:, :10])
        np.testing.assert_allclose(dist, np.sort(d0, axis=1)[:, :10], rtol=1e-5, atol=1e-4)


def test_hnsw_settings_applied_and_saved(tmp_path):
    x, _ = _data(300, 8)
    index, _ = build_faiss(x, IndexConfig(kind="hnsw", hnsw_m=2, hnsw_ef_construction=1, hnsw_ef_search=7))
    assert (index.hnsw.efConstruction, index.hnsw.efSearch) == (1, 7)
    faiss.write_index(index, str(tmp_path / "h.faiss"))
    assert read_faiss(str(tmp_path / "h.faiss")).hnsw.efSearch == 7


def test_ivf_pq_distances_are_those_to_its_reconstructions_after_a_reread(tmp_path):
    x, q = _data(3000, 8, seed=2)
    index, _ = build_faiss(x, IndexConfig(kind="ivf", ivf_nlist=20, ivf_nprobe=20, pq_m=4, pq_nbits=4))
    assert index.use_precomputed_table == -1
    faiss.write_index(index, str(tmp_path / "p.faiss"))
    again = read_faiss(str(tmp_path / "p.faiss"))
    dist, rows = again.search(q, 5)
    np.testing.assert_array_equal(rows, index.search(q, 5)[1])
    ivf = faiss.extract_index_ivf(again)
    ivf.make_direct_map()
    rec = np.stack([ivf.reconstruct(int(r)) for r in rows.ravel()]).reshape(*rows.shape, 8)
    np.testing.assert_allclose(dist, ((q[:, None, :] - rec) ** 2).sum(-1), rtol=1e-4, atol=1e-4)


def test_pq_on_too_few_rows_is_refused_by_name_and_faiss_fails_past_the_check():
    with pytest.raises(ValueError, match=r"index.pq_nbits=6.*has 40"):
        new_faiss(IndexConfig(kind="ivf", ivf_nlist=2, pq_m=2, pq_nbits=6), 40, 4)
    with pytest.raises(ValueError, match=r"index.ivf_nlist=50.*corpus has 40"):
        new_faiss(IndexConfig(kind="ivf", ivf_nlist=50), 40, 4)
    with pytest.raises(ValueError, match=r"index.ivf_nlist=50.*ivf_train_size=30"):
        new_faiss(IndexConfig(kind="ivf", ivf_nlist=50, ivf_train_size=30), 400, 4)
    cfg = IndexConfig(kind="ivf", ivf_nlist=2, pq_m=2, pq_nbits=6)
    index, _ = new_faiss(cfg, 1000, 4)  # a sample smaller than new_faiss was told: faiss's own error, as documented
    with pytest.raises(RuntimeError, match="at least as large as number of clusters"):
        train_faiss(index, np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32), cfg)


def test_k_past_the_index_and_an_empty_index():
    x, q = _data(5, 8)
    for kind in ("flat", "hnsw", "ivf"):
        dist, rows = build_faiss(x, IndexConfig(kind=kind))[0].search(q[:2], 8)
        assert (rows[:, 5:] == -1).all() and sorted(rows[0, :5]) == [0, 1, 2, 3, 4], kind
    for kind in ("flat", "hnsw", "auto"):
        index, _ = build_faiss(np.zeros((0, 8), np.float32), IndexConfig(kind=kind))
        assert index.ntotal == 0 and (index.search(q[:1], 3)[1] == -1).all()
    with pytest.raises(ValueError, match="index.ivf_nlist=1.*corpus has 0"):
        build_faiss(np.zeros((0, 8), np.float32), IndexConfig(kind="ivf"))


def test_float16_and_float64_inputs_index_their_float32_values():
    x, q = _data(500, 8)
    x16 = x.astype(np.float16)
    for cfg in (IndexConfig(kind="flat"), IndexConfig(kind="ivf", ivf_nlist=8, ivf_nprobe=8)):
        a = build_faiss(x16, cfg)[0].search(q, 5)
        b = build_faiss(x16.astype(np.float32), cfg)[0].search(q, 5)
        c = build_faiss(x16.astype(np.float64), cfg)[0].search(q, 5)
        for other in (b, c):
            np.testing.assert_array_equal(a[1], other[1])
            np.testing.assert_array_equal(a[0], other[0])


def test_nonfinite_rows_named_in_the_vectors_and_in_a_sampled_training_set():
    x, _ = _data(400, 8)
    x[7, 3], x[300, 0] = np.nan, np.inf
    for kind in ("flat", "hnsw"):
        with pytest.raises(NonFiniteVectors, match=r"rows \[7, 300\]"):
            build_faiss(x, IndexConfig(kind=kind))
    cfg = IndexConfig(kind="ivf", ivf_nlist=4, ivf_train_size=399)  # a sample of 399 rows holds one of them at least
    with pytest.raises(NonFiniteVectors) as err:
        build_faiss(x, cfg)
    assert set(err.value.rows.tolist()) <= {7, 300} and len(err.value.rows)


def test_assign_nearest_and_kmeans_against_float64_and_faiss():
    x, _ = _data(3000, 8, seed=1)
    for k in (20, 100):
        c = kmeans(x, k, 0)
        np.testing.assert_array_equal(assign_nearest(c, x), np.argmin(_sq(x, c), axis=1))
        ours = _sq(x, c).min(1).sum()
        ref = faiss.Kmeans(8, k, niter=10, seed=0)
        ref.train(x)
        assert ours <= 1.02 * _sq(x, ref.centroids).min(1).sum()
    ties = np.array([[1, 0], [-1, 0], [0, 1]], np.float32)
    assert assign_nearest(ties, np.array([[0, 0], [0, -5]], np.float32)).tolist() == [0, 0]  # the lowest on a tie


def test_index_config_refuses_unknown_and_out_of_range_keys_by_name():
    cases = {"kindd": "flat", "kind": "HNSW", "hnsw_m": 1, "pq_nbits": 25, "ivf_nprobe": 0, "seed": 2**31,
             "vector_dtype": "float64", "ivf_nlist": 2.5, "flat_max_sentences": -1}
    for key, value in cases.items():
        with pytest.raises(ConfigError, match=rf"index\.{key}"):
            from_dict(IndexBuildConfig, {"index": {key: value}})
    with pytest.raises(ConfigError, match=r"index\.hnsw_m: must be >= 2"):  # a config made in Python, as a file
        new_faiss(IndexConfig(kind="hnsw", hnsw_m=1), 10, 4)
    with pytest.raises(ValueError, match=r"unknown index kind 'x'; valid kinds"):
        new_faiss(IndexConfig(kind="x"), 10, 4)


@pytest.mark.parametrize("value", [np.int64(5), np.float32(0.5)])
def test_a_numpy_number_in_a_ranged_setting_is_named_for_its_type(value):
    """`range_problem` refuses a numpy scalar (configs are written as YAML), saying what it is; it once read "must
    be a number, got 5"."""
    from aspire.config import range_problem

    problem = range_problem(value, {"min": 0})
    assert problem is not None and "numpy" in problem and "int() or float()" in problem
