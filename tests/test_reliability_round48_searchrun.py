"""Round 48: the pool sets ranked through `aspire search` (`aspire.evaluate.search_run.rank_pools_by_search`)
refuse a pooled paper they have no text for by name, before any encoding."""

from __future__ import annotations

import pytest
from test_pool_stages import LABEL_TO_FACET
from test_reliability_round12_searchrun import _pool_set

from aspire.evaluate.search_run import rank_pools_by_search


def test_a_pooled_paper_without_text_is_refused_by_name_before_encoding(tmp_path):
    """A candidate the paper map lacks failed with a bare `KeyError('c3')`; it is a ValueError naming every such
    paper, raised before the encoder is touched (none is given here)."""
    pool_set, papers = _pool_set(tmp_path / "set", {"q": {"cands": ["c3", "c4", "c1"], "relevance_adju": [0, 1, 2]}})
    del papers["c3"], papers["q"]
    with pytest.raises(ValueError, match=r"2 pooled papers .* no paper text: \['c3', 'q'\]"):
        rank_pools_by_search(pool_set, papers, None, ["rerank=minl2"], LABEL_TO_FACET)
