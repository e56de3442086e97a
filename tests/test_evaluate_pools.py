"""General pool re-ranking evaluator on a small ASPIRE-style set built here; ranking, facets and the cache."""

from __future__ import annotations

import json

import pytest
import torch

from aspire.batch import DocBatch
from aspire.benchmarks.pools import load_pool_set, read_ranked, summarize
from aspire.cli.evaluate import main
from aspire.data.papers import Paper
from aspire.evaluate.cache import cached_encode
from aspire.evaluate.facets import facet_queries
from aspire.evaluate.options import QUERY_TEXTS, default_exp
from aspire.evaluate.pool_run import facet_label_map, run_pools
from aspire.evaluate.rank import rank_pools
from aspire.jsonsafe import strict_loads  # results files must be strict JSON: no bare NaN

SENTS = {
    "p1": ["we propose a new neural model of text", "the model improves the state of the art"],
    "p2": ["a language model for scientific documents", "we show results on two tasks"],
    "p3": ["citation data is based on the paper title", "this method is new"],
    "p4": ["sentence similarity with a neural network", "results show the approach performs well"],
    "p5": ["an aspect of the abstract"],
    "p6": ["document similarity by matching sentences", "we use a neural method", "performance improves"],
    "p7": ["scientific text similarity", "our method uses citation data"],
    "p8": ["the task is data learning", "results improve"],
}
LABELS = {p: (["background_label", "method_label", "result_label"] * 2)[: len(s)] for p, s in SENTS.items()}
POOLS = {
    "p1": {"cands": ["p1", "p2", "p3", "p4", "p5"], "relevance_adju": [3, 2, 0, 1, 0]},  # p1 in its own pool
    "p6": {"cands": ["p2", "p3", "p7", "p8"], "relevance_adju": [0, 1, 2, 0]},
}


def write_toy(root):
    """The toy pool set's papers and its pools (no facet) under `root` (made here)."""
    root.mkdir()
    with open(root / "abstracts-toy.jsonl", "w") as fh:
        for pid, sents in SENTS.items():
            fh.write(json.dumps({"paper_id": pid, "title": f"title {pid}", "abstract": sents,
                                 "pred_labels": LABELS[pid]}) + "\n")
    (root / "test-pid2anns-toy.json").write_text(json.dumps(POOLS))
    return root


@pytest.fixture()
def toy(tmp_path):
    root = write_toy(tmp_path / "toy")
    (root / "test-pid2anns-toy-method.json").write_text(json.dumps(POOLS))
    (root / "toy-evaluation_splits.json").write_text(json.dumps({"p1": "dev", "p6": "test"}))
    ranked = {"p1": [["p4", 0.9], ["p2", 0.8], ["p3", 0.7], ["p5", 0.1]],
              "p6": [["p2", -1.0], ["p7", -2.0], ["p3", -3.0], ["p8", -4.0]]}
    (root / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(ranked))
    return root


def _pools(data, name, out, **kw):
    """`run_pools` with the `EvalOptions` fields among `kw` gathered into its options."""
    from dataclasses import fields

    from aspire.evaluate.options import EvalOptions

    names = {f.name for f in fields(EvalOptions)}
    return run_pools(data, name, out, options=EvalOptions(**{k: kw.pop(k) for k in list(kw) if k in names}), **kw)


def test_load_pool_set_removes_query_from_own_pool(toy):
    ps = load_pool_set(toy, "toy", splits_file=toy / "toy-evaluation_splits.json")
    assert ps.self_in_pool == ["p1"]
    assert list(ps.pools[""]["p1"]) == ["p2", "p3", "p4", "p5"]
    assert ps.splits == {"dev": ["p1"], "test": ["p6"]}
    with pytest.raises(ValueError, match="annotation file not found"):
        load_pool_set(toy, "nope")
    (toy / "bad-splits.json").write_text(json.dumps({"test": ["p1", "ghost"]}))
    with pytest.raises(ValueError, match="unknown queries.*ghost"):
        load_pool_set(toy, "toy", splits_file=toy / "bad-splits.json")


def test_cli_scores_ranked_files_with_threshold(toy, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["pools", "--data", str(toy), "--name", "toy", "--splits", str(toy / "toy-evaluation_splits.json"),
            "--ranked", str(toy), "--exp", "manual", "--out", str(out)]
    assert main(args + ["--threshold", "1"]) == 0
    res = strict_loads((out / "results.json").read_text())
    # p1: relevant p4, p2 at ranks 1, 2 -> AP 1; p6: relevant p7, p3 at ranks 2, 3 -> AP (1/2 + 2/3) / 2
    assert res["summary"]["split:dev"]["MAP"] == pytest.approx(100.0)
    assert res["summary"]["split:test"]["MAP"] == pytest.approx(100 * (1 / 2 + 2 / 3) / 2)
    assert res["summary"]["split:test"]["MRR"] == pytest.approx(50.0)
    assert res["summary"]["all"]["n_queries"] == 2
    assert set(res["metrics"]) == {"MAP", "NDCG%20", "nDCG@10", "P@5", "P@10", "MRR", "bpref"}
    assert "split:test" in capsys.readouterr().out

    assert main(args + ["--threshold", "2"]) == 0
    res2 = strict_loads((out / "results.json").read_text())
    assert res2["summary"]["split:dev"]["MAP"] == pytest.approx(50.0)  # only p2 (rank 2) is relevant at 2
    assert res2["summary"]["split:test"]["MAP"] == pytest.approx(50.0)  # only p7 (rank 2)

    # a threshold nothing reaches: refused, or left out and listed
    assert main(args + ["--threshold", "3"]) == 2
    assert "no candidate with grade >= 3" in capsys.readouterr().err
    assert main(args + ["--threshold", "3", "--skip-no-relevant"]) == 2  # p6 and p1 both empty at 3
    assert "outside" not in capsys.readouterr().err


def test_skip_no_relevant_lists_the_queries(toy, tmp_path):
    pools = dict(POOLS, p6={"cands": ["p2", "p3", "p7", "p8"], "relevance_adju": [0, 1, 1, 0]})
    (toy / "test-pid2anns-toy.json").write_text(json.dumps(pools))
    with pytest.raises(ValueError, match="no candidate with grade >= 2"):
        run_pools(toy, "toy", tmp_path / "o", threshold=2, ranked_dir=toy, exp="manual")
    res = run_pools(toy, "toy", tmp_path / "o", threshold=2, ranked_dir=toy, exp="manual", skip_no_relevant=True)
    assert res["skipped_no_relevant"] == ["p6"]
    assert res["summary"]["all"]["n_queries"] == 1


def test_ranked_file_with_the_query_itself_is_refused(toy, tmp_path):
    ranked = strict_loads((toy / "test-pid2pool-toy-manual-ranked.json").read_text())
    ranked["p1"].append(["p1", 0.0])
    (toy / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(ranked))
    with pytest.raises(ValueError, match=r"query p1: ranking holds 1 ids outside the pool: \['p1'\]"):
        run_pools(toy, "toy", tmp_path / "o", ranked_dir=toy, exp="manual")


class DotScorer:
    """Stand-in scorer: similarity = dot product of the first selected sentence vectors."""

    def score(self, queries: DocBatch, cands: DocBatch):
        q = (queries.emb * queries.mask[..., None]).sum(1)  # (Bq, D)
        c = (cands.emb * cands.mask[..., None]).sum(1)  # (Bc, D)
        return q @ c.T


def test_rank_pools_orders_by_similarity_and_keeps_pool_order_on_ties():
    emb = torch.tensor([[[1.0, 0.0]], [[3.0, 0.0]], [[1.0, 0.0]], [[2.0, 0.0]], [[1.0, 0.0]]])
    batch = DocBatch(emb, torch.ones(5, 1, dtype=torch.bool), ["q", "a", "b", "c", "d"], [["s"]] * 5)
    ranked = rank_pools(batch.index([0]), batch, {"q": ["b", "a", "d", "c"]}, DotScorer())
    assert [c for c, _ in ranked["q"]] == ["a", "c", "b", "d"]
    assert [s for _, s in ranked["q"]] == [3.0, 2.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="not encoded"):
        rank_pools(batch.index([0]), batch, {"q": ["a", "zz"]}, DotScorer())


def test_facet_queries_narrows_the_mask():
    papers = {"x": Paper("x", "t", ["s0", "s1", "s2"], ["background_label", "method_label", "objective_label"])}
    batch = DocBatch(torch.randn(1, 3, 4), torch.ones(1, 3, dtype=torch.bool), ["x"], [["s0", "s1", "s2"]])
    mapping = facet_label_map(["background", "method", "result"])
    assert facet_queries(batch, papers, "background", mapping).mask.tolist() == [[True, False, True]]
    assert facet_queries(batch, papers, "method", mapping).mask.tolist() == [[False, True, False]]
    with pytest.raises(ValueError, match="no encoded sentence of facet 'result'"):
        facet_queries(batch, papers, "result", mapping)


def test_cache_round_trip_and_keys(tmp_path):
    papers = [Paper("a", "t", ["x", "y"]), Paper("b", "t", ["z"])]
    calls = []

    def encode(ps):
        calls.append(len(ps))
        return DocBatch.from_list([torch.randn(len(p.sentences), 3) for p in ps], [p.paper_id for p in ps],
                                  [p.sentences for p in ps])

    first, hit1 = cached_encode(encode, papers, "fp", "contextual", {}, tmp_path)
    again, hit2 = cached_encode(encode, papers, "fp", "contextual", {}, tmp_path)
    assert (hit1, hit2) == (False, True) and calls == [2]
    assert torch.equal(first.emb, again.emb) and torch.equal(first.mask, again.mask)
    assert again.sentences == [["x", "y"], ["z"]]
    cached_encode(encode, papers, "fp", "independent", {}, tmp_path)  # another mode: encodes again
    cached_encode(encode, [papers[0]], "fp", "contextual", {}, tmp_path)  # other papers: encodes again
    assert calls == [2, 2, 1]
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


@pytest.mark.parametrize("scorer", ["minl2", "abstract"])
def test_model_run_end_to_end_with_cache(toy, tmp_path, tiny_model_dir, scorer):
    kw = dict(facets=["method"], model=str(tiny_model_dir), scorer=scorer, cache_dir=tmp_path / "cache",
              batch_size=4, exp="tiny")
    res = _pools(toy, "toy", tmp_path / "o1", **kw)
    assert res["timings_s"]["encode_from_cache"] is False
    ranked = read_ranked(tmp_path / "o1" / "test-pid2pool-toy-tiny-method-ranked.json")
    assert sorted(ranked["p1"]) == ["p2", "p3", "p4", "p5"] and sorted(ranked["p6"]) == ["p2", "p3", "p7", "p8"]
    res2 = _pools(toy, "toy", tmp_path / "o2", **kw)
    assert res2["timings_s"]["encode_from_cache"] is True
    assert read_ranked(tmp_path / "o2" / "test-pid2pool-toy-tiny-method-ranked.json") == ranked
    assert res2["summary"] == res["summary"]


def test_summarize_groups(toy):
    ps = load_pool_set(toy, "toy", facets=["method"])
    per_query = {"p1_method": {"m": 0.5}, "p6_method": {"m": 1.0}}
    got = summarize(ps, per_query)
    assert got["all"]["m"] == pytest.approx(0.75) and got["facet:method"]["n_queries"] == 2


@pytest.mark.parametrize("line,message", [
    ("{not json", "abstracts-toy.jsonl:9: invalid JSON"),
    ('{"paper_id": "p1", "title": "again", "abstract": ["dup"]}', "(paper_id 'p1'): duplicate paper_id, first seen on line 1"),
    ('{"paper_id": 7.5, "title": "t", "abstract": ["s"]}', "abstracts-toy.jsonl:9"),
    ('{"paper_id": "p9", "title": "", "abstract": []}', "paper_id 'p9'"),
])
def test_bad_abstract_records_stop_a_model_run_naming_the_line(toy, tmp_path, tiny_model_dir, capsys, line, message):
    with open(toy / "abstracts-toy.jsonl", "a") as fh:
        fh.write(line + "\n")
    code = main(["pools", "--data", str(toy), "--name", "toy", "--model", str(tiny_model_dir), "--scorer", "minl2",
                 "--no-cache", "--out", str(tmp_path / "o")])
    assert code == 2 and message in capsys.readouterr().err


def test_non_utf8_abstracts_file_is_refused(toy, tmp_path, tiny_model_dir, capsys):
    with open(toy / "abstracts-toy.jsonl", "ab") as fh:
        fh.write(b'{"paper_id": "p9", "title": "caf\xe9", "abstract": ["s"]}\n')
    assert main(["pools", "--data", str(toy), "--name", "toy", "--model", str(tiny_model_dir), "--scorer", "minl2",
                 "--no-cache", "--out", str(tmp_path / "o")]) == 2
    assert "abstracts-toy.jsonl:9" in capsys.readouterr().err


def test_facet_text_queries_encode_only_the_facet_sentences(tiny_model_dir):
    from aspire.encoders import load_encoder
    from aspire.evaluate.facets import facet_text_queries

    encoder = load_encoder(str(tiny_model_dir))
    papers = [Paper(p, f"title {p}", SENTS[p], LABELS[p]) for p in ("p1", "p6")]
    mapping = facet_label_map(["method"])
    opts = {"max_length": 64, "normalize": True, "joiner": " "}
    alone = facet_text_queries(encoder, papers, "method", mapping, "facet", opts)
    assert alone.paper_ids == ["p1", "p6"] and alone.emb.shape[:2] == (2, 1) and alone.mask.all()
    # p1's only method sentence is its second; p6's its second too
    expected = encoder.embed_texts([SENTS["p1"][1], SENTS["p6"][1]], max_length=64, normalize=True)
    torch.testing.assert_close(alone.emb[:, 0], expected)
    titled = facet_text_queries(encoder, papers, "method", mapping, "title+facet", opts)
    expected = encoder.embed_texts(["title p1 " + SENTS["p1"][1], "title p6 " + SENTS["p6"][1]], max_length=64,
                                   normalize=True)
    torch.testing.assert_close(titled.emb[:, 0], expected)
    assert not torch.allclose(titled.emb, alone.emb)

    lone = Paper("p5", "t", SENTS["p5"], LABELS["p5"])  # one background sentence: no method
    with pytest.raises(ValueError, match=r"no sentence of facet 'method' in queries \['p5'\]"):
        facet_text_queries(encoder, [papers[0], lone], "method", mapping)
    with pytest.raises(ValueError, match="paper p9 has no sentence labels"):
        facet_text_queries(encoder, [Paper("p9", "t", ["s"])], "method", mapping)
    with pytest.raises(ValueError, match="facet query text must be one of"):
        facet_text_queries(encoder, papers, "method", mapping, "abstract")


def test_model_run_with_a_facet_query_text(toy, tmp_path, tiny_model_dir):
    kw = dict(facets=["method"], model=str(tiny_model_dir), scorer="abstract", cache_dir=tmp_path / "cache",
              batch_size=4, exp="tiny", encode_options={"max_length": 64, "normalize": True, "joiner": " "})
    whole = _pools(toy, "toy", tmp_path / "o1", **kw)
    facet = _pools(toy, "toy", tmp_path / "o2", query_text="facet", **kw)
    assert facet["query_text"] == "facet" and whole["query_text"] == "abstract"
    assert facet["timings_s"]["encode_from_cache"] is True  # the candidates' vectors are the same
    ranked = strict_loads((tmp_path / "o2" / "test-pid2pool-toy-tiny-method-ranked.json").read_text())
    assert sorted(c for c, _ in ranked["p1"]) == ["p2", "p3", "p4", "p5"]
    assert ranked != strict_loads((tmp_path / "o1" / "test-pid2pool-toy-tiny-method-ranked.json").read_text())


def test_default_experiment_names_are_shared_and_tell_runs_apart(toy, tmp_path, tiny_model_dir):
    assert default_exp("runs/m/model", "ot", scorer_options={"tau": 0.1}) == "model-contextual-ot-tau0.1"
    assert default_exp("m", "minl2", encoding="independent") == "m-independent-minl2"
    kw = dict(facets=["method"], model=str(tiny_model_dir), scorer="abstract", cache_dir=tmp_path / "cache",
              batch_size=4, encode_options={"max_length": 64, "normalize": True, "joiner": " "})
    names = [_pools(toy, "toy", tmp_path / "o", query_text=q, **kw)["experiment"] for q in QUERY_TEXTS]
    encoded = "-encode-joiner-%20-encode-max-length-64-encode-normalize-true"  # the encode options: named too
    assert names == [default_exp(str(tiny_model_dir), "abstract", query_text=q) + encoded for q in QUERY_TEXTS]
    assert len(set(names)) == 3  # one folder holds all three runs without overwriting
    for name in names:
        assert (tmp_path / "o" / f"test-pid2pool-toy-{name}-method-ranked.json").is_file()


def test_facet_candidates_match_only_the_facet_sentences_and_keep_whole_those_with_none():
    from aspire.evaluate.facets import facet_candidates
    from aspire.scoring import get_scorer

    papers = {p: Paper(p, f"title {p}", SENTS[p], LABELS[p]) for p in ("p1", "p5", "p6")}
    mapping = facet_label_map(["method"])
    # p6's background sentence sits on p1's method sentence; p6's method sentence is 3 away from it
    p1 = torch.tensor([[0.0, 0.0], [1.0, 0.0]])  # background, method
    p5 = torch.tensor([[5.0, 5.0]])  # its only sentence: background
    p6 = torch.tensor([[1.0, 0.0], [4.0, 0.0], [9.0, 9.0]])  # background, method, result
    batch = DocBatch.from_list([p1, p5, p6], ["p1", "p5", "p6"], [SENTS["p1"], SENTS["p5"], SENTS["p6"]])
    cands, kept_whole = facet_candidates(batch, papers, "method", mapping)
    assert kept_whole == ["p5"]
    assert cands.mask.tolist() == [[False, True, False], [True, False, False], [False, True, False]]
    query = facet_queries(batch.index([0]), papers, "method", mapping)
    minl2 = get_scorer("minl2")
    all_sents = minl2.score(query, batch.index([2]))
    facet_only = minl2.score(query, cands.index([2]))
    torch.testing.assert_close(all_sents, torch.tensor([[0.0]]), atol=1e-3, rtol=0)
    torch.testing.assert_close(facet_only, torch.tensor([[-3.0]]), atol=1e-3, rtol=0)
    with pytest.raises(ValueError, match="paper p9 has no sentence labels"):
        facet_candidates(DocBatch.from_list([p1], ["p9"], [["a", "b"]]),
                         {"p9": Paper("p9", "t", ["a", "b"])}, "method", mapping)


def test_model_run_with_facet_candidates(toy, tmp_path, tiny_model_dir):
    kw = dict(facets=["method"], model=str(tiny_model_dir), scorer="minl2", cache_dir=tmp_path / "cache", batch_size=4)
    whole = _pools(toy, "toy", tmp_path / "o1", **kw)
    facet = _pools(toy, "toy", tmp_path / "o2", cand_sentences="facet", **kw)
    assert whole["cand_sentences"] == "all" and "cands_kept_whole" not in whole
    assert facet["experiment"] == default_exp(str(tiny_model_dir), "minl2", cand_sentences="facet")
    assert facet["timings_s"]["encode_from_cache"] is True
    # pooled candidates: p2, p3, p4, p5 (p1's pool) and p2, p3, p7, p8 (p6's); only p5 has no method sentence
    assert facet["cands_kept_whole"] == {"method": 1}
    def read(d, exp):
        return strict_loads((tmp_path / d / f"test-pid2pool-toy-{exp}-method-ranked.json").read_text())

    a, b = read("o1", whole["experiment"]), read("o2", facet["experiment"])
    assert {q: sorted(c for c, _ in r) for q, r in a.items()} == {q: sorted(c for c, _ in r) for q, r in b.items()}
    assert dict(a["p1"])["p5"] == pytest.approx(dict(b["p1"])["p5"])  # kept whole: the same score
    assert a != b


@pytest.mark.parametrize("options, message", [
    ({"scorer": "minl2", "query_text": "facet"}, "goes with scorer 'abstract'"),
    ({"facets": [], "query_text": "title+facet"}, "needs a faceted pool set"),
    ({"query_text": "title"}, "unknown query text"),
    ({"cand_sentences": "facet"}, "go with a sentence scorer"),
    ({"scorer": "minl2", "facets": [], "cand_sentences": "facet"}, "need a faceted pool set"),
    ({"scorer": "minl2", "cand_sentences": "method"}, "unknown candidate sentences 'method'"),
])
def test_query_and_candidate_options_that_do_not_fit_are_refused(toy, tmp_path, tiny_model_dir, options, message):
    kw = dict(facets=["method"], model=str(tiny_model_dir), scorer="abstract", cache_dir=tmp_path / "cache",
              batch_size=4)
    with pytest.raises(ValueError, match=message):
        _pools(toy, "toy", tmp_path / "o", **{**kw, **options})


@pytest.mark.parametrize("flags, message", [
    (["--scorer", "minl2", "--query-text", "facet"], "--query-text goes with --scorer abstract"),
    (["--scorer", "abstract", "--cand-sentences", "facet"], "--cand-sentences goes with a sentence scorer"),
    (["--scorer", "minl2", "--window", "2"], "--window goes with --scorer maxpassage"),
    (["--scorer", "maxpassage", "--window", "0"], "--window"),
])
def test_cli_refuses_options_that_do_not_fit(toy, tmp_path, tiny_model_dir, capsys, flags, message):
    with pytest.raises(SystemExit):
        main(["pools", "--data", str(toy), "--name", "toy", "--facets", "method", "--model", str(tiny_model_dir),
              *flags, "--out", str(tmp_path / "o")])
    assert message in capsys.readouterr().err


def test_eval_options_are_checked_once_for_the_scorer():
    from aspire.evaluate.options import EvalOptions

    assert EvalOptions().checked("abstract", faceted=False).encoding == "abstract"
    assert EvalOptions(encoding="independent").checked("minl2", faceted=False).encoding == "independent"
    with pytest.raises(ValueError, match="goes with scorer 'abstract'"):
        EvalOptions(query_text="facet").checked("ot", faceted=True)
    with pytest.raises(ValueError, match="need a faceted pool set"):
        EvalOptions(cand_sentences="facet").checked("minl2", faceted=False)
    with pytest.raises(ValueError, match="only goes with scorer 'abstract'"):
        EvalOptions(encoding="abstract").checked("minl2", faceted=False)


def test_maxpassage_pool_run_with_a_window_names_its_experiment(toy, tmp_path, tiny_model_dir, capsys):
    code = main(["pools", "--data", str(toy), "--name", "toy", "--facets", "method", "--model", str(tiny_model_dir),
                 "--scorer", "maxpassage", "--window", "2", "--no-cache", "--out", str(tmp_path / "o")])
    assert code == 0, capsys.readouterr().err
    name = f"test-pid2pool-toy-{tiny_model_dir.name}-contextual-maxpassage-window2-method-ranked.json"
    ranked = read_ranked(tmp_path / "o" / name)
    assert sorted(ranked["p1"]) == ["p2", "p3", "p4", "p5"]


def test_model_run_out_is_checked_against_its_experiment_and_set(toy, tmp_path, tiny_model_dir, capsys):
    """A model run without --exp into another run's folder (another scorer, another data set): refused before
    encoding, its files untouched; its own folder is replaced. Once only a readable results.json was asked for."""
    base = ["pools", "--data", str(toy), "--name", "toy", "--model", str(tiny_model_dir), "--no-cache"]
    out = str(tmp_path / "o")
    assert main([*base, "--scorer", "minl2", "--out", out]) == 0
    before = (tmp_path / "o" / "results.json").read_text()
    assert main([*base, "--scorer", "minl2", "--out", out]) == 0
    assert main([*base, "--scorer", "ot", "--out", out]) == 2
    assert f"not this one's (experiment '{tiny_model_dir.name}-contextual-ot')" in capsys.readouterr().err
    ranked = ["pools", "--data", str(toy), "--name", "toy", "--ranked", out, "--out", out]
    exp = f"{tiny_model_dir.name}-contextual-minl2"
    assert main([*ranked, "--exp", exp]) == 2  # a command's own input is never its --out
    other = dict(json.loads(before), dataset="other")
    (tmp_path / "o" / "results.json").write_text(json.dumps(other))
    assert main([*base, "--scorer", "minl2", "--out", out]) == 2
    assert "dataset 'other'" in capsys.readouterr().err
