"""Correctness sweep, round 18: the evaluation runners (`aspire.evaluate.encode`, `cache`, `search_run`).

The vector cache gives back the entry it read or wrote, so a run's record does not hash the papers' texts again
to name it; the context2doc search-pipeline runner hashes the encoder's weights once (the index build), not again
for a Searcher that never encodes a query. Tiny random models, no network."""

from __future__ import annotations

import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.papers import Paper

PAPERS = [Paper("p1", "a neural model", ["we propose a new method .", "results show two tasks ."]),
          Paper("p2", "text similarity", ["the document is scientific ."]),
          Paper("p3", "citation", ["a model of sentences .", "we improve the state of the art ."])]


def _encode(ps):
    return DocBatch.from_list([torch.full((len(p.sentences), 3), float(i + 1)) for i, p in enumerate(ps)],
                              [p.paper_id for p in ps], [p.sentences for p in ps])


def test_cached_encode_entry_gives_the_path_it_read_or_wrote_and_none_where_none_was_written(tmp_path, monkeypatch):
    from aspire.evaluate import cache
    from aspire.storage import DiskFullError

    expected = cache.cache_path(tmp_path, "fp", "contextual", {}, PAPERS)
    batch, hit, path = cache.cached_encode_entry(_encode, PAPERS, "fp", "contextual", {}, tmp_path)
    assert (hit, path) == (False, expected) and path.is_file() and torch.equal(batch.emb, _encode(PAPERS).emb)
    again, hit, path = cache.cached_encode_entry(_encode, PAPERS, "fp", "contextual", {}, tmp_path)
    assert (hit, path) == (True, expected) and torch.equal(again.emb, batch.emb)
    assert cache.cached_encode_entry(_encode, PAPERS, "fp", "contextual", {}, None)[1:] == (False, None)

    def full(path, batch):
        raise DiskFullError("no room", path.parent)

    monkeypatch.setattr(cache, "_save", full)
    _, hit, path = cache.cached_encode_entry(_encode, PAPERS, "fp", "independent", {}, tmp_path)
    assert (hit, path) == (False, None)
    monkeypatch.undo()
    # the old two-value return is kept for its callers
    assert cache.cached_encode(_encode, PAPERS, "fp", "contextual", {}, tmp_path)[1] is True


@pytest.mark.parametrize("encoding, options", [("contextual", {}), ("pass", {}), ("independent", {"normalize": True})])
def test_encode_papers_with_a_record_hashes_the_papers_texts_once(tmp_path, tiny_model_dir, monkeypatch, encoding,
                                                                  options):
    """`encode_papers(record=...)` computed the cache path again for its record: every paper's text hashed twice
    (2 `papers_digest` calls for one encoding); the cache gives back the path it used now, and the record names the
    same entry."""
    from aspire.encoders import load_encoder
    from aspire.evaluate import cache
    from aspire.evaluate.encode import cache_entry_key, encode_papers

    encoder = load_encoder(str(tiny_model_dir))
    calls = []
    real = cache.papers_digest
    monkeypatch.setattr(cache, "papers_digest", lambda papers: calls.append(len(papers)) or real(papers))
    for expect_hit in (False, True):
        calls.clear()
        record: list[dict] = []
        _, hit = encode_papers(encoder, PAPERS, encoding, tmp_path, 2, options, record)
        assert hit is expect_hit and calls == [len(PAPERS)]
        fingerprint = encoder.fingerprint()
        entry = cache.cache_path(tmp_path, fingerprint, *cache_entry_key(encoding, options), PAPERS).name
        assert record == [{"encoding": encoding, "papers": 3, "batch_size": 2, "fingerprint": fingerprint,
                           "cache_entry": entry, "from_cache": expect_hit}]


def test_the_context2doc_search_pipeline_hashes_the_encoders_weights_once(tmp_path, tiny_model_dir):
    """`run_search_pipeline` hashed every weight for the index build and again in the Searcher's model check (an
    index this encoder had just built; the queries come encoded, so the Searcher never encodes one): once now,
    with the same run and figures."""
    from test_benchmarks import tiny_context2doc

    from aspire.benchmarks.runs import read_run
    from aspire.encoders import load_encoder
    from aspire.evaluate.search_run import run_search_pipeline

    bench = tiny_context2doc(tmp_path)
    bench.queries = dict(list(bench.queries.items())[:6])
    bench.qrels = {q: bench.qrels[q] for q in bench.queries}
    encoder = load_encoder(str(tiny_model_dir))
    fingerprint = encoder.fingerprint()
    hashed = []
    real = encoder.fingerprints
    encoder.fingerprints = lambda: hashed.append(1) or real()
    res = run_search_pipeline(bench, tmp_path / "s", "s", str(tiny_model_dir), ["rerank=minl2"], depth=10,
                              encoder=encoder)
    assert len(hashed) == 1
    assert res["encoder_fingerprint"] == fingerprint
    fresh = run_search_pipeline(bench, tmp_path / "f", "f", str(tiny_model_dir), ["rerank=minl2"], depth=10)
    assert read_run(tmp_path / "s" / "run.trec") == read_run(tmp_path / "f" / "run.trec")
    assert res["metrics"] == fresh["metrics"]
