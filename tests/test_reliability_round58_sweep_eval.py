"""Round 58: a defect sweep of `aspire.evaluate.facets`, `aspire.evaluate.cache` and `aspire.demo`.

A facet query text (`--query-text facet|title+facet`) was encoded 64 texts a forward pass whatever the run's
`--batch-size` ("papers encoded per forward pass"): every other text of the run went through the model at the size
asked for, the facet queries all at once."""

from __future__ import annotations

import pytest

from aspire.benchmarks.csfcube import ABSTRACTS_FILE, LABEL_TO_FACET, load_csfcube
from aspire.benchmarks.pools import PoolSet
from aspire.data.papers import read_paper_map
from aspire.evaluate.options import EvalOptions
from aspire.evaluate.rank import rank_pool_set


@pytest.mark.parametrize("query_text", ["facet", "title+facet"])
def test_facet_text_queries_go_through_the_model_at_the_runs_batch_size(shared_data, tiny_model_dir, tmp_path,
                                                                       monkeypatch, query_text):
    from aspire.encoders.contextual import ContextualSentenceEncoder

    full = load_csfcube(shared_data / "csfcube")  # three queries a facet, two candidates each
    pool_set = PoolSet("csfcube", {facet: {q: dict(list(pool.items())[:2]) for q, pool in list(pools.items())[:3]}
                                   for facet, pools in full.pools.items()})
    papers = read_paper_map(shared_data / "csfcube" / ABSTRACTS_FILE, ids=pool_set.paper_ids(), needed_by="pooled")
    rows: list[tuple[int, bool]] = []  # (texts in one forward pass, whether they were facet query texts)
    embed = ContextualSentenceEncoder._embed_texts

    def spy(self, texts, *args, **kwargs):
        facet_texts = any(name.endswith(" sentences") for name in kwargs.get("names") or [])
        forward = self.model.forward

        def counted(*f_args, **f_kwargs):
            rows.append((f_kwargs["input_ids"].shape[0], facet_texts))
            return forward(*f_args, **f_kwargs)

        self.model.forward = counted  # on the instance: `self.model(**enc)` calls it
        try:
            return embed(self, texts, *args, **kwargs)
        finally:
            del self.model.forward

    monkeypatch.setattr(ContextualSentenceEncoder, "_embed_texts", spy)
    rankings, info = rank_pool_set(pool_set, papers, str(tiny_model_dir), "abstract", tmp_path / "run", "t",
                                   EvalOptions(batch_size=2, query_text=query_text), LABEL_TO_FACET)
    assert info["query_text"] == query_text and {f: len(r) for f, r in rankings.items()} == {f: 3 for f in full.pools}
    queries = [n for n, facet_texts in rows if facet_texts]
    assert len(queries) == 3 * 2  # each facet's three queries: 2, then 1
    assert max(queries) == 2 and max(n for n, _ in rows) == 2, sorted(set(rows))
