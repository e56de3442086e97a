"""Round 12: the benchmarks scored through `aspire search` (`aspire.evaluate.search_run`) against the benchmarks' own
dense runners with the same scorer, and the evaluation's vector cache (`aspire.evaluate.cache`, `encode_papers`) against
fresh encodings: tiny random models, no network."""

from __future__ import annotations

import json
from dataclasses import asdict
from types import SimpleNamespace

import pytest
import torch
from test_benchmarks import make_reviewer_set, tiny_context2doc
from test_pool_stages import LABEL_TO_FACET, PAPERS

from aspire.benchmarks.pools import load_pool_set
from aspire.benchmarks.reviewers import load_reviewer_set, prediction_files, read_predictions
from aspire.benchmarks.runs import read_run
from aspire.data.papers import Paper, read_paper_map
from aspire.encoders import load_encoder
from aspire.evaluate import search_run
from aspire.evaluate.options import EvalOptions
from aspire.evaluate.search_run import pipeline_config, rank_pools_by_search, run_reviewers_search, run_search_pipeline


def _bench(tmp_path, n_queries: int = 8):
    """The tiny context2doc benchmark cut to its first `n_queries` queries (each is encoded alone by the search)."""
    bench = tiny_context2doc(tmp_path)
    bench.queries = dict(list(bench.queries.items())[:n_queries])
    bench.qrels = {q: bench.qrels[q] for q in bench.queries}
    return bench


# ---------------------------------------------------------------- the search config a benchmark runs and records


@pytest.mark.parametrize("pipeline, key", [(["rerank=minl2", "ot_tau=2"], "ot_tau"), (["stages=ann", "fuse=z:0.5"], "fuse"),
                                           (["stages=bm25", "sentence_k=5"], "sentence_k"),
                                           (["rerank=ot", "passage_window=3"], "passage_window")])
def test_a_setting_of_a_stage_the_pipeline_does_not_run_is_refused_before_encoding(pipeline, key):
    """`--search-pipeline rerank=minl2 ot_tau=2` ran min-L2 and recorded `ot_tau=2` among the overrides, as if
    applied; `aspire search` says such a key, the benchmarks now refuse it, naming it, before any model is loaded."""
    why = rf"search-pipeline: a setting of a stage this pipeline does not run: {key} \(read only by"
    with pytest.raises(ValueError, match=why):
        pipeline_config(pipeline)
    with pytest.raises(ValueError, match=why):
        rank_pools_by_search(None, {}, None, pipeline)  # no pool set, no encoder: never reached
    with pytest.raises(ValueError, match=why):
        run_reviewers_search(None, "out", "x", "/no/such/model", pipeline)
    with pytest.raises(ValueError, match=why):
        run_search_pipeline(SimpleNamespace(candidates=list(range(768))), "out", "x", "/no/such/model", pipeline)
    with pytest.raises(ValueError, match="a setting of a stage this pipeline does not run: shortlist"):
        run_search_pipeline(SimpleNamespace(candidates=list(range(768))), "out", "x", "/no/such/model",
                            ["rerank=none", "shortlist=500"])
    assert pipeline_config(["rerank=ot", "ot_tau=2"]).ot_tau == 2.0  # read by the pipeline: taken


def test_exclude_query_is_refused_as_set_by_the_benchmark():
    """Every runner passes its own exclusion (none), so `exclude_query=false` was read by nothing and recorded."""
    why = "'exclude_query' is set by the benchmark .no candidate is left out"
    runners = {"pools": lambda given: rank_pools_by_search(None, {}, None, given),
               "reviewers": lambda given: run_reviewers_search(None, "out", "x", "/no/such/model", given),
               "context2doc": lambda given: run_search_pipeline(SimpleNamespace(candidates=list(range(768))), "out",
                                                                "x", "/no/such/model", given)}
    for name, runner in runners.items():
        with pytest.raises(ValueError, match=why):
            runner(["exclude_query=true" if name == "context2doc" else "exclude_query=false"])


def test_context2doc_results_record_the_search_config_the_queries_ran_with(tmp_path, tiny_model_dir, monkeypatch):
    """results.json recorded stages, fuse, rerank and shortlist only: BM25's k1 and b (an OT run's tau and eps) were
    nowhere but in the overrides, the defaults they fell back on nowhere. It records the resolved config, k the depth."""
    bench = _bench(tmp_path)
    used = []
    answer = search_run.answer_queries

    def spy(searcher, queries, depth):
        used.append(asdict(searcher.config))
        return answer(searcher, queries, depth)

    monkeypatch.setattr(search_run, "answer_queries", spy)
    res = run_search_pipeline(bench, tmp_path / "s", "s", str(tiny_model_dir), ["stages=ann,bm25", "bm25_k1=2"],
                              depth=10)
    recorded = res["search"]["config"]
    assert recorded == {**used[0], "k": 10, "shortlist": 1000}
    assert recorded["bm25_k1"] == 2.0 and recorded["bm25_b"] == 0.75 and recorded["stages"] == "ann,bm25"
    assert json.loads((tmp_path / "s" / "results.json").read_text())["search"]["config"] == recorded


# ---------------------------------------------------------------- the benchmarks' own runners as references


def test_context2doc_search_runs_equal_the_dense_runs_with_ties_and_a_shallow_candidate_set(tmp_path, tiny_model_dir):
    """The search pipeline's run (papers, order and scores, not only the figures) equals the dense runner's with
    the equivalent scorer: rerank minl2 / none over a flat index, OT at the same tau and eps, the whole-vector stage
    beside the abstract scorer. Five candidates are copies of others (exact ties: both break them by candidate
    order) and the depth exceeds the 15 candidates (every query is short of it, counted)."""
    from aspire.evaluate.context2doc_run import run_context2doc

    bench = _bench(tmp_path)
    bench.candidates = [Paper("z" + p.paper_id, p.title, list(p.sentences)) for p in bench.candidates[4::-1]] \
        + bench.candidates
    cases = [("minl2", {}, ["rerank=minl2"]), ("minl2", {}, ["rerank=none"]),
             ("ot", {"tau": 2.0, "eps": 0.1}, ["rerank=ot", "ot_tau=2", "ot_eps=0.1"]),
             ("abstract", {}, ["stages=whole"])]
    for scorer, opts, pipeline in cases:
        name = "-".join(pipeline).replace("=", "_")
        own = run_context2doc(bench, tmp_path / f"own-{name}", "x", str(tiny_model_dir), scorer,
                              EvalOptions(scorer_options=opts), depth=100)
        searched = run_search_pipeline(bench, tmp_path / name, "x", str(tiny_model_dir), pipeline, depth=100)
        a, b = (read_run(tmp_path / folder / "run.trec") for folder in (f"own-{name}", name))
        assert set(a) == set(b) == set(bench.queries)
        for qid in a:
            assert [d for d, _ in b[qid]] == [d for d, _ in a[qid]], (pipeline, qid)
            assert [s for _, s in b[qid]] == pytest.approx([s for _, s in a[qid]], abs=1e-5)
        assert searched["metrics"] == pytest.approx(own["metrics"], abs=1e-9)
        assert searched["short_of_depth"] == {"queries": len(bench.queries), "fewest": len(bench.candidates)}


def _pool_set(root, pools):
    root.mkdir()
    with open(root / "abstracts-toy.jsonl", "w") as fh:
        for pid, (sents, labels) in PAPERS.items():
            fh.write(json.dumps({"paper_id": pid, "title": f"paper {pid}", "abstract": sents,
                                 "pred_labels": labels}) + "\n")
    for facet in ("background", "method"):
        (root / f"test-pid2anns-toy-{facet}.json").write_text(json.dumps(pools))
    pool_set = load_pool_set(root, "toy", ["background", "method"])
    return pool_set, read_paper_map(root / "abstracts-toy.jsonl", pool_set.paper_ids(), needed_by="pooled")


def test_an_empty_pool_is_ranked_empty_as_the_pool_ranking_ranks_it(tmp_path, tiny_model_dir):
    """A query whose pool held only itself (removed by the loader) ranks nothing in the benchmark's own pool
    ranking; the search runner failed on it with "from_docbatch needs a DocBatch carrying paper_ids and sentences".
    Each other pool is its own index: its ranking holds its own candidates, never the query."""
    from aspire.evaluate.rank import rank_pool_set

    pool_set, papers = _pool_set(tmp_path / "set", {
        "q": {"cands": ["c3", "c4", "q", "c1", "c2"], "relevance_adju": [0, 0, 2, 2, 2]},
        "c2": {"cands": ["c4", "c1", "c3"], "relevance_adju": [1, 0, 0]},
        "c4": {"cands": ["c4"], "relevance_adju": [1]}})
    assert sorted(pool_set.self_in_pool) == ["c4_background", "c4_method", "q_background", "q_method"]
    encoder = load_encoder(str(tiny_model_dir))
    for scorer, pipeline in (("minl2", ["rerank=minl2"]), ("ot", ["rerank=ot"])):
        own, _ = rank_pool_set(pool_set, papers, str(tiny_model_dir), scorer, tmp_path / scorer, "x", EvalOptions(),
                               LABEL_TO_FACET)
        searched = rank_pools_by_search(pool_set, papers, encoder, pipeline, LABEL_TO_FACET)
        assert searched == own
        for facet in searched:
            assert searched[facet]["c4"] == []
            assert sorted(searched[facet]["q"]) == ["c1", "c2", "c3", "c4"]
            assert sorted(searched[facet]["c2"]) == ["c1", "c3", "c4"]


def test_a_faceted_pool_set_without_a_label_map_is_refused_by_name(tmp_path, tiny_model_dir):
    """`rank_pools_by_search` on a faceted set with no label map failed with "'NoneType' object has no attribute
    'get'"; it says what is missing, as the pool ranking does."""
    pool_set, papers = _pool_set(tmp_path / "set", {"q": {"cands": ["c1", "c2"], "relevance_adju": [1, 0]}})
    with pytest.raises(ValueError, match="facet 'background' needs a label_to_facet mapping"):
        rank_pools_by_search(pool_set, papers, load_encoder(str(tiny_model_dir)), ["rerank=minl2"], None)


def test_an_archive_holding_a_rated_submission_scores_as_the_reviewer_runner(tmp_path, tiny_model_dir):
    """A reviewer's archive holding a rated submission and a title-only paper: both runners score it alike; each
    draw's own archives are searched (draw 2's are other papers). An archive naming one paper twice once counted it
    twice in the dense runner's `mean` (and failed the search runner); it is now refused where the set is read
    (round 49)."""
    from aspire.evaluate.reviewer_run import run_reviewers

    root = make_reviewer_set(tmp_path / "rm", draws=2)
    arch = root / "d_20_1" / "archives" / "~r1.jsonl"
    lines = arch.read_text().splitlines()
    s1 = json.loads((root / "d_20_1" / "submissions.json").read_text())["s1"]
    extra = [json.dumps(s1), json.dumps({"id": "t-only", "content": {"title": "neural model", "abstract": ""}})]
    arch.write_text("\n".join(lines + extra) + "\n")
    words = "result method task data neural learning".split()
    for r in ("r1", "r2", "r3"):
        recs = [{"id": f"{r}-b{j}", "content": {"title": f"{r} {words[j]}", "abstract": f"a {words[j + 2]} method."}}
                for j in range(3 if r == "r1" else 2)]
        (root / "d_20_2" / "archives" / f"~{r}.jsonl").write_text("\n".join(json.dumps(x) for x in recs) + "\n")
    rset = load_reviewer_set(root)
    # OT's cost of a paper to itself (s1 in r1's archive) is the square root of a rounding error that depends on the
    # batch's shape (about 7e-4 here, or 0): the two runners batch differently
    for scorer, agg, tol in (("minl2", "mean", 1e-5), ("ot", "topk:3", 2e-3)):
        own = run_reviewers(rset, str(tiny_model_dir), [scorer], tmp_path / f"o-{scorer}", "o", agg)
        searched = run_reviewers_search(rset, tmp_path / f"s-{scorer}", "s", str(tiny_model_dir),
                                        [f"rerank={scorer}"], agg)
        pairs = zip(prediction_files(tmp_path / f"o-{scorer}" / "predictions", "o", rset),
                    prediction_files(tmp_path / f"s-{scorer}" / "predictions", "s", rset))
        for a, b in pairs:
            pa, pb = read_predictions(a), read_predictions(b)
            assert pa.keys() == pb.keys()
            for reviewer in pa:
                assert pb[reviewer] == pytest.approx(pa[reviewer], abs=tol)
        assert searched["loss"] == pytest.approx(own["loss"])
        assert searched["search"]["config"]["rerank"] == scorer and searched["search"]["config"]["k"] == "archive size"


# ---------------------------------------------------------------- the vector cache and the encode step


class CountingEncoder:
    """The tiny model, counting the papers it encodes (each call's list kept)."""

    def __init__(self, encoder):
        self.inner, self.calls = encoder, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, papers, **kw):
        self.calls.append([p.paper_id for p in papers])
        return self.inner.encode(papers, **kw)

    def encode_independent(self, papers, **kw):
        self.calls.append([p.paper_id for p in papers])
        return self.inner.encode_independent(papers, **kw)

    def encode_abstract(self, papers, **kw):
        self.calls.append([p.paper_id for p in papers])
        return self.inner.encode_abstract(papers, **kw)


def _papers():
    words = "the model of text learning neural data task method result".split()
    return [Paper(f"p{i}", f"title {words[i % 10]}", [" ".join(words[: (i * 3) % 10 + 1]) + "."] * (1 + (i * 7) % 4))
            for i in range(9)]


def test_a_cache_entry_is_served_only_for_what_it_was_made_from(tmp_path, tiny_model_dir):
    """A hit only for the same encoder fingerprint, encoding, encode options and paper texts (each changed: a
    miss, encoded again); a hit equals the fresh encoding, rows in the papers' order whatever order they come in."""
    from aspire.evaluate.encode import encode_papers

    enc, cache = CountingEncoder(load_encoder(str(tiny_model_dir))), tmp_path / "cache"
    papers = _papers()
    fresh, hit = encode_papers(enc, papers, "contextual", cache, batch_size=4)
    again, hit2 = encode_papers(enc, papers, "contextual", cache, batch_size=3)
    assert (hit, hit2, len(enc.calls)) == (False, True, 1)
    assert again.paper_ids == [p.paper_id for p in papers] and again.sentences == fresh.sentences
    assert torch.equal(again.emb, fresh.emb) and torch.equal(again.mask, fresh.mask)
    assert torch.equal(again.whole, fresh.whole)
    shuffled = papers[::-1]  # another order: another entry, its rows in that order
    back, hit3 = encode_papers(enc, shuffled, "contextual", cache)
    assert not hit3 and back.paper_ids == [p.paper_id for p in shuffled]
    assert torch.allclose(back.index(list(range(len(papers)))[::-1]).emb, fresh.emb, atol=1e-5)
    changed = [papers[0], Paper(papers[1].paper_id, papers[1].title + " x", papers[1].sentences), *papers[2:]]
    retitled, hit4 = encode_papers(enc, changed, "contextual", cache)
    assert not hit4
    for encoding, options in (("independent", {}), ("independent", {"normalize": True}), ("abstract", {}),
                              ("abstract", {"max_length": 16})):
        n = len(enc.calls)
        _, first = encode_papers(enc, papers, encoding, cache, encode_options=options)
        _, second = encode_papers(enc, papers, encoding, cache, encode_options=options)
        assert (first, second, len(enc.calls) - n) == (False, True, 1), (encoding, options)
    other = load_encoder(str(tiny_model_dir), max_length=64)  # other settings: another fingerprint
    assert other.fingerprint() != enc.fingerprint()
    assert encode_papers(other, papers, "contextual", cache)[1] is False


@pytest.mark.parametrize("damage", ["truncate", "flip", "no record", "other papers"])
def test_a_damaged_cache_file_is_refused_and_rebuilt(tmp_path, tiny_model_dir, damage, caplog):
    from aspire.evaluate.cache import cache_path
    from aspire.evaluate.encode import encode_papers
    from aspire.storage import check_record, record_path

    enc, cache = CountingEncoder(load_encoder(str(tiny_model_dir))), tmp_path / "cache"
    papers = _papers()
    fresh, _ = encode_papers(enc, papers, "contextual", cache)
    path = cache_path(cache, enc.fingerprint(), "contextual", {}, papers)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    elif damage == "no record":
        record_path(path).unlink()
    else:  # a file of other papers under this key, with a record that matches it
        other = _papers()[:3]
        encode_papers(enc, other, "contextual", cache)
        other_path = cache_path(cache, enc.fingerprint(), "contextual", {}, other)
        path.write_bytes(other_path.read_bytes())
        record_path(path).write_text(record_path(other_path).read_text())
    n = len(enc.calls)
    rebuilt, hit = encode_papers(enc, papers, "contextual", cache)
    assert not hit and len(enc.calls) == n + 1 and "is not used" in caplog.text
    assert torch.allclose(rebuilt.emb, fresh.emb, atol=1e-6) and rebuilt.paper_ids == fresh.paper_ids
    assert check_record(path) is None and encode_papers(enc, papers, "contextual", cache)[1]
