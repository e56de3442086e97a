"""Mends of round 15 by the lead: one shape of run record for every evaluation runner, and a fingerprint hashed
once an encoding (it reads every weight)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_reliability_round14_evalrun import TO_FACET, _toy

from aspire.evaluate.options import EvalOptions

RECORD_KEYS = {"encoder_device", "score_device", "batch_size", "vector_cache", "encoded"}
ENTRY_KEYS = {"encoding", "papers", "batch_size", "fingerprint", "cache_entry", "from_cache"}


class CountingEncoder:
    """An encoder that counts its fingerprints (each one hashes every weight)."""

    def __init__(self, encoder) -> None:
        self.encoder, self.hashed = encoder, 0

    def fingerprint(self) -> str:
        self.hashed += 1
        return self.encoder.fingerprint()

    def __getattr__(self, name):
        return getattr(self.encoder, name)


def test_an_encoding_hashes_the_weights_once_and_records_the_fingerprint_it_used(tmp_path, tiny_model_dir):
    """`encode_record` hashed the weights again after `encode_papers` had (about a second for mpnet a call)."""
    from aspire.encoders import load_encoder
    from aspire.evaluate.encode import encode_papers

    _, papers = _toy(tmp_path / "set")
    encoder = CountingEncoder(load_encoder(str(tiny_model_dir)))
    record: list[dict] = []
    encode_papers(encoder, list(papers.values()), "contextual", tmp_path / "cache", 2, record=record)
    encode_papers(encoder, list(papers.values()), "pass", tmp_path / "cache", 2, record=record)
    assert encoder.hashed == 2
    assert [set(r) for r in record] == [ENTRY_KEYS] * 2
    assert record[0]["fingerprint"] == encoder.encoder.fingerprint() and record[1]["from_cache"]
    assert record[0]["cache_entry"] == record[1]["cache_entry"]  # `pass` reads the contextual entry


def test_every_runner_writes_one_shape_of_run_record(small_csfcube, tmp_path, tiny_model_dir):
    """The search runners wrote `device`, `batch_size`, `vector_cache` (and `encoded`) at the top of results.json
    where the other runners nest `run_record`; the CSFCube one listed no cache entry."""
    from test_benchmarks import make_reviewer_set, tiny_context2doc

    from aspire.benchmarks.reviewers import load_reviewer_set
    from aspire.evaluate.csfcube import run_csfcube_search
    from aspire.evaluate.rank import rank_pool_set
    from aspire.evaluate.search_run import run_reviewers_search, run_search_pipeline

    model, cache = str(tiny_model_dir), tmp_path / "cache"
    pool_set, papers = _toy(tmp_path / "set")
    _, ranked = rank_pool_set(pool_set, papers, model, "minl2", tmp_path / "a", "x", EvalOptions(cache_dir=cache),
                              TO_FACET)
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm"))
    reviewers = run_reviewers_search(rset, tmp_path / "r", "r", model, ["rerank=minl2"], cache_dir=cache)
    csfcube = run_csfcube_search(small_csfcube, model, ["rerank=minl2"], tmp_path / "c", exp="s", cache_dir=cache)
    bench = tiny_context2doc(tmp_path / "c2d")
    bench.queries = dict(list(bench.queries.items())[:2])
    bench.qrels = {q: bench.qrels[q] for q in bench.queries}
    c2d = run_search_pipeline(bench, tmp_path / "d", "d", model, ["rerank=minl2"], depth=10)
    for name, res in {"pools": ranked, "reviewers": reviewers, "csfcube": csfcube, "context2doc": c2d}.items():
        rec = res["run_record"]
        assert set(rec) == RECORD_KEYS, name
        assert rec["encoded"] and all(set(e) == ENTRY_KEYS for e in rec["encoded"]), name
        assert not {"device", "vector_cache", "encoded"} & set(res), name
        assert rec["encoded"][0]["fingerprint"] == res["encoder_fingerprint"], name
    entry = csfcube["run_record"]["encoded"][0]
    assert entry["papers"] == len(small_csfcube_papers(small_csfcube)) and (cache / entry["cache_entry"]).is_file()
    assert json.loads((tmp_path / "c" / "results.json").read_text())["run_record"] == csfcube["run_record"]


def small_csfcube_papers(root) -> set[str]:
    from aspire.benchmarks.csfcube import load_csfcube

    return load_csfcube(root).paper_ids()


def test_ranked_files_scored_from_another_folder_keep_their_scores_in_the_run(tmp_path):
    """`run_pools(ranked_dir=...)` wrote `run.trec` with rank scores (pool size - rank + 1): it looked for the ranked
    files in `out`, not in `ranked_dir`, so `fuse-runs --fusion z|minmax` over that folder fused ranks."""
    from aspire.benchmarks.runs import read_run
    from aspire.evaluate.pool_run import run_pools

    root = tmp_path / "toy"
    _toy(root, facets=())
    ranked = {"q": [["c1", 0.9], ["c2", 0.8], ["c5", 0.5], ["c3", 0.1], ["c4", 0.0]]}
    (root / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(ranked))
    run_pools(root, "toy", tmp_path / "out", ranked_dir=root, exp="manual")
    run = read_run(tmp_path / "out" / "run.trec")
    assert [(c, round(s, 6)) for c, s in run["q"]] == [(c, s) for c, s in ranked["q"]]


def test_seed_everything_takes_any_seed_the_config_does():
    """`train.seed` is any integer >= 0; `torch.manual_seed` refused one from 2**64 ("Overflow when unpacking long")."""
    import torch

    from aspire.train.process import seed_everything

    seed_everything(2**64 + 5)
    big = torch.rand(3)
    seed_everything(5)
    assert torch.equal(big, torch.rand(3))  # below 2**64 a seed is as it was


# ---- vectors that are not finite as stored (found by the round-15 index sweep) ----------------------------------
def _corpus(whole: bool = True, big: bool = False, nan_whole: bool = False):
    from test_index_stream import corpus

    part = corpus(6, 0, seed=1)
    if big:
        part.vectors[part.offsets[2]] *= 1e5  # paper p2: finite in float32, past float16's 65504
    if whole:
        part.whole = np.random.default_rng(2).standard_normal((6, part.dim)).astype(np.float32)
        if nan_whole:
            part.whole[4, 3] = np.nan  # paper p4
    return part


@pytest.mark.parametrize("case, match", [
    ("big", r"paper\(s\) \(\['p2'\]\) hold values past float16's range .*vector_dtype=float32"),
    ("nan_whole", r"whole-abstract vectors of 1 paper\(s\) \(\['p4'\]\) hold NaN"),
])
def test_an_index_refuses_vectors_that_are_not_finite_as_stored(case, match, tmp_path):
    """float16 storage turned a sentence vector value above 65504 into infinity in vectors.npy (faiss kept the float32
    one), and a NaN whole-abstract vector was stored unchecked: both came back as NaN distances in re-ranking. The
    in-RAM build, `add` and the streamed merge refuse them alike, naming the papers."""
    from test_index_stream import cfg

    from aspire.index import SentenceIndex
    from aspire.index.stream import merge_streaming

    bad = _corpus(big=case == "big", nan_whole=case == "nan_whole")
    with pytest.raises(ValueError, match=match):
        SentenceIndex.build(bad, cfg(kind="flat", vector_dtype="float16"), "fp")
    index = SentenceIndex.build(_corpus().subset([0, 1]), cfg(kind="flat", vector_dtype="float16"), "fp")
    before = index.faiss_index.ntotal
    with pytest.raises(ValueError, match=match):
        index.add(bad.subset([2, 3, 4, 5]), "fp")
    assert index.faiss_index.ntotal == before and index.n_papers == 2  # refused before anything changed
    bad.save_shard(tmp_path / "shards" / "shard-00000-of-00001", {"model_name": "m", "model_fingerprint": "fp"})
    with pytest.raises(ValueError, match=r"shard .*shard-00000-of-00001.*" + ("p2" if case == "big" else "p4")):
        merge_streaming(tmp_path / "shards", tmp_path / "idx", cfg(kind="flat", vector_dtype="float16"))


def test_float32_storage_keeps_the_large_values_float16_cannot(tmp_path):
    from test_index_stream import cfg

    from aspire.index import SentenceIndex

    big = _corpus(big=True)
    index = SentenceIndex.build(big, cfg(kind="flat"), "fp")  # float32: nothing to refuse
    assert np.isfinite(np.asarray(index.vectors)).all() and index.n_papers == 6


@pytest.mark.parametrize("override, use", [("stages=whole", "first stage 'whole'"), ("rerank=hybrid", "re-ranker 'hybrid'")])
def test_a_searcher_refuses_a_default_the_index_cannot_serve_when_it_opens(override, use):
    """`search.stages=whole` (or `rerank=hybrid`) on an index without whole-abstract vectors was taken when the
    searcher opened, and every query then failed; it is refused at once, naming the fix."""
    from test_index_stream import cfg, corpus

    from aspire.config import apply_overrides
    from aspire.index import SentenceIndex
    from aspire.search import Searcher

    index = SentenceIndex.build(corpus(4, 0), cfg(kind="flat"), "fp")
    assert index.whole is None
    with pytest.raises(ValueError, match=f"{use} needs the papers' whole-abstract vectors"):
        Searcher(index, apply_overrides(index.config.search, [override], "search"))
    Searcher(index)  # the defaults need none


def test_a_string_abstract_with_a_lone_surrogate_is_a_bad_record_naming_the_paper(tmp_path):
    """The splitter's tokenizer failed on it first, with a UnicodeEncodeError naming no record (found by the round-16
    trainer sweep); a list abstract's sentence was already refused so."""
    from aspire.data.papers import paper_from_record, read_papers

    with pytest.raises(ValueError, match=r"x:2 \(paper_id 'A2'\): abstract holds a lone surrogate U\+D800"):
        paper_from_record({"paper_id": "A2", "title": "T", "abstract": "Bad \ud800 text. More."}, where="x:2")
    path = tmp_path / "papers.jsonl"
    path.write_text('{"paper_id": "A1", "title": "T", "abstract": "Good text. More."}\n'
                    '{"paper_id": "A2", "title": "T", "abstract": "Bad \\ud800 text."}\n')
    result = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in result.papers] == ["A1"]
    assert [(r.line, r.paper_id) for r in result.rejected] == [(2, "A2")] and "lone surrogate" in result.rejected[0].reason


def test_csfcube_scored_from_ranked_files_writes_its_trec_run(shared_data, tmp_path):
    """`aspire evaluate csfcube --ranked DIR` wrote results.json and the per-query CSV but no run.trec or qrels.trec,
    so `fuse-runs` over it failed ("run file not found"), while every other CSFCube run writes them (found by the
    round-17 docs sweep)."""
    from aspire.benchmarks.runs import read_run
    from aspire.cli.evaluate import main

    ranked = shared_data / "csfcube" / "sample_ranked_pools"
    out = tmp_path / "specter"
    assert main(["csfcube", "--data", str(shared_data / "csfcube"), "--ranked", str(ranked), "--exp", "specter",
                 "--out", str(out)]) == 0
    run = read_run(out / "run.trec")
    assert (out / "qrels.trec").is_file() and len(run) == 50
    first = json.loads((ranked / "test-pid2pool-csfcube-specter-background-ranked.json").read_text())
    qid, ranking = next(iter(first.items()))
    key = next(k for k in run if k.startswith(qid))
    scores = dict(ranking)  # SPECTER's distances, rising: the run holds them negated, falling
    assert [c for c, _ in run[key]] == [c for c, _ in ranking if c in dict(run[key])]
    assert all(abs(-s - scores[c]) < 1e-4 for c, s in run[key])  # the ranked file's scores, not rank scores
