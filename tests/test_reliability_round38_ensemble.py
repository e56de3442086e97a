"""Round 38: the ensemble's fusion per query (aspire.evaluate.ensemble) and the lexical first stage
(aspire.retrieval.lexical), checked against hand computations on tiny inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.evaluate import ensemble
from aspire.evaluate.ensemble import EnsembleConfig, EnsembleMember, fused_rows, load_ensemble
from aspire.evaluate.suite import Runner
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.retrieval.lexical import LexicalStage, selected_text
from aspire.scoring.lexical import BM25Index
from aspire.search import Searcher

RUN_A = {"q1": [("d1", 3.0), ("d2", 2.0), ("d3", 0.5)], "q2": [("d2", 1.0), ("d1", 0.0)]}
RUN_B = {"q1": [("d3", 9.0), ("d1", 4.0)], "q2": [("d1", 7.0), ("d2", 5.0)]}


def _fake_runner(monkeypatch, runs):
    """A lexical runner (every member applies) whose ensemble hook fuses `runs` and returns the fused run."""
    def hook(bench, data, members, out, settings, fuse):
        return fuse(runs)
    monkeypatch.setitem(ensemble.RUNNERS, "context2doc", Runner(rows=None, ensemble=hook, lexical=True))


def _config(fusion, weights=(0.8, 0.2), rrf_k=60.0, names=("alpha", "beta")):
    return EnsembleConfig(fusion=fusion, rrf_k=rrf_k, members=[
        EnsembleMember(name=names[0], model="m", scorer="abstract", weight=weights[0]),
        EnsembleMember(name=names[1], model="bm25", weight=weights[1])])


def test_ensemble_rrf_equals_hand_computation(monkeypatch, tmp_path):
    _fake_runner(monkeypatch, [RUN_A, RUN_B])
    fused, why = fused_rows("context2doc", _config("rrf", rrf_k=10.0), tmp_path, tmp_path, {})
    assert why is None
    want = {"q1": {"d1": 0.8 / 11 + 0.2 / 12, "d2": 0.8 / 12, "d3": 0.8 / 13 + 0.2 / 11},
            "q2": {"d2": 0.8 / 11 + 0.2 / 12, "d1": 0.8 / 12 + 0.2 / 11}}
    for q, scores in want.items():
        assert [d for d, _ in fused[q]] == sorted(scores, key=lambda d: -scores[d])
        assert dict(fused[q]) == pytest.approx(scores, rel=1e-12)


def test_ensemble_z_fusion_equals_hand_computation(monkeypatch, tmp_path):
    _fake_runner(monkeypatch, [RUN_A, RUN_B])
    fused, _ = fused_rows("context2doc", _config("z"), tmp_path, tmp_path, {})

    def z(run):
        v = np.array([s for _, s in run])
        return {d: (s - v.mean()) / v.std() for d, s in run}
    for q in RUN_A:
        za, zb = z(RUN_A[q]), z(RUN_B[q])
        want = {d: 0.8 * za.get(d, 0.0) + 0.2 * zb.get(d, 0.0) for d in set(za) | set(zb)}
        assert dict(fused[q]) == pytest.approx(want, rel=1e-12)


def test_ensemble_member_missing_a_query_is_refused_naming_it(monkeypatch, tmp_path):
    _fake_runner(monkeypatch, [RUN_A, {"q1": RUN_B["q1"]}])
    with pytest.raises(ValueError, match=r"alpha and beta rank different queries.*q2"):
        fused_rows("context2doc", _config("z"), tmp_path, tmp_path, {})


def test_ensemble_member_ranking_a_document_twice_is_refused_naming_it(monkeypatch, tmp_path):
    twice = {"q1": [("d1", 3.0), ("d1", 2.0)], "q2": RUN_B["q2"]}
    _fake_runner(monkeypatch, [RUN_A, twice])
    with pytest.raises(ValueError, match=r"run beta: query q1 ranks document\(s\) \['d1'\] twice"):
        fused_rows("context2doc", _config("rrf"), tmp_path, tmp_path, {})


@pytest.mark.parametrize("text, message", [
    ("fusion: borda\nmembers: [{name: a, model: bm25}, {name: b, model: bm25}]",
     r"unknown fusion 'borda'; valid: z, minmax, rrf"),
    ("members: [{name: a, model: m, scorer: nope}, {name: b, model: bm25}]",
     r"members\[0\] \(a\): unknown scorer 'nope'; valid: .*abstract"),
])
def test_unknown_fusion_or_scorer_is_refused_listing_the_valid_names(tmp_path, text, message):
    path = tmp_path / "e.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_ensemble(path)


TEXTS = ["graph parsing of graph sentences", "speech recognition", "parsing graphs fast",
         "image captions and image parsing graph"]


def _lucene_bm25(query: str, k1: float = 1.25, b: float = 0.75) -> list[float]:
    """bm25s' `lucene` BM25 by hand: idf log(1 + (N - df + .5) / (df + .5)), tf / (tf + k1 (1 - b + b dl / avgdl))."""
    docs = [t.split() for t in TEXTS]
    avg = sum(map(len, docs)) / len(docs)
    out = []
    for d in docs:
        total = 0.0
        for w in query.split():
            df = sum(w in other for other in docs)
            if df:
                tf = d.count(w)
                total += math.log(1 + (len(docs) - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * len(d) / avg))
        out.append(total)
    return out


def test_bm25_stage_scores_equal_the_formula_and_leave_out_excluded_papers():
    stage = LexicalStage(BM25Index(TEXTS, ["a", "b", "c", "d"], stopwords=None))
    want = np.array(_lucene_bm25("graph parsing"))
    top, scores = stage.top("graph parsing", 4, exclude=[0])
    assert top.tolist() == [3, 2, 1] and scores == pytest.approx(want[[3, 2, 1]], rel=1e-5)
    top, _ = stage.top("graph parsing", 4, exclude=[0], fill=False)
    assert top.tolist() == [3, 2]  # no zero-score fill for a list to fuse
    top, scores = stage.top("speech", 3, exclude=[1])
    assert 1 not in top.tolist() and top.tolist() == [0, 2, 3] and not scores.any()


def test_query_text_is_exactly_its_selected_sentences():
    q = DocBatch.from_list([torch.eye(3)], ["q"], [["alpha one.", "beta two.", "gamma three."]])
    assert selected_text(q) == "alpha one. beta two. gamma three."
    assert selected_text(q.select_sentences([[2, 0]])) == "alpha one. gamma three."


@pytest.mark.parametrize("stages", ["bm25", "ann,bm25"])
def test_first_stage_never_returns_an_excluded_paper(stages):
    texts = {"P0": ["graph parsing."], "P1": ["speech."], "P2": ["graph parsing graphs."], "P3": ["images."]}
    vectors = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], dtype=np.float32)
    corpus = EncodedCorpus(vectors, np.arange(5, dtype=np.int64), list(texts), list(texts), list(texts.values()))
    searcher = Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))
    query = DocBatch.from_list([torch.tensor([[1.0, 0.0]])], ["q"], [["graph parsing"]])
    hits = searcher.search(query, k=4, stages=stages, exclude=["P0", "P2"])
    assert {h.paper_id for h in hits} <= {"P1", "P3"} and hits


def test_reviewer_ensemble_members_predicting_for_different_reviewers_are_named(tmp_path, monkeypatch):
    # the reviewer runner's own check said only "ensemble members predicted for different reviewers": now it names
    # the two members and a reviewer only one of them predicted for
    from types import SimpleNamespace

    from aspire.benchmarks.reviewers import load_reviewer_set, prediction_files
    from aspire.evaluate import reviewer_run
    from aspire.io import write_json
    from tests.test_benchmarks import make_reviewer_set

    data = make_reviewer_set(tmp_path / "rm")
    load_reviewer_set(data)  # the fixture is a valid reviewer set
    reviewers = {"a": ["r1", "r2", "r3"], "b": ["r1", "r2"]}

    def fake_run(rset, model, scorers, folder, name, aggregate, options=None):
        for path in prediction_files(folder / "predictions", name, rset):
            write_json(path, {r: {"s1": 0.5, "s2": 0.1} for r in reviewers[name]})

    monkeypatch.setattr(reviewer_run, "run_reviewers", fake_run)
    members = [SimpleNamespace(name=n, model="m", scorer="minl2", options={}) for n in ("a", "b")]
    with pytest.raises(ValueError, match=r"members a and b predicted for different reviewers \(e.g. \['r3'\]\)"):
        reviewer_run.ensemble_rows(None, data, members, tmp_path / "out", {"aggregate": "max"}, lambda runs: runs[0])
