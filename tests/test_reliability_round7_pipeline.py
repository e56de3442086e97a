"""`aspire search` and `--search-pipeline` evaluation agree with an encoder that encodes the title as sentence 0.

With `include_title` an encoded paper's sentences are [title, *abstract]; the index stores them so, with its labels
after a "title" label (`aspire.index.corpus`). Two paths once read the papers' own sentences instead: the
evaluation's pool index (`search_run._searchable`: every text and facet mask one off, then a raw ValueError from
the index build) and `Searcher.query_from_paper` (a facet name selected the sentence before the facet's).
"""

from __future__ import annotations

import pytest
from test_pool_stages import LABEL_TO_FACET, PAPERS, faceted  # noqa: F401  (one query, a background and a method pool)

from aspire.data.papers import Paper
from aspire.encoders import load_encoder
from aspire.index.config import IndexBuildConfig, IndexConfig
from aspire.index.corpus import encode_corpus
from aspire.index.fingerprint import model_fingerprint
from aspire.index.store import SentenceIndex
from aspire.search import Searcher

POOL = ["c3", "c4", "c1", "c2"]


def _papers() -> dict[str, Paper]:
    return {pid: Paper(pid, f"paper {pid}", list(s), labels=list(lab)) for pid, (s, lab) in PAPERS.items()}


@pytest.fixture(scope="module")
def titled(tiny_model_dir):
    """The tiny model encoding titles as sentence 0."""
    return load_encoder(str(tiny_model_dir), include_title=True)


def _searcher(encoder, papers) -> Searcher:
    """The `aspire index build` path: `encode_corpus`, a flat index, the index's search defaults."""
    index = SentenceIndex.build(encode_corpus(encoder, papers), IndexBuildConfig(index=IndexConfig(kind="flat")),
                                model_fingerprint(encoder))
    return Searcher(index, encoder=encoder)


def test_a_facet_name_selects_the_same_sentences_of_an_encoded_and_an_indexed_paper(titled):
    papers = _papers()
    searcher = _searcher(titled, list(papers.values()))
    for facet in ("background", "method"):
        by_id = searcher.query_from_index("q", facet)
        encoded = searcher.query_from_paper(papers["q"], facet)
        assert encoded.mask.tolist() == by_id.mask.tolist()
        chosen = encoded.mask[0].nonzero().flatten().tolist()
        assert [encoded.sentences[0][i] for i in chosen] == [s for s, lab in zip(*PAPERS["q"])
                                                              if LABEL_TO_FACET[lab] == facet]
    # positions count the encoded sentences (the title is 0) on both paths
    assert searcher.query_from_paper(papers["q"], "0").mask.tolist() == searcher.query_from_index("q", [0]).mask.tolist()


@pytest.mark.parametrize("pipeline", [["stages=bm25"], ["stages=ann", "rerank=minl2"], ["stages=ann,bm25", "rerank=ot"]])
def test_pools_ranked_by_search_equal_aspire_search_over_the_pool(titled, faceted, pipeline):  # noqa: F811
    """CSFCube's `--search-pipeline` runner and `aspire search` over an index of the pool alone, the query its
    facet's sentences: the same ranking."""
    from aspire.config import apply_overrides
    from aspire.evaluate.search_run import pipeline_config, rank_pools_by_search

    pool_set, papers = faceted

    ranked = rank_pools_by_search(pool_set, papers, titled, pipeline, LABEL_TO_FACET)  # once a ValueError

    searcher = _searcher(titled, [papers[c] for c in POOL])
    cfg = apply_overrides(searcher.index.config.search, pipeline, "search")
    assert cfg == pipeline_config(pipeline)
    searcher.config = cfg
    for facet in ("background", "method"):
        hits = searcher.search(searcher.query_from_paper(papers["q"], facet), k=len(POOL), shortlist=len(POOL),
                               exclude=[])
        assert ranked[facet]["q"] == [h.paper_id for h in hits]
