"""The lexical (BM25) first stage of search and its fusion with the ANN stage."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.scoring.fusion import fuse_ranked, parse_fusion
from aspire.search import Searcher

# Vectors say P0 is nearest the query; words say P2 ("graph parsing").
TEXTS = {
    "P0": ["we study speech recognition.", "results improve."],
    "P1": ["a survey of translation.", "many systems."],
    "P2": ["graph based parsing of sentences.", "parsing graphs is fast."],
    "P3": ["image captions.", "parsing is not covered."],
}
VECS = {"P0": [[1, 0], [0.9, 0.1]], "P1": [[0, 1], [0.1, 0.9]], "P2": [[-1, 0], [-0.9, 0]], "P3": [[0, -1], [0.2, -1]]}


@pytest.fixture
def searcher() -> Searcher:
    vectors = np.array([v for vs in VECS.values() for v in vs], dtype=np.float32)
    offsets = np.array([0, 2, 4, 6, 8], dtype=np.int64)
    corpus = EncodedCorpus(vectors, offsets, list(TEXTS), [f"title {p}" for p in TEXTS], list(TEXTS.values()))
    return Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))


def query(text: str) -> DocBatch:
    return DocBatch.from_list([torch.tensor([[1.0, 0.0]])], ["q"], [[text]])


def test_bm25_stage_ranks_by_words(searcher):
    hits = searcher.search(query("graph parsing"), k=4, stages="bm25")
    assert hits[0].paper_id == "P2" and set(hits[0].stages) == {"bm25"}
    assert [h.paper_id for h in hits] == ["P2", "P3", "P0", "P1"]  # k papers: those sharing no word tied at 0
    assert [h.stages["bm25"] for h in hits[2:]] == [0.0, 0.0]
    ann = searcher.search(query("graph parsing"), k=4, stages="ann")
    assert ann[0].paper_id == "P0" and set(ann[0].stages) == {"ann"}


def test_fused_stage_reports_each_stage_and_follows_the_weight(searcher):
    dense_heavy = searcher.search(query("graph parsing"), k=4, stages="ann,bm25", fuse="z:0.95")
    lexical_heavy = searcher.search(query("graph parsing"), k=4, stages="ann,bm25", fuse="z:0.05")
    assert dense_heavy[0].paper_id == "P0" and lexical_heavy[0].paper_id == "P2"
    p2 = next(h for h in lexical_heavy if h.paper_id == "P2")
    assert set(p2.stages) == {"ann", "bm25", "fused"} and p2.stages["fused"] == pytest.approx(p2.score)
    rrf = searcher.search(query("graph parsing"), k=4, stages="ann,bm25", fuse="rrf", rerank="ot", shortlist=4)
    assert len(rrf) == 4 and all("fused" in h.stages for h in rrf)


def test_bad_stage_and_fusion_specs_are_refused(searcher):
    with pytest.raises(ValueError, match="unknown stages"):
        searcher.search(query("x"), stages="bm25,ann")
    for spec in ("z", "z:1.5", "rrf:0", "sum:0.5"):
        with pytest.raises(ValueError):
            parse_fusion(spec)
    assert parse_fusion("rrf") == ("rrf", 60.0) and parse_fusion("minmax:0.25") == ("minmax", 0.25)


def test_fusion_equals_ranx():
    from ranx import Run, fuse

    rng = np.random.default_rng(0)
    a = {f"d{i}": float(rng.random()) for i in range(20)}
    b = {f"d{i}": float(rng.random()) for i in range(10, 35)}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="unsafe cast")
        for norm, method in (("zmuv", "z"), ("min-max", "minmax")):
            ref = fuse([Run({"q": a}), Run({"q": b})], norm=norm, method="wsum",
                       params={"weights": [0.7, 0.3]}).to_dict()["q"]
            mine = dict(fuse_ranked([a, b], [0.7, 0.3], method))
            assert mine.keys() == ref.keys() and all(mine[d] == pytest.approx(ref[d]) for d in mine)
        ref = fuse([Run({"q": a}), Run({"q": b})], norm=None, method="rrf", params={"k": 60}).to_dict()["q"]
        mine = dict(fuse_ranked([a, b], method="rrf"))
        assert all(mine[d] == pytest.approx(ref[d]) for d in mine)
