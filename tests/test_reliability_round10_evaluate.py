"""Round-10 correctness checks of the evaluation runners against brute force: the CSFCube two-fold choice
re-derived from per-query figures on the real folds, a reviewer run's aggregates re-computed pair by pair, and
the options a results file records being the ones its run used."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from aspire.benchmarks.csfcube import FACETS, evaluate_csfcube_rankings, load_csfcube, write_results
from aspire.benchmarks.reviewers import load_reviewer_set
from aspire.evaluate.options import EvalOptions
from aspire.evaluate.reviewer_run import run_reviewers
from aspire.evaluate.two_fold import choose

WORDS = "the model of text learning neural data task method result approach paper".split()


def _mean(xs):
    return sum(xs) / len(xs)


# ------------------------------------------------------------------ CSFCube two-fold choice, by brute force


def test_two_fold_choices_equal_brute_force_on_the_real_folds(shared_data, tmp_path):
    """Random rankings of the real pools as candidates: the run chosen on each fold's dev half (per group, and per
    facet) and the test figures are re-derived from the per-query figures and the splits file alone."""
    root = shared_data / "csfcube"
    splits = json.loads((root / "evaluation_splits.json").read_text())
    for parts in splits.values():  # the protocol: fold1_dev is fold2_test and fold2_dev is fold1_test
        assert sorted(parts["fold1_dev"]) == sorted(parts["fold2_test"])
        assert not set(parts["fold1_test"]) & set(parts["fold2_test"])
    pool_set, rng = load_csfcube(root), random.Random(3)
    folders, per_query = [], {}
    for k in range(4):
        rankings = {f: {q: rng.sample(list(p), len(p)) for q, p in pool_set.pools[f].items()} for f in FACETS}
        results, pq = evaluate_csfcube_rankings(root, rankings)
        folder = tmp_path / f"run{k}"
        write_results(folder, root, f"run{k}", results, pq)
        folders.append(str(folder))
        per_query[str(folder)] = {q: {m: 100.0 * v for m, v in vals.items()} for q, vals in pq.items()}

    def dev_best(queries, metric):
        return max(folders, key=lambda d: _mean([per_query[d][q][metric] for q in queries]))

    for metric in ("MAP", "NDCG%20"):
        for group in ("all", *FACETS):
            got = choose(folders, f"{group}:{metric}")
            for fold in ("fold1", "fold2"):
                assert got["chosen"][fold] == dev_best(splits[group][f"{fold}_dev"], metric)
            for g in ("all", *FACETS):
                for m in ("MAP", "NDCG%20"):
                    want = _mean([_mean([per_query[got["chosen"][fold]][q][m] for q in splits[g][f"{fold}_test"]])
                                  for fold in ("fold1", "fold2")])
                    assert got["test"][g][m] == pytest.approx(want, abs=1e-9)
        got = choose(folders, f"all:{metric}", per_facet=True)
        chosen = {(fold, f): dev_best(splits[f][f"{fold}_dev"], metric) for fold in ("fold1", "fold2") for f in FACETS}
        assert got["chosen"] == {fold: {f: chosen[fold, f] for f in FACETS} for fold in ("fold1", "fold2")}
        for g in ("all", *FACETS):
            for m in ("MAP", "NDCG%20"):
                want = _mean([_mean([per_query[chosen[fold, q.rsplit("_", 1)[1]]][q][m]
                                     for q in splits[g][f"{fold}_test"]]) for fold in ("fold1", "fold2")])
                assert got["test"][g][m] == pytest.approx(want, abs=1e-3)  # the per-query file keeps 4 decimals


# ------------------------------------------------------------------ the suite records what it ran


def test_suite_records_the_encoding_the_abstract_scorer_ran_with(small_csfcube, tiny_model_dir, tmp_path):
    """`suite.json` recorded `encoding: contextual` for `--scorer abstract`, which runs the whole-abstract encoding
    (the CSFCube results beside it said `abstract`); now both name the encoding used, and the facet options."""
    from aspire.evaluate.suite import run_suite

    suite = run_suite(str(tiny_model_dir), "abstract", tmp_path / "suite", data=small_csfcube.parent,
                      options=EvalOptions(encode_options={"normalize": True}), benchmarks=["csfcube"])
    ran = json.loads((tmp_path / "suite" / "csfcube" / "results.json").read_text())
    assert ran["encoding"] == "abstract"
    assert suite["encoding"] == "abstract"
    assert json.loads((tmp_path / "suite" / "suite.json").read_text())["encoding"] == "abstract"
    assert (suite["query_text"], suite["cand_sentences"], suite["facet_code"]) == ("abstract", "all", "auto")
    assert suite["encode_options"] == ran["encode_options"] == {"normalize": True}


# ------------------------------------------------------------------ reviewer runs


def _reviewer_folder(root: Path) -> Path:
    """Two reviewers, four submissions, four archive papers each (so `topk:2` is neither max nor mean)."""
    root.mkdir(parents=True)
    header = ["ParticipantID"] + [f"Paper{i}" for i in range(1, 11)] + [f"Expertise{i}" for i in range(1, 11)]
    rows = {"r1": (["s1", "s2", "s3"], ["5", "3", "1"]), "r2": (["s1", "s4", "s2"], ["2", "4.5", "1"])}
    lines = ["\t".join(header)] + ["\t".join([r, *(p + [""] * (10 - len(p))), *(e + [""] * (10 - len(e)))])
                                   for r, (p, e) in rows.items()]
    (root / "evaluations.csv").write_text("\n".join(lines) + "\n")
    draw = root / "d_20_1"
    (draw / "archives").mkdir(parents=True)
    subs = {f"s{i}": {"id": f"s{i}", "content": {"title": f"paper {WORDS[i]}",
                                                  "abstract": f"the {WORDS[i]} model. a {WORDS[i + 1]} task."}}
            for i in range(1, 5)}
    (draw / "submissions.json").write_text(json.dumps(subs))
    for n, r in enumerate(rows):
        recs = [{"id": f"{r}-a{j}", "content": {"title": f"{WORDS[j + n]} {WORDS[j + 2]}",
                                                "abstract": f"the {WORDS[j + n + 1]} data. we {WORDS[j]} text."}}
                for j in range(4)]
        (draw / "archives" / f"~{r}.jsonl").write_text("\n".join(json.dumps(x) for x in recs) + "\n")
    return root


def test_reviewer_aggregates_equal_pairs_scored_one_by_one(tiny_model_dir, tmp_path):
    """max / mean / topk:2 of a reviewer's archive, re-computed from each (submission, archive paper) pair
    scored alone (one paper a batch), for a sentence scorer and the whole-abstract cosine."""
    from aspire.encoders import load_encoder
    from aspire.evaluate.reviewer_run import reviewer_papers
    from aspire.scoring import get_scorer

    rset = load_reviewer_set(_reviewer_folder(tmp_path / "rm"))
    papers = {p.paper_id: p for p in reviewer_papers(rset)[0]}
    encoder = load_encoder(str(tiny_model_dir))
    minl2 = get_scorer("minl2")

    def pair(scorer, s, a):
        if scorer == "abstract":
            vs, va = encoder.encode_abstract([papers[s], papers[a]])
            return torch.nn.functional.cosine_similarity(vs, va, dim=0).item()
        return minl2.score(encoder.encode([papers[s]], batch_size=1), encoder.encode([papers[a]], batch_size=1))[0, 0].item()

    draw = rset.draws[0]
    for scorer in ("minl2", "abstract"):
        sims = {(r, s): sorted((pair(scorer, s, a) for a, _, _ in draw.archives[r]), reverse=True)
                for r, rated in rset.ratings.items() for s, _ in rated}
        for agg, fn in (("max", lambda x: x[0]), ("mean", _mean), ("topk:2", lambda x: _mean(x[:2]))):
            out = tmp_path / f"{scorer}-{agg.replace(':', '')}"
            run_reviewers(rset, str(tiny_model_dir), [scorer], out, "x", agg, options=EvalOptions(batch_size=3))
            pred = json.loads((out / "predictions" / "x_d_20_1_ta.json").read_text())
            assert set(pred) == set(rset.ratings)
            for r, rated in rset.ratings.items():
                assert set(pred[r]) == {s for s, _ in rated}
                for s, _ in rated:
                    assert pred[r][s] == pytest.approx(fn(sims[r, s]), abs=1e-5), (scorer, agg, r, s)


def test_reviewer_run_records_the_encoding_the_abstract_scorer_ran_with(tiny_model_dir, tmp_path):
    """`results.json` of `--scorer abstract` recorded `encoding: contextual` (the option's default, read by no
    scorer of the run); it is the whole-abstract encoding the scorer ran with."""
    rset = load_reviewer_set(_reviewer_folder(tmp_path / "rm"))
    res = run_reviewers(rset, str(tiny_model_dir), ["abstract"], tmp_path / "out", "x")
    assert res["encoding"] == "abstract"
    assert res["encodings"] == {"abstract": "abstract"}
    res = run_reviewers(rset, str(tiny_model_dir), ["minl2", "abstract"], tmp_path / "out2", "x")
    assert res["encoding"] == "contextual"
    assert res["encodings"] == {"minl2": "contextual", "abstract": "abstract"}


def test_reviewer_run_refuses_encode_options_no_scorer_reads(tiny_model_dir, tmp_path):
    """A contextual `minl2` run given `normalize` / `max_length` ran without them (the contextual encoding takes
    none) and recorded them in `results.json` as if applied; refused, naming them, before anything is written."""
    rset = load_reviewer_set(_reviewer_folder(tmp_path / "rm"))
    options = EvalOptions(encode_options={"normalize": True, "max_length": 16})
    with pytest.raises(ValueError, match=r"encode options \['max_length', 'normalize'\] are read by no scorer"):
        run_reviewers(rset, str(tiny_model_dir), ["minl2"], tmp_path / "out", "x", options=options)
    assert not (tmp_path / "out").exists()


def test_reviewer_run_refuses_options_no_scorer_reads(tiny_model_dir, tmp_path):
    """The reviewer set has no facets: a facet query text, candidate-sentence choice or facet code was accepted and
    read by nothing; so were scorer options beside the abstract scorer alone (recorded as `scorer_options`, never
    passed). Refused by name."""
    rset = load_reviewer_set(_reviewer_folder(tmp_path / "rm"))
    for options, word in ((EvalOptions(query_text="facet"), "query text 'facet'"),
                          (EvalOptions(cand_sentences="facet"), "candidate sentences 'facet'"),
                          (EvalOptions(facet_code="method"), "facet code 'method'"),
                          (EvalOptions(scorer_options={"tau": 2.0}), r"scorer options \{'tau': 2.0\} are read by no")):
        with pytest.raises(ValueError, match=word):
            run_reviewers(rset, str(tiny_model_dir), ["abstract"], tmp_path / "out", "x", options=options)


def test_reviewer_run_gives_each_encoding_the_encode_options_it_reads(tiny_model_dir, tmp_path):
    """Independent sentences beside the whole-abstract vector: `joiner` (the abstract's only) went to
    `encode_independent` too, which fails; each encoding now gets the options it reads, and the abstract scorer's
    vectors are those of `encode_abstract` with all of them."""
    from aspire.encoders import load_encoder
    from aspire.evaluate.reviewer_run import reviewer_papers

    rset = load_reviewer_set(_reviewer_folder(tmp_path / "rm"))
    options = EvalOptions(encoding="independent", encode_options={"joiner": " ", "normalize": True})
    res = run_reviewers(rset, str(tiny_model_dir), ["minl2", "abstract"], tmp_path / "both", "x", options=options)
    assert res["encodings"] == {"minl2": "independent", "abstract": "abstract"}
    run_reviewers(rset, str(tiny_model_dir), ["abstract"], tmp_path / "abs", "x",
                  options=EvalOptions(encode_options={"joiner": " ", "normalize": True}))
    pred = json.loads((tmp_path / "abs" / "predictions" / "x_d_20_1_ta.json").read_text())
    papers = {p.paper_id: p for p in reviewer_papers(rset)[0]}
    encoder = load_encoder(str(tiny_model_dir))
    vs, va = encoder.encode_abstract([papers["s1"], papers["r1-a0"]], joiner=" ", normalize=True)
    assert pred["r1"]["s1"] >= torch.dot(vs, va).item() - 1e-5  # the max over r1's archive
