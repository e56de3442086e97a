"""Round 11, the search pipeline against brute force: every first stage x re-ranker over a small flat index equals
scoring every paper with the same scorers and taking the best k; the cross-encoder stage reads the `cross_top` papers
it is documented to also when the shortlist is shorter; `Searcher.exhaustive` breaks ties as `search` does; boolean and
string search arguments are type-checked; a per-call argument of a stage the search does not run is said."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest

from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.config import SearchArgumentError, SearchConfig, checked_search_config, unused_settings
from aspire.index.lexical import stored_bm25
from aspire.retrieval.lexical import selected_text
from aspire.scoring.fusion import fuse_ranked, fusion_weights, normalise, parse_fusion
from aspire.search import Searcher

WORDS = "graph neural text method result data model citation similarity learning".split()
FLAT = IndexBuildConfig(index=IndexConfig(kind="flat"))


def random_index(P: int = 30, D: int = 6, seed: int = 0) -> SentenceIndex:
    """P papers of 1..6 random sentence vectors, words and labels, with whole vectors; every fifth title blank."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, P)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    labels = ["background_label", "method_label", "result_label"]
    corpus = EncodedCorpus(rng.standard_normal((int(offsets[-1]), D)).astype(np.float32), offsets,
                           [f"p{i}" for i in range(P)], [" ".join(rng.choice(WORDS, 2)) if i % 5 else "" for i in range(P)],
                           [[" ".join(rng.choice(WORDS, 4)) + "." for _ in range(n)] for n in lengths],
                           labels=[[labels[j % 3] for j in range(n)] for n in lengths],
                           whole=rng.standard_normal((P, D)).astype(np.float32))
    return SentenceIndex.build(corpus, FLAT, "fp")


def brute_force(searcher: Searcher, query, cfg: SearchConfig, exclude: set[str]) -> list[tuple[str, float]]:
    """The pipeline `cfg` by hand: each first stage scores every paper (one at a time), keeps its best `limit`,
    two lists fused by `aspire.scoring.fusion`; the re-ranker scores the first stage's list paper by paper."""
    index = searcher.index
    keep = [p for p in range(index.n_papers) if index.paper_ids[p] not in exclude]
    limit = cfg.shortlist if cfg.rerank != "none" or cfg.stages == "ann,bm25" else cfg.k  # fused: lists that deep

    def one(method: str, p: int) -> float:
        return float(searcher.scorer(method, cfg).score(query, index.gather([p], texts=False))[0, 0])

    lists = []
    for stage in cfg.stages.split(","):
        if stage == "ann":
            scores = {index.paper_ids[p]: one("minl2", p) for p in keep}
        elif stage == "whole":
            w, q = np.asarray(index.whole, dtype=np.float64), query.whole[0].double().numpy()
            cos = w @ q / np.linalg.norm(w, axis=1) / np.linalg.norm(q)
            scores = {index.paper_ids[p]: float(cos[p]) for p in keep}
        else:
            bm25 = stored_bm25(index, cfg.bm25_k1, cfg.bm25_b).scores([selected_text(query)])[0]
            scores = {index.paper_ids[p]: float(bm25[p]) for p in keep
                      if bm25[p] > 0 or cfg.stages == "bm25"}  # a fused list holds only matching papers
        lists.append(dict(sorted(scores.items(), key=lambda kv: -kv[1])[:limit]))  # ties: index order
    if len(lists) == 1:
        ranked = list(lists[0].items())
    else:
        method, value = parse_fusion(cfg.fuse)
        ranked = fuse_ranked(lists, fusion_weights(method, value, 2), method, value)[:limit]
    if cfg.rerank == "none":
        return ranked[: cfg.k]
    first = np.array([x for _, x in ranked])
    if cfg.rerank == "maxpassage":
        depth = min(cfg.passage_depth, len(ranked))
        own = normalise(np.array([one("maxpassage", index.positions[pid]) for pid, _ in ranked[:depth]]), "z")
        final = (cfg.passage_beta * (first - first[:depth].mean()) / first[:depth].std()
                 + (1 - cfg.passage_beta) * np.concatenate([own, np.full(len(ranked) - depth, own.min())]))
    else:
        final = np.array([one(cfg.rerank, index.positions[pid]) for pid, _ in ranked])
    return [(ranked[i][0], float(final[i])) for i in np.argsort(-final, kind="stable")[: cfg.k]]


@pytest.mark.parametrize("stages", ["ann", "bm25", "ann,bm25", "whole"])
def test_every_pipeline_equals_scoring_every_paper_by_hand(stages):
    index = random_index()
    searcher = Searcher(index)
    for rerank in ("none", "minl2", "ot", "maxpassage", "hybrid"):
        for paper, selection, exclude, k, shortlist in (("p3", None, None, 5, 100), ("p9", "method", ["p1", "p2"], 3, 8), ("p0", [0, 4], [], 4, 4)):
            query = searcher.query_from_index(paper, selection)
            hits = searcher.search(query, k=k, rerank=rerank, shortlist=shortlist, stages=stages, exclude=exclude)
            cfg = checked_search_config(searcher.config, k=k, rerank=rerank, shortlist=shortlist, stages=stages)
            want = brute_force(searcher, query, cfg, set(searcher._excluded(query, exclude)))
            assert [h.paper_id for h in hits] == [pid for pid, _ in want], (stages, rerank, paper)
            np.testing.assert_allclose([h.score for h in hits], [x for _, x in want], atol=2e-3)
            assert not {h.paper_id for h in hits} & set([paper] if exclude is None else exclude)


class RecordingCrossEncoder:
    """A stand-in cross-encoder: logits rank the previous list backwards; it records how many papers it read."""

    seconds = 0.0

    def __init__(self) -> None:
        self.read: list[int] = []

    def head_scores(self, text, previous, texts, top) -> dict[str, float]:
        self.read.append(len(texts))
        return {pid: float(i) for i, (pid, _) in enumerate(previous[:top])}


@pytest.mark.parametrize("rerank", ["minl2", "ot", "maxpassage"])
def test_the_cross_encoder_reads_cross_top_papers_when_the_shortlist_is_shorter(rerank, caplog):
    cross = RecordingCrossEncoder()
    searcher = Searcher(random_index(P=80), SearchConfig(cross_top=30, shortlist=10, stages="bm25"), cross_encoder=cross)
    with caplog.at_level(logging.WARNING, logger="aspire"):
        hits = searcher.search(searcher.query_from_index("p3"), k=5, rerank=rerank, cross_encoder=True)
    # a shortlist of 10 gave it 10 of its 30 papers, and warned "found 10 of the k=30 papers" of an 80-paper index
    assert cross.read == [30]
    assert len(hits) == 5 and "found" not in caplog.text


def test_exhaustive_breaks_ties_by_lower_position_as_search_does():
    rng = np.random.default_rng(0)
    base = rng.standard_normal((1, 4)).astype(np.float32)
    vectors = np.concatenate([base + 0.01 * (i % 3) for i in range(40)])  # three groups of identical papers
    index = SentenceIndex.build(EncodedCorpus(vectors, np.arange(41), [f"p{i}" for i in range(40)], ["t"] * 40,
                                              [["s."]] * 40), FLAT, "fp")
    searcher = Searcher(index)
    query = searcher.query_from_index("p0")
    searched = [index.position(h.paper_id) for h in searcher.search(query, k=20)]
    assert searched == [*range(3, 40, 3), 1, 4, 7, 10, 13, 16, 19]
    for method in ("minl2", "ot"):
        top, scores = searcher.exhaustive(query, method, k=20)
        assert top.tolist() == searched, method  # torch.topk returned the tied papers in no stated order
        assert (np.diff(scores) <= 0).all()


@pytest.mark.parametrize("key, value", [("cross_encoder", "no"), ("cross_encoder", 1), ("exclude_query", "false"),
                                        ("exclude_query", 0), ("fuse", 0.5)])
def test_boolean_and_string_search_arguments_are_type_checked(key, value):
    # cross_encoder="no" turned the stage on (a non-empty string is true); fuse=0.5 raised AttributeError
    with pytest.raises(SearchArgumentError, match=key):
        checked_search_config(SearchConfig(), **{key: value})
    assert checked_search_config(SearchConfig(), cross_encoder=False, exclude_query=True, fuse="rrf").fuse == "rrf"


def test_a_search_argument_of_a_stage_not_run_is_said(caplog):
    searcher = Searcher(random_index())
    query = searcher.query_from_index("p3")
    with caplog.at_level(logging.WARNING, logger="aspire.search"):
        searcher.search(query, k=3, stages="ann", fuse="rrf", rerank="ot", passage_window=3)
    assert "fuse (read only by the fused first stage" in caplog.text
    assert "passage_window (read only by rerank maxpassage" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aspire.search"):
        searcher.search(query, k=3, stages="ann,bm25", fuse="rrf", rerank="maxpassage", passage_window=3, passage_beta=0.5)
    assert "not used" not in caplog.text
    cfg = SearchConfig(stages="bm25", rerank="none")
    unused = unused_settings(cfg, ["k", "shortlist", "ot_tau", "bm25_k1", "sentence_k", "cross_top", "exclude_query"])
    assert [u.split()[0] for u in unused] == ["shortlist", "ot_tau", "sentence_k", "cross_top"]


def test_one_numpy_integer_paper_id_is_excluded():
    corpus = EncodedCorpus(np.eye(4, dtype=np.float32), np.arange(5), ["1", "2", "3", "4"], ["t"] * 4, [["s."]] * 4)
    searcher = Searcher(SentenceIndex.build(corpus, FLAT, "fp"))
    hits = searcher.search(searcher.query_from_index("1"), k=3, exclude=np.int64(2))  # was iterated: TypeError
    assert [h.paper_id for h in hits].count("2") == 0 and len(hits) == 3


def test_a_fused_list_short_on_an_ivf_index_blames_the_ivf_not_the_index_size(caplog):
    rng = np.random.default_rng(5)
    corpus = EncodedCorpus(rng.standard_normal((400, 6)).astype(np.float32), np.arange(0, 401, 2),
                           [f"p{i}" for i in range(200)], ["t"] * 200, [["graph text.", "data model."]] * 200)
    ivf = IndexBuildConfig(index=IndexConfig(kind="ivf", ivf_nlist=50, ivf_nprobe=1))
    searcher = Searcher(SentenceIndex.build(corpus, ivf, "fp"))
    query = searcher.query_from_index("p3")
    query = replace(query, sentences=[["unmatched words"] * 2])  # BM25 matches no paper
    with caplog.at_level(logging.WARNING, logger="aspire.search"):
        hits = searcher.search(query, k=10, stages="ann,bm25", exclude=[f"p{i}" for i in range(4, 190)])
    assert len(hits) < 10  # one probed list of 50 holds fewer than 10 of the 14 papers left
    # it said "the index holds 14 paper(s) besides the excluded ones", which is no reason for 14 > found
    assert "the ivf index reached no more of its 14 paper(s)" in caplog.text
    assert "holds 14" not in caplog.text
