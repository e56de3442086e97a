"""Round 46: BM25 (aspire.scoring.lexical, aspire.retrieval.lexical) against a brute-force loop of the documented
formula, and `aspire evaluate`'s out-folder rules (aspire.cli.evaluate_out): `compare --out C/results.json`, C a third
run's results folder (no compared input), replaced that run's results with the comparison."""

from __future__ import annotations

import json
from argparse import Namespace

import numpy as np
import pytest

from aspire.cli.evaluate_out import check_out
from aspire.retrieval.lexical import LexicalStage
from aspire.scoring.lexical import BM25Index
from tests.test_reliability_round23_retrieval import _okapi

TEXTS = ["graph neural networks for molecules molecules", "protein folding with neural nets",
         "BM25 ranking of documents documents documents", "the of and", "Graph kernels graph"]


def _brute_bm25(texts, query, k1=1.25, b=0.75):
    """The module docstring's formula, one loop per word and document (round 23's hand-written Okapi BM25)."""
    return _okapi(texts, query, k1, b)


@pytest.mark.parametrize("k1,b", [(1.25, 0.75), (0.0, 0.5), (2.0, 0.0), (1.5, 1.0)])
def test_bm25_scores_match_a_brute_force_loop(k1, b):
    index = BM25Index(TEXTS, [str(i) for i in range(len(TEXTS))], k1=k1, b=b)
    queries = ["graph molecules", "graph graph", "documents neural", "Graph-neural X", "unknown words", "", "the a"]
    got = index.scores(queries)
    assert got.shape == (len(queries), len(TEXTS)) and got.dtype == np.float32
    for row, query in zip(got, queries):
        np.testing.assert_allclose(row, _brute_bm25(TEXTS, query, k1, b), rtol=1e-6, atol=1e-7)
    assert not got[-3:].any()  # unknown words, empty query, stop words only: 0 everywhere


class _FixedScores:
    def __init__(self, scores):
        self.values, self.ids = np.asarray(scores, dtype=np.float32), [str(i) for i in range(len(scores))]

    def scores(self, queries):
        return self.values[None]


def test_lexical_stage_top_matches_a_sort_with_ties_by_lower_position():
    rng = np.random.default_rng(46)
    for _ in range(500):
        n_papers = int(rng.integers(1, 12))
        scores = rng.choice([0.0, 0.0, 0.5, 1.0, 2.0], n_papers)
        exclude = rng.choice(n_papers, int(rng.integers(0, n_papers + 1))).tolist()
        n, fill = int(rng.integers(0, 14)), bool(rng.integers(2))
        top, got = LexicalStage(_FixedScores(scores)).top("q", n, exclude, fill)
        wanted = sorted((p for p in range(n_papers) if p not in exclude and (fill or scores[p] > 0)),
                        key=lambda p: (-scores[p], p))[:n]
        assert top.tolist() == wanted and len(set(wanted)) == len(wanted)
        np.testing.assert_array_equal(got, scores[wanted])


def _results(folder, doc, name="results.json"):
    folder.mkdir()
    (folder / name).write_text(json.dumps(doc))
    return folder


def test_out_folder_of_another_experiment_is_refused_naming_it(tmp_path):
    out = _results(tmp_path / "a", {"benchmark": "csfcube", "experiment": "expA"})
    with pytest.raises(FileExistsError, match="experiment 'expA'.*experiment 'expB'"):
        check_out(Namespace(command="csfcube", out=str(out)), "expB")
    with pytest.raises(FileExistsError, match="benchmark 'csfcube'"):
        check_out(Namespace(command="reviewers", out=str(out)), "expA")
    check_out(Namespace(command="csfcube", out=str(out)), "expA")  # its own folder: a re-run replaces it


def test_compare_out_may_not_replace_a_third_runs_results(tmp_path):
    a = _results(tmp_path / "a", {"benchmark": "csfcube", "experiment": "expA"}, "run.trec")
    b = _results(tmp_path / "b", {}, "run.trec")
    c = _results(tmp_path / "c", {"benchmark": "csfcube", "experiment": "expC"})
    args = Namespace(command="compare", out=str(c / "results.json"), run_a=str(a / "run.trec"),
                     run_b=str(b / "run.trec"))
    with pytest.raises(FileExistsError, match="experiment 'expC'"):  # once: run C's results became the comparison
        check_out(args)
    probe = _results(tmp_path / "p", {"format": "venue", "model": "minilm"})
    with pytest.raises(FileExistsError, match="format 'venue'"):
        check_out(Namespace(**{**vars(args), "out": str(probe / "results.json")}))
    # a new file, any other existing file (the user's, as documented) and an earlier comparison are still written
    check_out(Namespace(**{**vars(args), "out": str(tmp_path / "new.json")}))
    for name, text in (("notes.txt", "notes"), ("empty.json", "{}"), ("list.json", "[1, 2]")):
        (tmp_path / name).write_text(text)
        check_out(Namespace(**{**vars(args), "out": str(tmp_path / name)}))
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"MRR": {"a": 1.0, "per_unit_delta": {"q1": 0.5}}}))
    check_out(Namespace(**{**vars(args), "out": str(earlier)}))
