"""Round 14: the evaluation runners (pool ranking, facets, the encode step, the search runners, reviewer matching)
against brute force written here and the real CSFCube data: tiny random models, no network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from aspire.benchmarks.pools import load_pool_set
from aspire.data.facets import parse_selection, resolve_selection
from aspire.data.papers import read_paper_map
from aspire.evaluate.options import EvalOptions, default_exp

TO_FACET = {"background_label": "background", "objective_label": "background", "method_label": "method",
            "result_label": "result"}
B, M, R = "background_label", "method_label", "result_label"
PAPERS = {  # pid: (sentences, labels); c3 has no method sentence, c4 no background one
    "q": (["citation graphs of scientific papers", "we use a neural model of sentences", "results improve"], [B, M, R]),
    "c1": (["a new method for text similarity", "we use optimal transport", "results show it works"], [B, M, R]),
    "c2": (["scientific papers cite each other", "the model is a network"], [B, M]),
    "c3": (["the task of document similarity", "results on two data sets"], [B, R]),
    "c4": (["we propose a language model", "it improves the state of the art"], [M, R]),
    "c5": (["data learning for papers", "a neural method of the abstract", "performance improves"], [B, M, R]),
}


def _toy(root: Path, facets=("background", "method")):
    """A faceted pool set: query q, five candidates in every facet's pool (an order that is not sorted)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "abstracts-toy.jsonl", "w") as fh:
        for pid, (sents, labels) in PAPERS.items():
            fh.write(json.dumps({"paper_id": pid, "title": f"title {pid}", "abstract": sents,
                                 "pred_labels": labels}) + "\n")
    pool = {"q": {"cands": ["c4", "c2", "c5", "c1", "c3"], "relevance_adju": [0, 2, 1, 2, 0]}}
    for facet in facets or [""]:
        (root / (f"test-pid2anns-toy-{facet}.json" if facet else "test-pid2anns-toy.json")).write_text(json.dumps(pool))
    pool_set = load_pool_set(root, "toy", list(facets))
    return pool_set, read_paper_map(root / "abstracts-toy.jsonl", pool_set.paper_ids(), needed_by="pooled")


# ---------------------------------------------------------------- aspire.data.facets: a selection's errors


def test_an_empty_selection_is_an_error_naming_the_paper():
    """`resolve_selection([], labels, "p7")` said only "empty sentence selection": which paper's, in a batch of
    queries, was not said (nor in an empty item's error)."""
    for spec in ([], ()):
        with pytest.raises(ValueError, match=r"selection for paper 'p7' is empty"):
            resolve_selection(spec, [M, R], "p7")
    with pytest.raises(ValueError, match=r"'0,,1' for paper 'p7' has an empty item"):
        resolve_selection("0,,1", [M, R], "p7")
    with pytest.raises(ValueError, match=r"^the sentence selection is empty"):  # no paper given: none named
        parse_selection([])
    # what a selection does select is unchanged: names in order, repeats merged, positions passed through
    assert resolve_selection("result,0,method,result", [M, R, M], "p") == [1, 0, 2]
    assert resolve_selection("0,0,5", [M], "p") == [0, 0, 5]  # range and repeats: `check_selection`'s


def test_the_facet_selections_of_real_csfcube_are_the_labelled_sentences(shared_data):
    """Each CSFCube query's facet text (BM25's and the cross-encoder's query) is its sentences whose
    `pred_labels` are the facet's (objective counts as background), read here from the raw file; none is empty."""
    from aspire.benchmarks.csfcube import ABSTRACTS_FILE, LABEL_TO_FACET, load_csfcube
    from aspire.evaluate.facets import facet_positions
    from aspire.evaluate.pool_stages import query_texts

    root = shared_data / "csfcube"
    pool_set = load_csfcube(root)
    queries = {q for f in pool_set.facets for q in pool_set.pools[f]}
    papers = read_paper_map(root / ABSTRACTS_FILE, ids=queries, needed_by="query")
    raw = {}
    with open(root / ABSTRACTS_FILE) as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["paper_id"] in queries:
                raw[rec["paper_id"]] = rec
    names = {"background": {"background_label", "objective_label"}, "method": {"method_label"},
             "result": {"result_label"}}
    texts = query_texts(pool_set, papers, LABEL_TO_FACET)  # reads the queries' papers alone
    n = 0
    for facet in pool_set.facets:
        for qid in pool_set.pools[facet]:
            rec = raw[qid]
            chosen = [j for j, lab in enumerate(rec["pred_labels"]) if lab in names[facet]]
            assert chosen and facet_positions(papers[qid], len(rec["abstract"]), facet, LABEL_TO_FACET) == chosen
            assert texts[facet][qid] == " ".join(rec["abstract"][j] for j in chosen)
            n += 1
    assert n == 50 and sorted(pool_set.self_in_pool) == ["8781666_background", "8781666_result"]
    assert all(q not in pool_set.pools[f][q] for f in pool_set.facets for q in pool_set.pools[f])


# ---------------------------------------------------------------- aspire.evaluate.options


def test_two_scorer_settings_get_two_experiment_names():
    """`default_exp` wrote scorer options with `:g` (six significant digits): tau 1234567 and 1234568 (or 0.3333333
    and 0.33333333) were one experiment name, one set of ranked files; `Stages.exp` already wrote them exactly."""
    a = default_exp("minilm", "ot", scorer_options={"tau": 1234567.0})
    b = default_exp("minilm", "ot", scorer_options={"tau": 1234568.0})
    assert a != b
    assert default_exp("m", "ot", scorer_options={"tau": 0.3333333}) != default_exp(
        "m", "ot", scorer_options={"tau": 0.33333333})
    # the names of settings `:g` writes exactly are unchanged
    assert default_exp("minilm", "ot", scorer_options={"tau": 1, "eps": 0.05}) == "minilm-contextual-ot-eps0.05-tau1"
    assert default_exp("m", "maxpassage", scorer_options={"window": 3}) == "m-contextual-maxpassage-window3"
    assert default_exp("m", "ot", scorer_options={"tau": float("inf")}) == "m-contextual-ot-tauinf"


def test_an_unknown_encoding_is_refused_for_every_scorer():
    """`EvalOptions(encoding="contextul").checked("abstract", ...)` ran the abstract scorer's own encoding without
    a word (the typo dropped); with a sentence scorer it failed only at encoding time."""
    for scorer in ("abstract", "minl2"):
        with pytest.raises(ValueError, match=r"unknown encoding 'contextul'; valid: \['contextual'"):
            EvalOptions(encoding="contextul").checked(scorer, faceted=False)
    assert EvalOptions(encoding="pass").checked("abstract", faceted=False).encoding == "pass"
    assert EvalOptions().checked("abstract", faceted=False).encoding == "abstract"


# ---------------------------------------------------------------- aspire.evaluate.pool_run


def test_run_pools_refuses_a_model_beside_ranked_files(tmp_path):
    """`run_pools(ranked_dir=..., model=..., scorer=...)` scored the ranked files and dropped the model without a
    word (the command line refuses the pair; the API did not)."""
    from aspire.evaluate.pool_run import run_pools

    root = tmp_path / "toy"
    _toy(root, facets=())
    ranked = {"q": [["c1", 0.9], ["c2", 0.8], ["c5", 0.5], ["c3", 0.1], ["c4", 0.0]]}
    (root / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(ranked))
    for extra in ({"model": "minilm", "scorer": "minl2"}, {"options": EvalOptions()},
                  {"abstracts_file": root / "abstracts-toy.jsonl"}):
        with pytest.raises(ValueError, match=r"scoring ranked files .* runs no model; leave out"):
            run_pools(root, "toy", tmp_path / "out", ranked_dir=root, exp="manual", **extra)
    res = run_pools(root, "toy", tmp_path / "out", ranked_dir=root, exp="manual")
    assert res["summary"]["all"]["n_queries"] == 1


# ---------------------------------------------------------------- aspire.evaluate.rank against brute force


def test_facet_candidates_rank_as_a_loop_over_the_pool(tmp_path, tiny_model_dir):
    """`cand_sentences="facet"` (min-L2): every candidate scored alone here on its facet sentences, or on all of
    them when it has none (c3 for method, c4 for background), the query on its facet's; sorted by similarity, ties
    in pool order. `cands_kept_whole` counts those candidates."""
    from aspire.encoders import load_encoder
    from aspire.evaluate.rank import get_eval_scorer, rank_pool_set

    pool_set, papers = _toy(tmp_path / "set")
    rankings, info = rank_pool_set(pool_set, papers, str(tiny_model_dir), "minl2", tmp_path / "out", "x",
                                   EvalOptions(cand_sentences="facet"), TO_FACET)
    encoder, scorer = load_encoder(str(tiny_model_dir)), get_eval_scorer("minl2")
    ids = sorted(papers)
    batch = encoder.encode([papers[p] for p in ids])
    row = {p: i for i, p in enumerate(ids)}

    def only(pid, facet, keep_all_if_none):
        one = batch.index([row[pid]])
        keep = [TO_FACET.get(lab) == facet for lab in papers[pid].labels]  # the encoder puts no title first here
        if not any(keep):
            assert keep_all_if_none
            return one
        mask = torch.tensor([keep + [False] * (one.mask.shape[1] - len(keep))])
        return one.with_mask(mask & one.mask)

    for facet in ("background", "method"):
        pool = list(pool_set.pools[facet]["q"])
        query = only("q", facet, False)
        sims = [float(scorer.score(query, only(c, facet, True))[0, 0]) for c in pool]
        want = [pool[j] for j in sorted(range(len(pool)), key=lambda j: -sims[j])]
        assert rankings[facet]["q"] == want
    assert info["cands_kept_whole"] == {"background": 1, "method": 1}


def test_rank_pool_set_records_the_devices_batch_size_and_cache_entries(tmp_path, tiny_model_dir):
    """results.json recorded neither the batch size, nor the devices the encoder and scorer ran on, nor which vector
    cache entry was read: `run_record` says them, and the figures stay those of a run without it."""
    from aspire.evaluate.rank import rank_pool_set

    pool_set, papers = _toy(tmp_path / "set")
    cache = tmp_path / "cache"
    opts = EvalOptions(cache_dir=cache, batch_size=3, device="cpu")
    first, info = rank_pool_set(pool_set, papers, str(tiny_model_dir), "minl2", tmp_path / "a", "x", opts, TO_FACET)
    rec = info["run_record"]
    assert {k: rec[k] for k in ("encoder_device", "score_device", "batch_size", "vector_cache")} == {
        "encoder_device": "cpu", "score_device": "cpu", "batch_size": 3, "vector_cache": str(cache)}
    [entry] = rec["encoded"]
    assert entry["encoding"] == "contextual" and entry["papers"] == 6 and entry["from_cache"] is False
    assert (cache / entry["cache_entry"]).is_file()
    again, info2 = rank_pool_set(pool_set, papers, str(tiny_model_dir), "minl2", tmp_path / "b", "x", opts, TO_FACET)
    assert info2["run_record"]["encoded"] == [{**entry, "from_cache": True}]  # the entry read is the one written
    assert again == first
    plain, _ = rank_pool_set(pool_set, papers, str(tiny_model_dir), "minl2", tmp_path / "c", "x", EvalOptions(),
                             TO_FACET)
    assert plain == first
    # the abstract scorer's own encoding, and `pass` (read from the contextual entry)
    _, info3 = rank_pool_set(pool_set, papers, str(tiny_model_dir), "abstract", tmp_path / "d", "x",
                             EvalOptions(cache_dir=cache, encoding="pass"), TO_FACET)
    assert info3["run_record"]["encoded"] == [{**entry, "encoding": "pass", "batch_size": 32, "from_cache": True}]
    _, info4 = rank_pool_set(pool_set, papers, str(tiny_model_dir), "abstract", tmp_path / "e", "x",
                             EvalOptions(encode_options={"normalize": True}), TO_FACET)
    assert info4["run_record"]["encoded"][0]["cache_entry"] is None and info4["run_record"]["vector_cache"] is None


def test_reviewer_run_records_what_it_ran_on(tmp_path, tiny_model_dir):
    from test_benchmarks import make_reviewer_set

    from aspire.benchmarks.reviewers import load_reviewer_set
    from aspire.evaluate.reviewer_run import run_reviewers

    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm"))
    res = run_reviewers(rset, str(tiny_model_dir), ["minl2", "abstract"], tmp_path / "o", "o", "max",
                        options=EvalOptions(cache_dir=tmp_path / "cache", batch_size=4))
    rec = res["run_record"]
    assert rec["batch_size"] == 4 and rec["score_device"] == "cpu" and rec["encoder_device"] == "cpu"
    assert [e["encoding"] for e in rec["encoded"]] == ["contextual", "abstract"]
    assert all((tmp_path / "cache" / e["cache_entry"]).is_file() for e in rec["encoded"])
    written = json.loads((tmp_path / "o" / "results.json").read_text())
    assert written["run_record"] == rec


# ---------------------------------------------------------------- the search runners take the device


def test_search_runners_take_a_device_and_record_it(tmp_path, tiny_model_dir, monkeypatch):
    """The search runners loaded the model on the CPU whatever the caller wanted (`--device` is refused on the
    command line for that); they now take `device` (the model loaded on it, the queries searched on the encoder's
    device) and record it with the batch size and cache. On the CPU the figures are those of a run without it."""
    from test_benchmarks import make_reviewer_set, tiny_context2doc

    import aspire.encoders
    from aspire.benchmarks.reviewers import load_reviewer_set
    from aspire.evaluate.search_run import run_reviewers_search, run_search_pipeline

    loaded = []
    real = aspire.encoders.load_encoder

    def spy(model, device=None, **kw):
        loaded.append(device)
        return real(model, device=device, **kw)

    monkeypatch.setattr(aspire.encoders, "load_encoder", spy)
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm"))
    res = run_reviewers_search(rset, tmp_path / "r", "r", str(tiny_model_dir), ["rerank=minl2"], device="cpu",
                               batch_size=5, cache_dir=tmp_path / "cache")
    base = run_reviewers_search(rset, tmp_path / "r0", "r", str(tiny_model_dir), ["rerank=minl2"])
    assert loaded == ["cpu", None]
    rec = res["run_record"]
    assert rec["encoder_device"] == rec["score_device"] == "cpu" and rec["batch_size"] == 5
    assert rec["vector_cache"] == str(tmp_path / "cache")
    [entry] = rec["encoded"]
    assert entry["from_cache"] is False and (tmp_path / "cache" / entry["cache_entry"]).is_file()
    assert res["loss"] == base["loss"]

    bench = tiny_context2doc(tmp_path / "c2d")
    bench.queries = dict(list(bench.queries.items())[:4])
    bench.qrels = {q: bench.qrels[q] for q in bench.queries}
    c2d = run_search_pipeline(bench, tmp_path / "c", "c", str(tiny_model_dir), ["rerank=minl2"], depth=10,
                              device="cpu")
    assert loaded[-1] == "cpu" and c2d["run_record"]["encoder_device"] == "cpu"
    assert c2d["run_record"]["encoded"][0]["papers"] == len(bench.candidates)


def test_csfcube_search_runner_takes_a_device(small_csfcube, tiny_model_dir, tmp_path, monkeypatch,
                                              pools_in_pool_order):
    import aspire.encoders
    from aspire.evaluate import csfcube

    loaded = []
    real = aspire.encoders.load_encoder
    monkeypatch.setattr(aspire.encoders, "load_encoder",
                        lambda model, device=None, **kw: loaded.append(device) or real(model, device=device, **kw))
    res = csfcube.run_csfcube_search(small_csfcube, str(tiny_model_dir), [], tmp_path / "out", exp="s",
                                     batch_size=7, device="cpu")
    rec = res["run_record"]
    assert loaded == ["cpu"] and rec["encoder_device"] == "cpu" and rec["batch_size"] == 7 and rec["vector_cache"] is None


def test_pools_searched_with_a_cpu_encoder_rank_as_before(tmp_path, tiny_model_dir):
    from aspire.encoders import load_encoder
    from aspire.evaluate.options import EvalOptions as Options
    from aspire.evaluate.rank import rank_pool_set
    from aspire.evaluate.search_run import rank_pools_by_search

    pool_set, papers = _toy(tmp_path / "set")
    own, _ = rank_pool_set(pool_set, papers, str(tiny_model_dir), "minl2", tmp_path / "o", "x", Options(), TO_FACET)
    assert rank_pools_by_search(pool_set, papers, load_encoder(str(tiny_model_dir)), ["stages=ann", "rerank=minl2"],
                                TO_FACET) == own


def test_the_record_names_no_cache_entry_where_none_could_be_written(tmp_path, tiny_model_dir, monkeypatch):
    """A disk too full for the cache file: the run goes on uncached, and its record names no entry."""
    from aspire.encoders import load_encoder
    from aspire.evaluate import cache as cache_module
    from aspire.evaluate.encode import encode_papers
    from aspire.storage import DiskFullError

    def full(path, batch):
        raise DiskFullError("no room", path.parent)

    encoder, (_, papers) = load_encoder(str(tiny_model_dir)), _toy(tmp_path / "set")
    ordered = list(papers.values())
    monkeypatch.setattr(cache_module, "_save", full)
    record: list[dict] = []
    batch, hit = encode_papers(encoder, ordered, "contextual", tmp_path / "cache", 2, record=record)
    assert not hit and batch.paper_ids == list(papers)
    assert record == [{"encoding": "contextual", "papers": 6, "batch_size": 2, "fingerprint": encoder.fingerprint(),
                       "cache_entry": None, "from_cache": False}]
    monkeypatch.undo()
    encode_papers(encoder, ordered, "independent", tmp_path / "cache", 2, {"normalize": True}, record)
    entry = record[-1]["cache_entry"]
    assert entry and "-independent-" in entry and (tmp_path / "cache" / entry).is_file()
    encode_papers(encoder, ordered, "independent", tmp_path / "cache", 2, {}, record)
    assert record[-1]["cache_entry"] not in (None, entry)  # another encode option is another entry, its own key
    assert [r["from_cache"] for r in record] == [False, False, False]
