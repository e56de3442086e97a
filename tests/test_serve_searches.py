"""The page's searches against the index they read: what a search at a request's own settings rebuilds.

A search at an OT temperature other than the served one (`tau`, the page's temperature field) ran on a new Searcher,
which built again, at every such search, a BM25 stage the index does not store (one built with `index.store_bm25`
off, as configs/index-million.yaml builds it, or served with another `search.bm25_k1` / `bm25_b`): a lexical or fused
first stage then read the whole index again at each search.
"""

from __future__ import annotations

import logging

import pytest
from serve_support import encoder_fixture, index_fixture  # noqa: F401 - fixtures

from aspire.serve import open_service


@pytest.mark.parametrize("stages", ["bm25", "ann,bm25"])
def test_a_bm25_the_index_does_not_store_is_built_once_whatever_the_requests_temperatures(index, caplog, stages):
    service = open_service(index, ["search.bm25_k1=1.5", "search.rerank=ot"])  # the index stores k1=1.25
    body = {"paper_id": "q", "sentences": [0, 1], "stages": stages, "k": 3}
    with caplog.at_level(logging.INFO, logger="aspire.index.lexical"):
        answers = [service.search({**body, "tau": tau}) for tau in (1.0, 0.5, 0.25, 0.5)]
    builds = [r.getMessage() for r in caplog.records if r.getMessage().startswith("building BM25")]
    assert len(builds) == 1, builds
    # the shared stage ranks as one built for the search alone: the answer of a server serving that temperature
    alone = open_service(index, ["search.bm25_k1=1.5", "search.rerank=ot", "search.ot_tau=0.25"]).search(body)
    assert [(h["paper_id"], h["score"], h["stages"]) for h in answers[2]["hits"]] == [
        (h["paper_id"], h["score"], h["stages"]) for h in alone["hits"]]
    assert answers[2]["ot"]["tau"] == 0.25
