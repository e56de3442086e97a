"""Correctness sweep, round 13: the evaluation's vector cache and CSFCube / pool runners.

A cache entry is reused only when everything that made it is the same (papers' texts included) and gives the
vectors of a cold encode; an entry another run removed before it was recorded does not stop a run; the
search-backed CSFCube runner records the settings it ran with."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.papers import Paper

PAPERS = [Paper("a", "t", ["x", "y"]), Paper("b", "u", ["z"])]


def _encode(ps):
    return DocBatch.from_list([torch.full((len(p.sentences), 3), float(i + 1)) for i, p in enumerate(ps)],
                              [p.paper_id for p in ps], [p.sentences for p in ps])


def test_a_cache_entry_removed_by_another_run_before_its_record_only_leaves_this_run_uncached(tmp_path, monkeypatch,
                                                                                           caplog):
    from aspire.evaluate import cache

    real = cache.write_record

    def raced(path, *args, **kwargs):  # a second run found the entry without its record yet, and removed it
        cache.remove_cache_file(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(cache, "write_record", raced)
    with caplog.at_level(logging.WARNING, logger="aspire"):
        batch, hit = cache.cached_encode(_encode, PAPERS, "fp", "contextual", {}, tmp_path)
    assert hit is False and torch.equal(batch.emb, _encode(PAPERS).emb)
    assert any("not cached" in r.getMessage() for r in caplog.records)
    monkeypatch.setattr(cache, "write_record", real)
    _, hit = cache.cached_encode(_encode, PAPERS, "fp", "contextual", {}, tmp_path)
    assert hit is False  # nothing half-written was left to read
    again, hit = cache.cached_encode(_encode, PAPERS, "fp", "contextual", {}, tmp_path)
    assert hit is True and torch.equal(again.emb, batch.emb)


@pytest.mark.parametrize("encoding, options", [("contextual", {}), ("pass", {}), ("independent", {"normalize": True}),
                                               ("abstract", {"joiner": " "})])
def test_cached_vectors_are_a_cold_encodes_and_a_changed_text_is_encoded_again(tmp_path, tiny_model_dir, encoding,
                                                                                options):
    from aspire.encoders import load_encoder
    from aspire.evaluate.encode import encode_papers

    encoder = load_encoder(str(tiny_model_dir))
    papers = [Paper("p1", "a neural model", ["we propose a new method .", "results show two tasks ."]),
              Paper("p2", "text similarity", ["the document is scientific ."]),
              Paper("p3", "citation", ["a model of sentences .", "we improve the state of the art ."])]
    cold, _ = encode_papers(encoder, papers, encoding, None, 2, options)
    _, hit = encode_papers(encoder, papers, encoding, tmp_path, 2, options)
    warm, hit2 = encode_papers(encoder, papers, encoding, tmp_path, 3, options)
    assert (hit, hit2) == (False, True)
    assert warm.paper_ids == cold.paper_ids and warm.sentences == cold.sentences and torch.equal(warm.mask, cold.mask)
    assert torch.allclose(warm.emb[warm.mask], cold.emb[cold.mask], atol=1e-5)
    for changed, text in ((Paper("p2", "text similarity", ["the document is new ."]), True),  # one abstract changed
                          (Paper("p2", "citation similarity", ["the document is scientific ."]), False)):  # its title
        edited = [papers[0], changed, papers[2]]
        fresh, hit = encode_papers(encoder, edited, encoding, tmp_path, 2, options)
        expected, _ = encode_papers(encoder, edited, encoding, None, 2, options)
        assert hit is False and torch.allclose(fresh.emb[fresh.mask], expected.emb[expected.mask], atol=1e-5)
        assert not text or not torch.allclose(fresh.emb[1], cold.emb[1], atol=1e-4)  # not the stale vector
    reordered = papers[::-1]
    back, _ = encode_papers(encoder, reordered, encoding, tmp_path, 2, options)
    assert back.paper_ids == ["p3", "p2", "p1"] and torch.allclose(back.emb[0][back.mask[0]], cold.emb[2][cold.mask[2]],
                                                                   atol=1e-5)


def test_csfcube_search_run_records_its_facet_code_and_encoder_options(small_csfcube, tiny_model_dir, tmp_path,
                                                                      pools_in_pool_order):
    from aspire.evaluate import csfcube

    results = csfcube.run_csfcube_search(small_csfcube, str(tiny_model_dir), [], tmp_path / "out", exp="s",
                                         encoder_options={"backend": "torch"}, facet_code="none")
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    for res in (results, written):
        assert res["facet_code"] == "none" and res["encoder_options"] == {"backend": "torch"}
        assert "query_codes" not in res  # the tiny model has no facet codes
