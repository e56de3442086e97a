"""Correctness sweep, round 46: nearest negatives, the evaluation's vector cache and the pool stages.

Nearest negatives equal a brute-force cosine loop (partners, the anchor and zero vectors excluded, the margin guard,
`skip`, ties to the earlier paper, `dropped`) whatever the chunk; a truncated cache entry is rebuilt with a warning
naming it, and processes writing one entry at once all read the right vectors; the stages run by `run_stages` equal
BM25 run by hand, and a stale model run is refused by the fusion stage."""

from __future__ import annotations

import logging
import multiprocessing as mp

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.benchmarks.pools import PoolSet, ranked_path, read_ranked, write_ranked
from aspire.data.negatives.rank import nearest_negatives
from aspire.data.papers import Paper
from aspire.evaluate import cache
from aspire.evaluate.options import Stages
from aspire.evaluate.pool_stages import bm25_rankings, run_stages


def _brute(V, partners, ids, k, skip, margin, reference):
    """Negatives and `dropped` from the full float64 cosine matrix, one anchor (row) at a time."""
    V = V.astype(np.float64)
    live = np.linalg.norm(V, axis=1) > 0
    unit = V / np.where(live, np.linalg.norm(V, axis=1), 1.0)[:, None]
    S = unit @ unit.T
    out, dp, dm = {}, 0, 0
    for i, a in enumerate(ids):
        if not live[i]:
            out[a] = []
            continue
        s, mine = S[i], partners.get(a, set())
        parts = [j for j, p in enumerate(ids) if p in mine and j != i and live[j]]
        cands = [j for j in range(len(ids)) if j != i and live[j] and ids[j] not in mine]
        near = set()
        if margin is not None and parts:
            ref = (min if reference == "min" else max)(s[j] for j in parts)
            near = {j for j in cands if s[j] > ref - margin}
        kept = sorted((j for j in cands if j not in near), key=lambda j: (-s[j], j))[skip: skip + k]
        out[a] = [ids[j] for j in kept]
        floor = np.inf if k == 0 else s[kept[-1]] if len(kept) == k else -np.inf
        dp += sum(s[j] > floor for j in parts)
        dm += sum(s[j] > floor for j in near)
    return out, dp, dm


@pytest.mark.parametrize("seed", range(6))
def test_nearest_negatives_equal_a_brute_force_cosine_loop(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        n = int(rng.integers(2, 12))
        V = rng.normal(size=(n, 4)).astype(np.float32)
        V[rng.random(n) < 0.15] = 0  # papers without a vector
        V[rng.random(n) < 0.2] = V[0] * 2  # one vector (a duplicated abstract), scaled: an exact tie
        ids = [f"p{i}" for i in range(n)]
        partners = {p: {q for q in ids if q != p and rng.random() < 0.25} for p in ids}
        k, skip = int(rng.integers(0, 4)), int(rng.integers(0, 2))
        margin = None if rng.random() < 0.3 else float(rng.choice([0.0, 0.1, 0.5]))
        reference = str(rng.choice(["min", "max"]))
        want, dp, dm = _brute(V, partners, ids, k, skip, margin, reference)
        for chunk in (1, 3, 64):
            mined = nearest_negatives(torch.from_numpy(V), partners, ids, k, skip, margin, reference, chunk)
            assert mined.negatives == want
            assert mined.dropped["partner"] == dp
            if margin is not None:
                assert mined.dropped["margin"] == dm
            for a, negs in mined.negatives.items():
                assert a not in negs and not (set(negs) & partners[a])
            assert mined.notes["papers_without_vector"] == [p for p, v in zip(ids, V) if not v.any()]


PAPERS = [Paper("a", "t", ["x", "y"]), Paper("b", "u", ["z"])]


def _encode(ps):
    return DocBatch.from_list([torch.full((len(p.sentences), 3), float(i + 1)) for i, p in enumerate(ps)],
                              [p.paper_id for p in ps], [p.sentences for p in ps], torch.ones(len(ps), 3))


def test_a_truncated_cache_entry_is_rebuilt_with_a_warning_naming_it(tmp_path, caplog):
    key = ("v2-0123456789abcdef", "contextual", {}, tmp_path)
    _, hit, path = cache.cached_encode_entry(_encode, PAPERS, *key, needs_whole=True)
    assert hit is False and path.is_file()
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with caplog.at_level(logging.WARNING, logger="aspire.evaluate.cache"):
        _, hit, again = cache.cached_encode_entry(_encode, PAPERS, *key, needs_whole=True)
    assert hit is False and again == path and str(path) in caplog.text
    batch, hit, _ = cache.cached_encode_entry(_encode, PAPERS, *key, needs_whole=True)
    want = _encode(PAPERS)
    assert hit is True
    assert torch.equal(batch.emb, want.emb) and torch.equal(batch.mask, want.mask)
    assert torch.equal(batch.whole, want.whole) and batch.sentences == want.sentences


def _writer(folder, option, queue):
    try:
        for _ in range(10):
            batch, _, _ = cache.cached_encode_entry(_encode, PAPERS, "v2-0123456789abcdef", "independent",
                                                    {"n": option}, folder)
            assert torch.equal(batch.emb, _encode(PAPERS).emb)
        queue.put(None)
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        queue.put(repr(err))


def test_processes_writing_one_cache_entry_at_once_all_read_the_right_vectors(tmp_path):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(tmp_path, option, queue)) for option in (0, 0, 1)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results == [None, None, None]
    # whatever the interleaving, each entry left behind reads back as its own vectors
    for option in (0, 1):
        batch, _, _ = cache.cached_encode_entry(_encode, PAPERS, "v2-0123456789abcdef", "independent",
                                                {"n": option}, tmp_path)
        assert torch.equal(batch.emb, _encode(PAPERS).emb)


TEXTS = {"q1": "graph citation networks", "q2": "optimal transport text", "a": "graph networks of papers",
         "b": "optimal transport plans", "c": "image classification", "d": "citation counts"}
POOL_PAPERS = {p: Paper(p, f"title {p}", [t]) for p, t in TEXTS.items()}
POOLS = PoolSet("toy", {"": {"q1": {"a": 1, "b": 0, "c": 0}, "q2": {"b": 1, "c": 0, "d": 0}}})


def test_run_stages_bm25_alone_equals_bm25_rankings_by_hand_and_is_written_under_exp(tmp_path):
    ranked, info = run_stages(POOLS, POOL_PAPERS, {}, tmp_path, "final", None, Stages(bm25=True))
    by_hand = bm25_rankings(POOLS, POOL_PAPERS, {})
    assert ranked == {"": {q: [c for c, _ in r] for q, r in by_hand[""].items()}}
    written = read_ranked(ranked_path(tmp_path, "toy", "final", ""))
    assert {q: [c for c, _ in r] for q, r in by_hand[""].items()} == {q: list(r) for q, r in written.items()}
    assert info["bm25"]["k1"] == 1.25


@pytest.mark.parametrize("stale", [{"q1": [("a", 0.9), ("b", 0.5), ("c", 0.1)]},  # q2 missing
                                   {"q1": [("a", 0.9), ("b", 0.5)], "q2": [("b", 1.0), ("c", 0.2), ("d", 0.1)]}])
def test_a_stale_model_run_is_refused_by_the_fusion_stage(tmp_path, stale):
    write_ranked(ranked_path(tmp_path, "toy", "dense", ""), stale)
    with pytest.raises(ValueError, match="dense"):
        run_stages(POOLS, POOL_PAPERS, {}, tmp_path, "final", "dense", Stages(bm25=True, alpha=0.5))
