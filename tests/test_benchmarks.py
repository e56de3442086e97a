"""Benchmarks beyond CSFCube: reviewer matching, context2doc, TREC runs, intervals and paired tests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aspire.benchmarks import context2doc as c2d
from aspire.benchmarks.reviewers import (
    load_reviewer_set,
    prediction_files,
    read_predictions,
    reviewer_loss,
    reviewer_units,
    summarize,
)
from aspire.benchmarks.runs import per_query, ranx_name, read_qrels, read_run, write_qrels, write_run
from aspire.benchmarks.stats import UnitScores, paired_test
from aspire.evaluate.compare import compare
from aspire.evaluate.options import Stages

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ reviewer matching


def make_reviewer_set(root: Path, draws: int = 1) -> Path:
    """Three reviewers, four submissions (s1..s4), two archive papers each."""
    root.mkdir(parents=True, exist_ok=True)
    header = ["ParticipantID"] + [f"Paper{i}" for i in range(1, 11)] + [f"Expertise{i}" for i in range(1, 11)]
    rows = {"r1": (["s1", "s2", "s3"], ["5", "3", "1"]),
            "r2": (["s1", "s4"], ["2", "4.5"]),
            "r3": (["s2", "s3", "s9"], ["1", "1", "5"])}  # s9 is not a submission: its pairs are skipped
    lines = ["\t".join(header)]
    for r, (papers, exp) in rows.items():
        lines.append("\t".join([r, *(papers + [""] * (10 - len(papers))), *(exp + [""] * (10 - len(exp)))]))
    (root / "evaluations.csv").write_text("\n".join(lines) + "\n")
    words = "the model of text learning neural data task method result".split()
    for d in range(1, draws + 1):
        draw = root / f"d_20_{d}"
        (draw / "archives").mkdir(parents=True)
        subs = {f"s{i}": {"id": f"s{i}", "content": {"title": f"paper {words[i]}",
                                                      "abstract": f"the {words[i]} model. a {words[i + 1]} task."}}
                for i in range(1, 5)}
        (draw / "submissions.json").write_text(json.dumps(subs))
        for r in rows:
            recs = [{"id": f"{r}-a{j}", "content": {"title": f"{r} {words[j]}", "abstract": f"the {words[j]} data."}}
                    for j in range(2)]
            (draw / "archives" / f"~{r}.jsonl").write_text("\n".join(json.dumps(x) for x in recs) + "\n")
    return root


def test_reviewer_loss_by_hand(tmp_path):
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm"))
    subs = rset.draws[0].submissions
    # r1 rated s1=5, s2=3, s3=1: predicted order s2 > s1 > s3.
    # (s1,s2): truth +2, pred -0.1 -> wrong, costs 2; (s1,s3): right; (s2,s3): right. Max 2+4+2 = 8.
    assert reviewer_loss(rset.ratings["r1"], {"s1": 0.5, "s2": 0.6, "s3": 0.1}, subs) == (2.0, 8.0, 0)
    # r2: a tie costs half of |2 - 4.5|
    assert reviewer_loss(rset.ratings["r2"], {"s1": 0.3, "s4": 0.3}, subs) == (1.25, 2.5, 0)
    # r3: equal ratings cost nothing either way; the two pairs with s9 are skipped and counted
    assert reviewer_loss(rset.ratings["r3"], {"s2": 0.9, "s3": 0.1}, subs) == (0.0, 0.0, 2)
    preds = [{"r1": {"s1": 0.5, "s2": 0.6, "s3": 0.1}, "r2": {"s1": 0.3, "s4": 0.3}, "r3": {"s2": 0.9, "s3": 0.1}}]
    units, counts = reviewer_units(rset, preds)
    assert units.value() == pytest.approx((2.0 + 1.25) / (8.0 + 2.5))
    assert counts["skipped_pairs"] == 2
    # a rated submission without a prediction is an error naming the reviewer and the paper
    with pytest.raises(ValueError, match="reviewer r1: no prediction for rated submission s3"):
        reviewer_units(rset, [{"r1": {"s1": 0.5, "s2": 0.6}}])


def test_reviewer_set_bad_inputs(tmp_path):
    root = make_reviewer_set(tmp_path / "rm")
    (root / "d_20_1" / "archives" / "~r2.jsonl").unlink()
    with pytest.raises(ValueError, match="reviewer r2 has no archive"):
        load_reviewer_set(root)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "evaluations.csv").write_text((root / "evaluations.csv").read_text())
    with pytest.raises(ValueError, match="no draw folders"):
        load_reviewer_set(empty)
    with pytest.raises(ValueError, match="folder not found"):
        load_reviewer_set(tmp_path / "absent")
    bad = make_reviewer_set(tmp_path / "bad")
    text = (bad / "evaluations.csv").read_text().replace("\t4.5", "\t7")
    (bad / "evaluations.csv").write_text(text)
    with pytest.raises(ValueError, match="reviewer r2 paper s4: expertise '7' is not in 1-5"):
        load_reviewer_set(bad)


@pytest.mark.slow
def test_published_predictions_known_answers(shared_data):
    rset = load_reviewer_set(shared_data / "reviewer-matching")
    expected = {"specter": 0.2689, "elmo": 0.3447}
    for exp, value in expected.items():
        preds = [read_predictions(p) for p in prediction_files(rset.root / "predictions", exp, rset)]
        result = summarize(*reviewer_units(rset, preds), n_boot=200)
        assert result["loss"] == pytest.approx(value, abs=5e-5)
        assert result["n_reviewers"] == 58 and len(result["per_draw"]) == 10
        lo, hi = result["ci95"]
        assert lo < result["loss"] < hi


def test_model_predictions_tiny(tmp_path, tiny_model_dir):
    import torch

    from aspire.evaluate.reviewer_run import aggregate, run_reviewers

    sims = torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.2, 0.1]])
    assert aggregate(sims, "max").tolist() == pytest.approx([0.9, 0.3])
    assert aggregate(sims, "topk:2").tolist() == pytest.approx([0.7, 0.25])
    assert aggregate(sims, "mean").tolist() == pytest.approx([0.5, 0.2])
    with pytest.raises(ValueError, match="unknown aggregate"):
        aggregate(sims, "topk:0")
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=2))
    out = tmp_path / "out"
    res = run_reviewers(rset, str(tiny_model_dir), ["minl2", "abstract"], out, "tiny", "topk:2")
    assert res["n_draws"] == 2 and 0.0 <= res["loss"] <= 1.0
    assert res["texts"] == {"papers": 10, "empty_abstract": 0, "empty_abstract_ids": [], "no_text": 0,
                            "no_text_ids": []}
    written = read_predictions(out / "predictions" / "tiny_d_20_2_ta.json")
    assert set(written) == {"r1", "r2", "r3"} and set(written["r1"]) == {"s1", "s2", "s3"}
    assert set(written["r3"]) == {"s2", "s3"}  # s9 is not a submission
    # the written files score to the reported loss
    units, _ = reviewer_units(rset, [read_predictions(p) for p in prediction_files(out / "predictions", "tiny", rset)])
    assert units.value() == pytest.approx(res["loss"])


# ------------------------------------------------------------------ runs, metrics, intervals, tests


def test_run_and_qrels_round_trip(tmp_path):
    run = {"q1": [("d3", 2.5), ("d1", 1.0), ("d2", 1.0)], "q2": [("d2", 0.7)]}
    write_run(tmp_path / "run.trec", run, "mytag")
    assert read_run(tmp_path / "run.trec") == run
    assert (tmp_path / "run.trec").read_text().splitlines()[0] == "q1 Q0 d3 1 2.5 mytag"
    qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d2": 2}}
    write_qrels(tmp_path / "qrels.trec", qrels)
    assert read_qrels(tmp_path / "qrels.trec") == qrels
    values = per_query(qrels, run, ["MRR", "P@1", "MAP@20", "nDCG@10", "r@2", "bpref"])
    assert values["MRR"] == {"q1": 0.5, "q2": 1.0}
    assert values["P@1"] == {"q1": 0.0, "q2": 1.0}
    assert values["r@2"]["q1"] == 1.0
    with pytest.raises(ValueError, match="1 judged queries not ranked"):
        per_query({**qrels, "q3": {"d1": 1}}, run, ["MRR"])
    (tmp_path / "bad.trec").write_text("q1 Q0 d1 1\n")
    with pytest.raises(ValueError, match="bad.trec:1"):
        read_run(tmp_path / "bad.trec")
    for bad in ({"q1": [("d 3", 2.5)]}, {"q 1": [("d3", 2.5)]}, {"q1": [("", 2.5)]}):  # once written, unreadable
        with pytest.raises(ValueError, match="empty or holds whitespace"):
            write_run(tmp_path / "spaced.trec", bad, "mytag")
    with pytest.raises(ValueError, match=re.escape("document id 'd\\tb' is empty or holds whitespace")):
        write_qrels(tmp_path / "spaced.qrels", {"q1": {"d\tb": 1}})
    assert not (tmp_path / "spaced.trec").exists() and not (tmp_path / "spaced.qrels").exists()
    assert ranx_name("MAP@20") == "map@20" and ranx_name("P@5-l2") == "precision@5-l2"
    with pytest.raises(ValueError, match="unknown metric"):
        ranx_name("ndcg")


def test_unit_scores_structure():
    # two folds: the figure is the mean of the fold means, not the mean over queries
    units = UnitScores.means({"a": 1.0, "b": 0.0, "c": 0.0}, {"f1": ["a"], "f2": ["b", "c"]})
    assert units.value() == pytest.approx(0.5)
    assert units.per_group() == pytest.approx([1.0, 0.0])
    lo, hi = units.bootstrap(500)
    assert 0.0 <= lo <= hi <= 1.0


def test_paired_test_identical_and_different():
    rng = np.random.default_rng(1)
    values = {f"q{i}": float(v) for i, v in enumerate(rng.random(40))}
    a = UnitScores.means(values)
    same = paired_test(a, UnitScores.means(dict(values)), n_perm=500)
    assert same["p_value"] == 1.0 and same["delta"] == 0.0 and same["ci95"] == [0.0, 0.0]
    better = paired_test(UnitScores.means({q: v + 0.2 for q, v in values.items()}), a, n_perm=500)
    assert better["delta"] == pytest.approx(0.2) and better["p_value"] < 0.01
    assert better["ci95"][0] == pytest.approx(0.2) and better["ci95"][1] == pytest.approx(0.2)
    # no permutation is no test: `compare --permutations -5` once printed p = -0.25, and 0 printed p = 1
    for n_perm, n_boot in ((0, 2000), (-5, 2000), (500, 0)):
        with pytest.raises(ValueError, match="at least one permutation and one bootstrap sample"):
            paired_test(a, a, n_perm=n_perm, n_boot=n_boot)


def test_compare_runs(tmp_path):
    qrels = {f"q{i}": {"d1": 1} for i in range(12)}
    good = {q: [("d1", 2.0), ("d2", 1.0)] for q in qrels}
    bad = {q: [("d2", 2.0), ("d1", 1.0)] for q in qrels}
    for name, run in (("good", good), ("bad", bad)):
        (tmp_path / name).mkdir()
        write_run(tmp_path / name / "run.trec", run, name)
        write_qrels(tmp_path / name / "qrels.trec", qrels)
    same = compare(str(tmp_path / "good"), str(tmp_path / "good"), n_perm=200)
    assert all(r["p_value"] == 1.0 for r in same.values())
    diff = compare(str(tmp_path / "good"), str(tmp_path / "bad"), metrics=["MRR"], n_perm=2000)
    assert diff["MRR"]["delta"] == pytest.approx(0.5) and diff["MRR"]["p_value"] < 0.01
    assert set(diff["MRR"]["per_unit_delta"].values()) == {0.5}


def write_csfcube_folder(folder, maps: dict) -> None:
    """A CSFCube results folder whose per-query CSV gives query q the MAP maps[q] (NDCG%20 = MAP + 10)."""
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"benchmark": "csfcube", "experiment": folder.name}))
    rows = ["query,paper_id,facet,test_fold,pool_size,title,MAP,NDCG%20,P@20,R@20,R-precision,NDCG@20"]
    for q, value in maps.items():
        facet, fold, _ = q.split("/")
        rows.append(f"{q},{q},{facet},{fold},5,t,{value},{value + 10},0,0,0,0")
    (folder / f"test-pid2pool-csfcube-{folder.name}-perq.csv").write_text("\n".join(rows) + "\n")


def test_compare_csfcube_folders_on_its_own_figures_overall_and_per_facet(tmp_path):
    # fold1_test holds 2 queries a facet, fold2_test 4: the benchmark's figure is the mean of the two fold means
    queries = [f"{f}/{fold}/{i}" for f in ("background", "method", "result") for fold, n in (("fold1_test", 2),
               ("fold2_test", 4)) for i in range(n)]
    base = {q: 30.0 for q in queries}
    better = {q: 30.0 + (6.0 if q.startswith("method") and "fold1" in q else 0.0) for q in queries}
    for name, maps in (("base", base), ("better", better)):
        write_csfcube_folder(tmp_path / name, maps)
    got = compare(str(tmp_path / "better"), str(tmp_path / "base"), n_perm=500)
    assert list(got) == ["MAP", "MAP background", "MAP method", "MAP result",
                         "NDCG%20", "NDCG%20 background", "NDCG%20 method", "NDCG%20 result"]
    assert got["MAP method"]["delta"] == pytest.approx(3.0)  # fold1's mean +6, fold2's +0, not the query mean +2
    assert got["MAP"]["delta"] == pytest.approx(1.0) and got["NDCG%20 method"]["a"] == pytest.approx(43.0)
    assert got["MAP background"]["delta"] == 0.0 and got["MAP background"]["p_value"] == 1.0
    with pytest.raises(ValueError, match="compared on MAP, NDCG%20, not 'MRR'"):
        compare(str(tmp_path / "better"), str(tmp_path / "base"), metrics=["MRR"])
    write_csfcube_folder(tmp_path / "fewer", {q: 30.0 for q in queries[1:]})
    with pytest.raises(ValueError, match="score different CSFCube queries"):
        compare(str(tmp_path / "fewer"), str(tmp_path / "base"))
    (tmp_path / "trec").mkdir()
    for pair, kinds in ((("base", "trec"), ("csfcube", "a ranked run")), (("trec", "base"), ("a ranked run", "csfcube"))):
        a, b = (str(tmp_path / name) for name in pair)
        with pytest.raises(ValueError, match=re.escape(f"{a} ({kinds[0]}) and {b} ({kinds[1]}) are not runs of one")):
            compare(a, b)
    # a path that is not there is named as such (it was called "a ranked run" of another benchmark)
    for missing in (tmp_path / "nope", f"{tmp_path / 'nope'}:specter"):
        with pytest.raises(FileNotFoundError, match=re.escape(f"no such run file, results folder or predictions "
                                                              f"folder (DIR:EXP): '{missing}'")):
            compare(str(tmp_path / "base"), str(missing))


# ------------------------------------------------------------------ context2doc


def test_query_text_strips_markers():
    assert c2d.query_text("As shown by Huang and Sagae (2010) and (Collins and Roark, 2004), parsing [3] helps.") \
        == "As shown by, parsing helps."
    assert c2d.query_text("(Han et al,2004), (Gamon et al, 2008)") == ""


def test_committed_split_is_disjoint_and_checked(tmp_path):
    meta = c2d.load_split()
    splits = meta["splits"]
    for part in splits.values():
        assert part["n_queries"] == len(part["queries"]) == len(set(part["queries"]))
        assert part["n_citing_papers"] == len(part["citing_papers"])
    for a in splits:
        for b in splits:
            if a < b:
                assert not set(splits[a]["citing_papers"]) & set(splits[b]["citing_papers"])
                assert not set(splits[a]["queries"]) & set(splits[b]["queries"])
    edited = json.loads(c2d.SPLIT_FILE.read_text())
    edited["splits"]["test"]["queries"].pop()
    (tmp_path / "split.json").write_text(json.dumps(edited))
    with pytest.raises(ValueError, match="checksum mismatch"):
        c2d.load_split(tmp_path / "split.json")


@pytest.mark.slow
def test_split_rebuilds_from_data_and_keeps_sentences_apart(shared_data):
    source = shared_data / "cocite-acl" / "cocitations.jsonl"
    assert c2d.make_split(source) == c2d.load_split(source=source)
    test = c2d.held_out_sentences(shared_data / "cocite-acl")
    train = c2d.load_context2doc(shared_data / "cocite-acl", "train")
    raw = {qid: rec["context"].strip() for qid, rec in c2d.read_records(source)}
    assert not {raw[q] for q in train.queries} & test
    bench = c2d.load_context2doc(shared_data / "cocite-acl", "test")
    assert len(bench.candidates) == 768 and len(bench.queries) == meta_size(source)


@pytest.mark.slow
def test_training_data_leaves_out_test_sentences(shared_data, tmp_path):
    from aspire.data.cocite import IngestConfig, ingest_records

    source = shared_data / "cocite-acl" / "cocitations.jsonl"
    held_out = c2d.held_out_sentences(shared_data / "cocite-acl")
    report = ingest_records(source, tmp_path / "kept", held_out=c2d.held_out_for(source))
    assert c2d.held_out_for(source) == held_out  # the split's own source file: its own sentences
    # every test query's record goes (463 records, 463 distinct sentences), and the 3 train / dev records whose
    # sentence is a test one with its citation markers written otherwise (L1317, L1623, L1838)
    assert report["counts"]["dropped_benchmark_test"] == len(held_out) == meta_size(source) + 3
    texts = [json.loads(line)["text"].strip() for line in open(tmp_path / "kept" / "contexts.jsonl")]
    assert not set(texts) & held_out
    everything = ingest_records(source, tmp_path / "all", IngestConfig(exclude_benchmark_test=False))
    with pytest.raises(ValueError, match="exclude_benchmark_test needs the held-out sentences"):
        ingest_records(source, tmp_path / "none")  # never a silent no-op
    assert everything["counts"]["contexts"] - report["counts"]["contexts"] == report["counts"]["dropped_benchmark_test"]


def meta_size(source) -> int:
    return c2d.load_split(source=source)["splits"]["test"]["n_queries"]


def make_cocite(path: Path) -> Path:
    words = "text learning neural data task method result sentence document citation".split()
    recs = []
    for i in range(30):  # ten papers, each the only one with its word; a context names its first cited paper's
        cited = [{"paper_id": f"p{(i + k) % 10}", "title": f"{words[(i + k) % 10]} paper",
                  "abstract": [f"the {words[(i + k) % 10]} model.", "we show results."], "link": "aan"} for k in (0, 1)]
        recs.append({"citing_paper_id": f"c{i % 9}", "context": f"Prior work (Smith, 2001) uses {words[i % 10]} well.",
                     "source": "x", "all_links_confirmed": True, "cited": cited})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return path


def tiny_context2doc(tmp_path: Path):
    """The tiny co-citation file's context2doc benchmark on its one non-empty split (all 30 queries)."""
    source = make_cocite(tmp_path / "cc" / "cocitations.jsonl")
    meta = c2d.make_split(source)
    (tmp_path / "split.json").write_text(json.dumps(meta))
    split = max(meta["splits"], key=lambda s: meta["splits"][s]["n_queries"])
    return c2d.load_context2doc(tmp_path / "cc", split, tmp_path / "split.json")


def test_context2doc_run_tiny(tmp_path, tiny_model_dir):
    from aspire.evaluate.context2doc_run import run_context2doc

    source = make_cocite(tmp_path / "cc" / "cocitations.jsonl")
    split_file = tmp_path / "split.json"
    meta = c2d.make_split(source)
    split_file.write_text(json.dumps(meta))
    # citing papers c0..c8 share sentences (record i and i + 10 have one text), so all go to one split
    sizes = {name: part["n_queries"] for name, part in meta["splits"].items()}
    assert sorted(sizes.values()) == [0, 0, 30]
    bench = c2d.load_context2doc(tmp_path / "cc", max(sizes, key=sizes.get), split_file)
    assert all("(Smith" not in q for q in bench.queries.values())
    res = run_context2doc(bench, tmp_path / "fused", "fused", str(tiny_model_dir), "minl2", stages=Stages(True, 0.8))
    assert res["n_candidates"] == 10 and set(res["metrics"]) >= {"MRR", "nDCG@10", "R@100", "MAP"}
    assert all(0.0 <= v <= 1.0 for v in res["metrics"].values())
    run = read_run(tmp_path / "fused" / "run.trec")
    assert set(run) == set(bench.queries) and all(len(r) == 10 for r in run.values())
    lexical = run_context2doc(bench, tmp_path / "bm25", "bm25", stages=Stages(bm25=True))
    # a query naming the distinct word of one of its cited papers finds that paper first
    assert lexical["metrics"]["MRR"] == 1.0
    with pytest.raises(ValueError, match="needs a weight alpha"):
        run_context2doc(bench, tmp_path / "x", "x", str(tiny_model_dir), "minl2", stages=Stages(bm25=True))


def test_a_missing_experiment_names_the_experiments_its_folder_holds(tmp_path):
    """`--predictions DIR:EXP` with a mistyped EXP once said only that the first draw's file was not found."""
    from aspire.benchmarks.reviewers import read_prediction_set

    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=2))
    folder = tmp_path / "preds"
    folder.mkdir()
    for exp in ("specter", "elmo"):
        for draw in rset.draws:
            (folder / f"{exp}_{draw.name}_ta.json").write_text(json.dumps({"~r1": {"s1": 0.5}}))
    assert [set(p) for p in read_prediction_set(folder, "elmo", rset)] == [{"r1"}, {"r1"}]
    with pytest.raises(FileNotFoundError, match=r"experiment 'spectre' lacks 2 of its 2 draw files \(first "
                                                r"spectre_d_20_1_ta.json\); this folder holds \['elmo', 'specter'\]"):
        read_prediction_set(folder, "spectre", rset)
    (folder / f"elmo_{rset.draws[1].name}_ta.json").unlink()
    with pytest.raises(FileNotFoundError, match=f"'elmo' lacks 1 of its 2 draw files \\(first elmo_{rset.draws[1].name}"):
        read_prediction_set(folder, "elmo", rset)
    with pytest.raises(FileNotFoundError, match="no such prediction folder"):
        read_prediction_set(tmp_path / "nowhere", "elmo", rset)


def test_cli_errors_are_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aspire.evaluate", "reviewers", "--data", str(tmp_path / "none"),
                           "--predictions", f"{tmp_path}:x"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: reviewer-matching folder not found: {tmp_path / 'none'}"]


def test_fuse_runs_rrf_and_wsum():
    from aspire.evaluate.fuse import fuse_runs

    a = {"q": [("d1", 3.0), ("d2", 1.0)]}
    b = {"q": [("d2", 5.0), ("d3", 1.0)]}
    rrf = dict(fuse_runs([a, b], fusion="rrf"))
    assert [d for d, _ in rrf["q"]] == ["d2", "d1", "d3"]  # d2 is ranked by both
    assert rrf["q"][0][1] == pytest.approx(1 / 62 + 1 / 61)
    heavy_a = fuse_runs([a, b], weights=[0.9, 0.1])
    assert heavy_a["q"][0][0] == "d1"
    with pytest.raises(ValueError, match="different queries"):
        fuse_runs([a, {"x": [("d1", 1.0)]}])


def test_context2doc_through_the_search_pipeline_equals_the_benchmark_runs(tmp_path, tiny_model_dir):
    """`--search-pipeline`: the benchmark answered by aspire search's Searcher gives the benchmark's own BM25
    ranking (the papers with a positive score, in order, then papers that share no word) and its min-L2 run."""
    from aspire.evaluate.context2doc_run import run_context2doc
    from aspire.evaluate.search_run import run_search_pipeline

    bench = tiny_context2doc(tmp_path)
    run_context2doc(bench, tmp_path / "bm25", "bm25", stages=Stages(bm25=True))
    searched = run_search_pipeline(bench, tmp_path / "s-bm25", "s", str(tiny_model_dir), ["stages=bm25"], depth=10)
    runs = [read_run(tmp_path / name / "run.trec") for name in ("bm25", "s-bm25")]
    for qid in bench.queries:
        positive = [(d, s) for d, s in runs[0][qid] if s > 0][:10]
        assert runs[1][qid][: len(positive)] == positive
        assert all(s == 0 for _, s in runs[1][qid][len(positive):])
    assert searched["search"]["stages"] == "bm25"

    dense = run_context2doc(bench, tmp_path / "minl2", "minl2", str(tiny_model_dir), "minl2")
    searched = run_search_pipeline(bench, tmp_path / "s-minl2", "s", str(tiny_model_dir),
                                   ["stages=ann", "rerank=minl2"], depth=len(bench.candidates))
    assert searched["short_of_depth"]["queries"] == 0
    for m in ("MRR", "nDCG@10", "MAP"):
        assert searched["metrics"][m] == pytest.approx(dense["metrics"][m], abs=1e-6)
    with pytest.raises(ValueError, match="context2doc depth 0 is below"):  # and below R@100's depth: refused too
        run_search_pipeline(bench, tmp_path / "x", "x", str(tiny_model_dir), depth=0)


def test_reviewers_through_the_search_pipeline_equal_the_benchmark_runs(tmp_path, tiny_model_dir, capsys):
    """Reviewer matching answered by the Searcher (each reviewer's archive an index, each submission a query, the
    hit scores aggregated) predicts what the benchmark's own min-L2 and OT scorers predict, aggregate and all."""
    from aspire.cli import main
    from aspire.evaluate.reviewer_run import run_reviewers
    from aspire.evaluate.search_run import run_reviewers_search

    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=2))
    for scorer, agg in (("minl2", "max"), ("ot", "topk:2")):
        own = run_reviewers(rset, str(tiny_model_dir), [scorer], tmp_path / scorer, scorer, agg)
        searched = run_reviewers_search(rset, tmp_path / f"s-{scorer}", "s", str(tiny_model_dir),
                                        ["stages=ann", f"rerank={scorer}"], agg)
        for a, b in zip(*(prediction_files(tmp_path / name / "predictions", exp, rset)
                          for name, exp in ((scorer, scorer), (f"s-{scorer}", "s")))):
            pa, pb = read_predictions(a), read_predictions(b)
            assert set(pa) == set(pb)
            for reviewer in pa:
                assert pb[reviewer] == pytest.approx(pa[reviewer], abs=1e-4)
        assert searched["loss"] == pytest.approx(own["loss"]) and searched["search"]["rerank"] == scorer
    assert main(["evaluate", "reviewers", "--data", str(tmp_path / "rm"), "--model", str(tiny_model_dir),
                 "--no-cache", "--search-pipeline", "rerank=minl2", "--out", str(tmp_path / "cli")]) == 0
    assert "loss" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["evaluate", "reviewers", "--data", str(tmp_path / "rm"), "--model", str(tiny_model_dir), "--scorer",
              "minl2", "--search-pipeline", "rerank=minl2", "--out", str(tmp_path / "x")])
    assert "leave out --scorer" in capsys.readouterr().err


def test_search_pipeline_command_refuses_the_benchmark_runners_options(tmp_path, tiny_model_dir, capsys):
    from aspire.cli import main

    with pytest.raises(SystemExit):
        main(["evaluate", "context2doc", "--search-pipeline", "stages=bm25", "--out", str(tmp_path)])
    assert "--search-pipeline needs --model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", "context2doc", "--model", str(tiny_model_dir), "--scorer", "minl2", "--search-pipeline",
              "--out", str(tmp_path)])
    assert "leave out --scorer" in capsys.readouterr().err
