"""Round-4 reliability of the retrieval stages: fusion settings, ties at a stage's cut, the index's papers file,
BM25 and OT top-k settings and the cross-encoder stage's options."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.disk import IndexFormatError
from aspire.index.texts import read_index_papers
from aspire.retrieval.crossencoder import RerankOptions
from aspire.retrieval.lexical import LexicalStage
from aspire.scoring.fusion import fuse_ranked, parse_fusion
from aspire.scoring.lexical import BM25Index
from aspire.scoring.ot_topk import ot_top_k_dist
from aspire.search import Searcher


def _searcher(texts: list[list[str]], whole: np.ndarray | None = None) -> Searcher:
    """A flat index of one 2-d sentence vector a sentence (all alike), papers P0, P1, ... with `texts`."""
    lengths = [len(t) for t in texts]
    vectors = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (sum(lengths), 1))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = [f"P{i}" for i in range(len(texts))]
    corpus = EncodedCorpus(vectors, offsets, ids, [f"title {i}" for i in ids], texts, whole=whole)
    return Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))


def _query(text: str, whole: list[float] | None = None) -> DocBatch:
    return DocBatch.from_list([torch.tensor([[1.0, 0.0]])], ["q"], [[text]],
                              None if whole is None else torch.tensor([whole]))


# ---- fusion ----------------------------------------------------------------------------------------------------
def test_rrf_with_an_infinite_k_is_refused_not_ranked_by_id():
    # rrf:inf scored every paper 1 / inf = 0, so the fused list came out in paper-id order
    with pytest.raises(ValueError, match="finite"):
        parse_fusion("rrf:inf")
    searcher = _searcher([["graph parsing."], ["graph parsing."], ["speech."]])
    with pytest.raises(ValueError, match="finite"):
        searcher.search(_query("parsing"), k=3, stages="ann,bm25", fuse="rrf:inf")
    for k in (float("inf"), 0.0, -1.0, float("nan")):  # the API: K <= 0 divided by zero or flipped a rank's sign
        with pytest.raises(ValueError, match="rrf's K"):
            fuse_ranked([{"a": 1.0, "b": 0.5}], method="rrf", rrf_k=k)
    assert parse_fusion("rrf:20") == ("rrf", 20.0)


def test_fusion_names_the_list_and_document_whose_score_is_not_finite():
    with pytest.raises(ValueError, match=r"list 1 scores document 'd2' nan"):
        fuse_ranked([{"d1": 1.0}, {"d1": 0.5, "d2": float("nan")}])


# ---- ties at a stage's cut -------------------------------------------------------------------------------------
def test_bm25_stage_keeps_the_lowest_positions_of_papers_tied_at_its_cut():
    # 200 papers score alike: the 5 best were an arbitrary five of them (positions 131..135), not 0..4
    texts = ["graph parsing"] * 200 + ["parsing graph words more"]
    stage = LexicalStage(BM25Index(texts, [str(i) for i in range(len(texts))]))
    for fill in (True, False):
        top, scores = stage.top("graph", 5, fill=fill)
        assert top.tolist() == [0, 1, 2, 3, 4] and len(set(scores.tolist())) == 1
    top, _ = stage.top("graph", 5, exclude=[0, 2])
    assert top.tolist() == [1, 3, 4, 5, 6]
    top, _ = stage.top("words", 3)  # one paper above the tie (the only one with 'words'), then the zero fill
    assert top.tolist() == [200, 0, 1]


def test_search_bm25_and_whole_stages_break_ties_at_the_cut_by_position():
    n = 200  # (with a few dozen, the partial sort happened to keep the first ones)
    whole = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (n, 1))
    searcher = _searcher([["graph parsing."]] * n, whole=whole)
    hits = searcher.search(_query("graph", whole=[1.0, 0.0]), k=5, stages="bm25", exclude=[])
    assert [h.paper_id for h in hits] == ["P0", "P1", "P2", "P3", "P4"]
    hits = searcher.search(_query("graph", whole=[1.0, 0.0]), k=5, stages="whole", exclude=["P1"])
    assert [h.paper_id for h in hits] == ["P0", "P2", "P3", "P4", "P5"]


# ---- the index's papers file -----------------------------------------------------------------------------------
@pytest.mark.parametrize("record, reason", [
    ({"paper_id": 7, "title": "t", "sentences": ["s"]}, "paper_id must be a non-empty string, got int 7"),
    ({"paper_id": "", "title": "t", "sentences": ["s"]}, "paper_id must be a non-empty string"),
    ({"paper_id": "x", "title": None, "sentences": ["s"]}, "paper 'x': title must be a string"),
    ({"paper_id": "x", "title": "t", "sentences": "one string"}, "paper 'x': sentences must be a list of strings"),
    ({"paper_id": "x", "title": "t", "sentences": ["s"], "labels": "method"}, "paper 'x': labels must be a list"),
    ({"paper_id": "a", "title": "t", "sentences": ["s"]}, "paper_id 'a' repeats line 1's"),
])
@pytest.mark.parametrize("texts", ["memory", "disk"])
def test_index_papers_of_the_wrong_type_or_repeated_are_named(tmp_path, record, reason, texts):
    # an integer id was read as given, so search said the paper was not in the index; a repeated id hid the first
    # paper from every lookup by id (a query by that id silently read the second paper)
    path = tmp_path / "papers.jsonl"
    good = json.dumps({"paper_id": "a", "title": "A", "sentences": ["s"]})
    path.write_text(f"{good}\n{json.dumps(record)}\n", encoding="utf-8")
    with pytest.raises(IndexFormatError, match=rf"papers.jsonl:2: not an index paper record \({reason}"):
        read_index_papers(path, texts=texts)


# ---- BM25, OT top-k and cross-encoder settings -----------------------------------------------------------------
def test_bm25_refuses_an_infinite_k1():
    # k1 = inf scored every document 0 for every query (a ranking in index order, said nowhere)
    with pytest.raises(ValueError, match="finite k1"):
        BM25Index(["graph words", "graph graph"], ["a", "b"], k1=float("inf"))
    assert BM25Index(["graph words", "graph graph"], ["a", "b"], k1=0.0).scores(["graph"]).shape == (1, 2)


def test_ot_top_k_refuses_k_below_one():
    torch.manual_seed(0)
    cost = torch.rand(4, 2, 3)
    q_mask, c_mask = torch.ones(4, 2, dtype=torch.bool), torch.ones(4, 3, dtype=torch.bool)
    for k in (0, -1, 1.5):
        with pytest.raises(ValueError, match="integer k >= 1"):
            ot_top_k_dist(cost, q_mask, c_mask, k, tau=0.1, eps=0.05)
    res = ot_top_k_dist(cost, q_mask, c_mask, 10, tau=0.1, eps=0.05)  # k above the candidates: all solved
    assert sorted(res.solved.tolist()) == [0, 1, 2, 3] and bool(res.exact.all())


def test_rerank_options_refuse_counts_that_are_not_integers():
    # a float top N was accepted and failed later with "slice indices must be integers"
    for kwargs, name in ((dict(top_n=2.5), "top N"), (dict(top_n=True), "top N"), (dict(batch_size=8.0), "batch size"),
                         (dict(max_length=64.5), "max length")):
        with pytest.raises(ValueError, match=f"rerank {name} must be an integer"):
            RerankOptions("m", **kwargs)
    assert RerankOptions("m", np.int64(3)).top_n == 3 and RerankOptions("m", max_length=None).max_length is None


@pytest.mark.parametrize("fuse, message", [("bogus", "fuse: unknown fusion 'bogus'"),
                                           ("z:2", r"fuse: fusion 'z:2': the weight on the first list must be in \[0, 1\]"),
                                           ("rrf:0", "fuse: rrf's K must be a finite number > 0")])
def test_a_bad_fusion_is_refused_whatever_the_stages(fuse, message):
    """`fuse` was read only where two lists are fused: beside `stages=ann` a bad one was accepted unsaid, and
    failed later in a search that did fuse."""
    from aspire.index.config import SearchArgumentError, SearchConfig, checked_search_config

    with pytest.raises(SearchArgumentError, match=message):
        checked_search_config(SearchConfig(), stages="ann", fuse=fuse)
    assert checked_search_config(SearchConfig(), stages="ann", fuse="rrf:20").fuse == "rrf:20"
