"""Round 47: `aspire.evaluate.rank` against scoring each pool by hand with `aspire.scoring` on the same vectors, and
options that do not fit refused before the model loads (tiny random model, no network)."""

from __future__ import annotations

import json

import pytest
import torch
from test_pool_stages import LABEL_TO_FACET, faceted  # noqa: F401  (faceted: a fixture)

from aspire.batch import DocBatch
from aspire.evaluate.encode import encode_papers
from aspire.evaluate.facets import facet_candidates, facet_queries
from aspire.evaluate.options import EvalOptions
from aspire.evaluate.rank import get_eval_scorer, rank_pool_set, rank_pools


@pytest.mark.parametrize(("scorer", "cand_sentences"), [("minl2", "all"), ("ot", "facet"), ("abstract", "all")])
def test_ranked_lists_are_each_pool_scored_by_hand(faceted, tmp_path, tiny_model_dir, scorer,  # noqa: F811
                                                   cand_sentences):
    from aspire.encoders import load_encoder

    pool_set, papers = faceted
    encoding = "pass" if scorer == "abstract" else "contextual"
    opts = EvalOptions(encoding=encoding, cand_sentences=cand_sentences)
    ranked, info = rank_pool_set(pool_set, papers, str(tiny_model_dir), scorer, tmp_path / "o", "x", opts,
                                 LABEL_TO_FACET)
    ids = sorted(pool_set.paper_ids())
    batch, _ = encode_papers(load_encoder(str(tiny_model_dir)), [papers[p] for p in ids], encoding, None, 32)
    score = get_eval_scorer(scorer)
    for facet in pool_set.facets:
        query = batch.index([batch.paper_ids.index("q")])
        if scorer != "abstract":
            query = facet_queries(query, papers, facet, LABEL_TO_FACET)
        cands = facet_candidates(batch, papers, facet, LABEL_TO_FACET)[0] if cand_sentences == "facet" else batch
        pool = list(pool_set.pools[facet]["q"])
        sims = [float(score.score(query, cands.index([cands.paper_ids.index(c)]))[0, 0]) for c in pool]
        expected = [pool[j] for _, j in sorted((-s, j) for j, s in enumerate(sims))]  # ties: pool order
        assert ranked[facet]["q"] == expected
        assert sorted(ranked[facet]["q"]) == sorted(pool) and "q" not in ranked[facet]["q"]
        written = json.loads((tmp_path / "o" / f"test-pid2pool-toy-x-{facet}-ranked.json").read_text())
        assert [c for c, _ in written["q"]] == expected
    assert (info["scorer"], info["encoding"], info["cand_sentences"]) == (scorer, encoding, cand_sentences)


def test_tied_similarities_keep_pool_order():
    emb = torch.zeros(4, 2, 3)
    emb[:, 0, 0] = 1.0
    mask = torch.zeros(4, 2, dtype=torch.bool)
    mask[:, 0] = True
    batch = DocBatch(emb, mask, ["q", "a", "b", "c"], [["s"]] * 4)
    ranked = rank_pools(batch, batch, {"q": ["c", "a", "b"]}, get_eval_scorer("minl2"))
    assert [c for c, _ in ranked["q"]] == ["c", "a", "b"]


@pytest.mark.parametrize(("options", "label_to_facet", "message"), [
    (EvalOptions(), None, "facet 'background' needs a label_to_facet mapping"),
    (EvalOptions(batch_size=0), LABEL_TO_FACET, "batch_size must be a whole number >= 1, got 0"),
    (EvalOptions(batch_size=2.5), LABEL_TO_FACET, "batch_size must be a whole number >= 1, got 2.5"),
    (EvalOptions(device="bogus"), LABEL_TO_FACET, "unknown device 'bogus'"),
])
def test_options_that_do_not_fit_are_refused_before_the_model_loads(faceted, tmp_path, monkeypatch,  # noqa: F811
                                                                     options, label_to_facet, message):
    """A faceted set without a label map, a batch size of 0 or 2.5, a device torch cannot parse: each was refused
    only after the model had loaded and every pooled paper been encoded (the device with a RuntimeError)."""
    import aspire.encoders

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(aspire.encoders, "load_encoder", no_load)
    pool_set, papers = faceted
    with pytest.raises(ValueError, match=message):
        rank_pool_set(pool_set, papers, "unused", "minl2", tmp_path / "o", "x", options, label_to_facet)
    assert not (tmp_path / "o").exists()


def test_a_pooled_paper_without_text_is_refused_by_name(faceted, tmp_path, monkeypatch):  # noqa: F811
    import aspire.encoders

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(aspire.encoders, "load_encoder", no_load)
    pool_set, papers = faceted
    gone = sorted(pool_set.paper_ids())[0]
    with pytest.raises(ValueError, match=rf"1 pooled papers \(queries or candidates\) have no paper text: \['{gone}'\]"):
        rank_pool_set(pool_set, {k: v for k, v in papers.items() if k != gone}, "unused", "minl2", tmp_path / "o", "x",
                      EvalOptions(), LABEL_TO_FACET)  # a bare KeyError once
