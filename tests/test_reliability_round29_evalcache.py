"""Correctness sweep, round 29: the evaluation's vector cache, pool ranking and TREC files.

A cache entry is read back only for the same fingerprint, mode, options and papers, and a damaged entry is
rebuilt with a warning; pools rank as a brute-force sort does (ties in pool order, nothing outside the pool);
TREC run and qrels files round-trip, and what one side writes the other reads: a negative grade, a document
ranked twice and numbers Python reads but trec_eval does not are refused."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.benchmarks import runs
from aspire.data.papers import Paper

PAPERS = [Paper("a", "t", ["x", "y"]), Paper("b", "u", ["z"])]


class _Counting:
    """An encoder of papers to (n_sentences, 3) vectors that counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, ps):
        self.calls += 1
        return DocBatch.from_list([torch.full((len(p.sentences), 3), float(i + 1)) for i, p in enumerate(ps)],
                                  [p.paper_id for p in ps], [p.sentences for p in ps],
                                  torch.arange(len(ps) * 3, dtype=torch.float32).reshape(len(ps), 3))


@pytest.mark.parametrize("change", ["fingerprint", "mode", "options", "option_value", "paper_id", "title",
                                    "sentence", "sentence_order", "paper_order", "one_paper_less"])
def test_every_input_of_the_cache_key_gives_a_miss_when_changed(tmp_path, change):
    from aspire.evaluate import cache

    base = dict(fingerprint="v2-0123456789abcdef", mode="independent", options={"normalize": True},
                papers=list(PAPERS))
    encode = _Counting()

    def run(fingerprint, mode, options, papers):
        return cache.cached_encode_entry(encode, papers, fingerprint, mode, options, tmp_path)

    run(**base)
    _, hit, first = run(**base)
    assert hit is True and encode.calls == 1
    other = dict(base)
    p0, p1 = PAPERS
    other.update({
        "fingerprint": {"fingerprint": "v2-0123456789abcdee"},
        "mode": {"mode": "abstract"},
        "options": {"options": {"normalize": True, "max_length": 64}},
        "option_value": {"options": {"normalize": False}},
        "paper_id": {"papers": [Paper("a2", p0.title, p0.sentences), p1]},
        "title": {"papers": [Paper("a", "t2", p0.sentences), p1]},
        "sentence": {"papers": [Paper("a", p0.title, ["x", "y."]), p1]},
        "sentence_order": {"papers": [Paper("a", p0.title, ["y", "x"]), p1]},
        "paper_order": {"papers": [p1, p0]},
        "one_paper_less": {"papers": [p0]},
    }[change])
    batch, hit, path = run(**other)
    assert hit is False and encode.calls == 2 and path != first
    assert batch.paper_ids == [p.paper_id for p in other["papers"]]


def _damage(kind, path):
    from aspire.storage import record_path, write_record

    data = path.read_bytes()
    if kind == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "flipped":  # same size, one byte changed
        path.write_bytes(data[:-20] + bytes([data[-20] ^ 0xFF]) + data[-19:])
    elif kind == "no_record":
        record_path(path).unlink()
    elif kind == "garbled_record":
        record_path(path).write_text("{not json")
    elif kind == "other_papers":  # a well-formed, recorded entry of other papers under this entry's name
        from aspire.evaluate.cache import _save

        _save(path, _Counting()([Paper("zz", "t", ["x", "y"]), Paper("b", "u", ["z"])]))
    elif kind == "not_torch":  # recorded garbage: the record matches, the payload does not load
        path.write_bytes(b"garbage" * 10)
        write_record(path)


@pytest.mark.parametrize("kind", ["truncated", "flipped", "no_record", "garbled_record", "other_papers",
                                  "not_torch"])
def test_a_damaged_cache_entry_is_never_served_it_is_rebuilt_with_a_warning(tmp_path, caplog, kind):
    from aspire.evaluate import cache

    encode = _Counting()
    cold, _, path = cache.cached_encode_entry(encode, PAPERS, "fp", "contextual", {}, tmp_path, needs_whole=True)
    _damage(kind, path)
    with caplog.at_level(logging.WARNING, logger="aspire"):
        batch, hit, again = cache.cached_encode_entry(encode, PAPERS, "fp", "contextual", {}, tmp_path,
                                                      needs_whole=True)
    assert hit is False and encode.calls == 2 and again == path
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and str(path) in warned[0] and "encoding again" in warned[0]
    assert torch.equal(batch.emb, cold.emb) and batch.paper_ids == ["a", "b"]
    read, hit, _ = cache.cached_encode_entry(encode, PAPERS, "fp", "contextual", {}, tmp_path, needs_whole=True)
    assert hit is True and encode.calls == 2  # rewritten whole
    assert torch.equal(read.emb, cold.emb) and torch.equal(read.mask, cold.mask) and torch.equal(read.whole, cold.whole)
    assert read.sentences == cold.sentences


class _Cosine:
    """Cosine similarity in float32, the brute force's in float64 (ties are exact copies of a vector)."""

    def score(self, q, c):
        qv = torch.nn.functional.normalize(q.emb[:, 0], dim=-1)
        cv = torch.nn.functional.normalize(c.emb[:, 0], dim=-1)
        return qv @ cv.T  # (1, P)


def test_rank_pools_orders_as_a_brute_force_sort_ties_in_pool_order_and_only_the_pool():
    from aspire.evaluate.rank import rank_pools

    rng = np.random.default_rng(29)
    base = rng.integers(-3, 4, size=(6, 4)).astype(np.float64)
    vecs = np.concatenate([base, base[[1, 3, 1]]])  # candidates 6, 7, 8 tie with 1, 3, 1
    ids = [f"c{i}" for i in range(len(vecs))]
    cands = DocBatch.from_list([torch.tensor(v[None], dtype=torch.float32) for v in vecs], ids, [["s"]] * len(ids))
    qv = rng.normal(size=(2, 4))
    queries = DocBatch.from_list([torch.tensor(v[None], dtype=torch.float32) for v in qv], ["q0", "q1"],
                                 [["s"]] * 2)
    pools = {"q0": ["c8", "c2", "c1", "c6", "c7", "c3", "c0"], "q1": ["c6", "c1", "c4"]}
    ranked = rank_pools(queries, cands, pools, _Cosine())
    for qi, (qid, pool) in enumerate(pools.items()):
        sims = {c: float(vecs[int(c[1:])] @ qv[qi] / np.linalg.norm(vecs[int(c[1:])]) / np.linalg.norm(qv[qi]))
                for c in pool}
        want = sorted(pool, key=lambda c: (-round(sims[c], 6), pool.index(c)))  # ties: pool order
        assert [c for c, _ in ranked[qid]] == want
        assert [s for _, s in ranked[qid]] == pytest.approx([sims[c] for c in want], abs=1e-6)
    assert {c for c, _ in ranked["q1"]} == {"c6", "c1", "c4"}  # nothing outside the pool


def test_rank_pools_refuses_a_pool_that_names_a_candidate_twice():
    from aspire.evaluate.rank import rank_pools

    batch = DocBatch.from_list([torch.ones(1, 3), torch.ones(1, 3) * 2], ["q", "a"], [["s"], ["s"]])
    with pytest.raises(ValueError, match=r"query q: its pool names candidates \['a'\] more than once"):
        rank_pools(batch.index([0]), batch, {"q": ["a", "a"]}, _Cosine())  # was [a, a] ranked


def test_bm25_rankings_ties_keep_pool_order_and_rank_the_pool_alone():
    from aspire.benchmarks.pools import PoolSet
    from aspire.evaluate.pool_stages import bm25_rankings
    from aspire.scoring.lexical import BM25Index, paper_text

    papers = {p.paper_id: p for p in [
        Paper("q", "graph neural networks", ["we study graph neural networks ."]),
        Paper("d1", "cooking", ["a recipe for bread ."]),
        Paper("d2", "graph", ["graph networks for molecules ."]),
        Paper("d3", "graph", ["graph networks for molecules ."]),  # the same text as d2: a tie
        Paper("d4", "neural networks", ["graph neural networks are studied ."]),
        Paper("d5", "graph neural networks", ["we study graph neural networks ."]),  # another query's pool alone
        Paper("q2", "bread", ["bread ."]),
    ]}
    pool_set = PoolSet("t", {"": {"q": {"d3": 0, "d1": 0, "d2": 1, "d4": 1}, "q2": {"d5": 0, "d1": 1}}})
    out = bm25_rankings(pool_set, papers, {})
    ids = sorted(pool_set.paper_ids())
    index = BM25Index([paper_text(papers[p]) for p in ids], ids, 1.25, 0.75)
    row = index.scores([paper_text(papers["q"])])[0]
    pool = ["d3", "d1", "d2", "d4"]
    want = sorted(pool, key=lambda c: (-float(row[ids.index(c)]), pool.index(c)))
    assert [c for c, _ in out[""]["q"]] == want
    assert want.index("d3") < want.index("d2")  # the tie kept pool order
    assert "d5" not in dict(out[""]["q"]) and "q" not in dict(out[""]["q"])


def test_trec_run_and_qrels_round_trip_exactly(tmp_path):
    rng = np.random.default_rng(0)
    run = {f"q{i}": sorted(((f"d{j}", float(s)) for j, s in enumerate(rng.normal(size=7) / 3)),
                           key=lambda x: -x[1]) for i in range(3)}
    run["q0"][1] = (run["q0"][1][0], run["q0"][0][1])  # a tie in score: read back in rank order
    runs.write_run(tmp_path / "run.trec", run, "tag")
    assert runs.read_run(tmp_path / "run.trec") == run
    qrels = {"q0": {"d1": 2, "d0": 0}, "q1": {"d3": 1}, "q2": {"d6": 3, "d2": 0}}
    runs.write_qrels(tmp_path / "qrels.trec", qrels)
    assert runs.read_qrels(tmp_path / "qrels.trec") == qrels


def test_read_qrels_refuses_a_negative_grade_naming_the_file_and_line(tmp_path):
    path = tmp_path / "qrels.trec"
    path.write_text("q 0 b 1\nq 0 a -1\nq 0 c 0\n")
    with pytest.raises(ValueError, match=r"qrels\.trec:2: query q document a has grade -1; grades are whole numbers "
                                         r">= 0"):
        runs.read_qrels(path)  # was read, and bpref counted 'a' as judged non-relevant (0.0; trec_eval's: 1.0)
    path.write_text("q 0 b 1\nq 0 a -0\n")
    assert runs.read_qrels(path) == {"q": {"b": 1, "a": 0}}


def test_write_qrels_and_per_query_refuse_a_negative_grade(tmp_path):
    with pytest.raises(ValueError, match=r"query q document a: grade -2 is not a whole number >= 0"):
        runs.write_qrels(tmp_path / "qrels.trec", {"q": {"a": -2, "b": 1}})  # was written; read_qrels refuses it
    assert not (tmp_path / "qrels.trec").exists()
    with pytest.raises(ValueError, match=r"negative grade \(e\.g\. query q document a: -1\)"):
        runs.per_query({"q": {"a": -1, "b": 1}}, {"q": [("a", 2.0), ("b", 1.0)]}, ["bpref"])  # was bpref 0.0


def test_read_qrels_refuses_a_grade_in_other_digits_than_ascii(tmp_path):
    path = tmp_path / "qrels.trec"
    path.write_text("q 0 a \u0661\n")  # ARABIC-INDIC DIGIT ONE: Python's int() reads 1, C's atoi 0
    with pytest.raises(ValueError, match=r"qrels\.trec:1: expected 'qid 0 docid grade' with an integer grade"):
        runs.read_qrels(path)


@pytest.mark.parametrize("rank, score", [("1_0", "0.5"), ("1", "1_5.0"), ("\u0661", "0.5"), ("1", "\u0661.5")])
def test_read_run_refuses_numbers_python_reads_and_trec_eval_does_not(tmp_path, rank, score):
    path = tmp_path / "run.trec"
    path.write_text(f"q Q0 a {rank} {score} t\n")  # int('1_0') is 10 and float('1_5.0') 15.0; C's atoi / atof 1
    with pytest.raises(ValueError, match=r"run\.trec:1: rank and score must be numbers"):
        runs.read_run(path)
    path.write_text("q Q0 a 1 1e-3 t\nq Q0 b 2 .5e-4 t\n")
    assert runs.read_run(path) == {"q": [("a", 1e-3), ("b", 0.5e-4)]}


def test_write_run_refuses_a_document_ranked_twice_for_a_query(tmp_path):
    with pytest.raises(ValueError, match=r"query q ranks \['a'\] more than once"):
        runs.write_run(tmp_path / "run.trec", {"q": [("a", 2.0), ("b", 1.0), ("a", 0.5)]}, "t")
    assert not (tmp_path / "run.trec").exists()  # was written, and read_run refused the file it wrote
