"""Cross-encoder reranking and its self-training, with a tiny random BERT (no network)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aspire.config import ConfigError, load_config
from aspire.evaluate.options import Stages
from aspire.scoring.crossencoder import CrossEncoderReranker, load_cross_encoder, mix_rerank
from aspire.train.crossencoder import CrossEncoderConfig, fit_cross_encoder, labelled_pairs, sample_negatives
from aspire.train.self_training import SelfTrainingConfig, label_precision, pseudo_labels

REPO = Path(__file__).resolve().parents[1]
FIRST = [("a", 4.0), ("b", 3.0), ("c", 2.0), ("d", 1.0), ("e", 0.5)]


def test_mix_weight_one_follows_the_cross_encoder_and_keeps_the_tail():
    cross = {"a": 0.1, "b": 0.9, "c": 0.5}
    ranked = mix_rerank(FIRST, cross, top_n=3, weight=1.0)
    assert [d for d, _ in ranked] == ["b", "c", "a", "d", "e"]
    scores = [s for _, s in ranked]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 5


def test_mix_weight_zero_keeps_the_first_stage():
    cross = {"a": 0.1, "b": 0.9, "c": 0.5, "d": 3.0, "e": -1.0}
    assert [d for d, _ in mix_rerank(FIRST, cross, top_n=5, weight=0.0)] == ["a", "b", "c", "d", "e"]
    # a middle weight lands between: b (second on both) overtakes a only when the cross-encoder counts enough
    assert [d for d, _ in mix_rerank(FIRST, {"a": 0.0, "b": 1.0}, top_n=2, weight=0.4)][:2] == ["a", "b"]
    assert [d for d, _ in mix_rerank(FIRST, {"a": 0.0, "b": 1.0}, top_n=2, weight=0.6)][:2] == ["b", "a"]


def test_mix_bad_input_is_named():
    with pytest.raises(ValueError, match="weight must be in"):
        mix_rerank(FIRST, {}, 2, 1.5)
    with pytest.raises(ValueError, match="top_n must be"):
        mix_rerank(FIRST, {}, 0, 0.5)
    with pytest.raises(ValueError, match=r"no cross-encoder score .*'b'"):
        mix_rerank(FIRST, {"a": 1.0}, 2, 0.5)


def test_reranker_orders_as_its_scores_say(tiny_model_dir):
    reranker = CrossEncoderReranker(str(tiny_model_dir), max_length=32, batch_size=2)
    texts = {"a": "the model of text", "b": "neural network language", "c": "citation similarity",
             "d": "scientific abstract title", "e": "data"}
    scores = reranker.score("a new method for text", [texts[d] for d, _ in FIRST[:4]])
    assert scores.shape == (4,) and np.isfinite(scores).all() and len(set(scores.tolist())) == 4
    ranked = reranker.rerank("a new method for text", FIRST, texts, top_n=4, weight=1.0)
    expected = [FIRST[i][0] for i in np.argsort(-scores)]
    assert [d for d, _ in ranked] == expected + ["e"]
    assert reranker.speed()["pairs"] == 8
    with pytest.raises(ValueError, match=r"no text for documents \['b'\]"):
        reranker.rerank("q", FIRST, {"a": "x"}, top_n=2)


def test_fit_learns_the_labels(tiny_model_dir, tmp_path):
    model = load_cross_encoder(str(tiny_model_dir), max_length=32)
    queries = {"q1": "neural network language", "q2": "citation similarity"}
    texts = {"p1": "neural network language model", "p2": "citation similarity of documents",
             "n1": "café naïve résumé", "n2": "fig e g i vs cf"}
    pairs = labelled_pairs(queries, {"q1": ["p1"], "q2": ["p2"]}, {"q1": ["n1", "n2"], "q2": ["n1", "n2"]}, texts)
    assert len(pairs) == 6 and sum(y for _, _, y in pairs) == 2
    cfg = CrossEncoderConfig(max_steps=40, batch_size=6, learning_rate=1e-3, warmup=0.0, logging_steps=10)
    report = fit_cross_encoder(model, pairs, tmp_path, cfg)
    assert report["steps"] == 40 and report["positives"] == 2
    reranker = CrossEncoderReranker(model)
    logits = reranker.score_pairs([(q, d) for q, d, _ in pairs])
    labels = np.array([y for _, _, y in pairs])
    assert logits[labels == 1].min() > logits[labels == 0].max()
    model.save_pretrained(str(tmp_path / "model"))
    again = CrossEncoderReranker(str(tmp_path / "model")).score_pairs([(q, d) for q, d, _ in pairs])
    np.testing.assert_allclose(again, logits, atol=1e-5)
    with pytest.raises(ValueError, match="query q1: document zz has no text"):
        labelled_pairs(queries, {"q1": ["zz"]}, {}, texts)


def test_sample_negatives_leave_out_positives():
    ranked = {"q": ["p", "a", "b", "c", "d"]}
    neg = sample_negatives(ranked, {"q": ["p", "c"]}, n=5, depth=4, seed=0)
    assert sorted(neg["q"]) == ["a", "b"]


def test_pseudo_labels_take_top_k_and_the_band():
    ranked = {"q": [f"d{i}" for i in range(1, 21)], "short": ["x1", "x2", "x3", "x4"]}
    pos, neg = pseudo_labels(ranked, positives=3, band=(6, 20), negatives=0, seed=0)
    assert pos["q"] == ["d1", "d2", "d3"] and neg["q"] == [f"d{i}" for i in range(6, 21)]
    assert pos["short"] == ["x1", "x2", "x3"] and neg["short"] == []
    _, some = pseudo_labels(ranked, positives=3, band=(6, 20), negatives=4, seed=1)
    assert len(some["q"]) == 4 and set(some["q"]) <= {f"d{i}" for i in range(6, 21)}
    assert label_precision(pos, {"q": {"d2": 1}, "short": {}}) == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="positives"):
        pseudo_labels(ranked, positives=3, band=(3, 20), negatives=1, seed=0)
    with pytest.raises(ValueError, match="query short: 4 ranked documents"):
        pseudo_labels(ranked, positives=5, band=(6, 20), negatives=1, seed=0)


def test_self_training_config_from_yaml_and_bad_configs(tmp_path):
    cfg = load_config(SelfTrainingConfig, REPO / "configs" / "self_training.yaml").check()
    assert (cfg.positives, cfg.band_from, cfg.band_to, cfg.shortlist) == (3, 6, 20, 20)
    assert load_config(CrossEncoderConfig, REPO / "configs" / "crossencoder.yaml").base_model == "minilm"
    for overrides, message in ((["band_from=3"], "must come after"), (["band_to=25"], "within the shortlist"),
                               (["band_from=12", "band_to=10"], "band_to"), (["train.max_lenght=3"], "max_lenght"),
                               (["rounds=0"], "rounds"),
                               (["train.base_model=x", "train.negatives=99"],  # once accepted and never read
                                r"self-training does not read train.base_model, train.negatives \(its cross-encoder")):
        with pytest.raises(ConfigError, match=message):
            load_config(SelfTrainingConfig, REPO / "configs" / "self_training.yaml", overrides).check()


def test_cli_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aspire.train.self_training", "--out", str(tmp_path), "band_to=40"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "band_to (40) must be within the shortlist" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "aspire.evaluate", "context2doc", "--bm25", "--rerank-top", "10",
                           "--out", str(tmp_path / "x")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "go with --rerank MODEL" in proc.stderr


def test_context2doc_rerank_tiny(tmp_path, tiny_model_dir):
    from test_benchmarks import tiny_context2doc

    from aspire.benchmarks.runs import read_run
    from aspire.evaluate.context2doc_run import run_context2doc
    from aspire.retrieval.crossencoder import RerankOptions

    bench = tiny_context2doc(tmp_path)
    base = run_context2doc(bench, tmp_path / "bm25", "bm25", stages=Stages(bm25=True))
    same = run_context2doc(bench, tmp_path / "w0", "w0", stages=Stages(True, rerank=RerankOptions(str(tiny_model_dir), 4, 0.0)))
    assert same["metrics"] == base["metrics"]  # weight 0 keeps the first stage
    res = run_context2doc(bench, tmp_path / "w1", "w1", stages=Stages(True, rerank=RerankOptions(str(tiny_model_dir), 4, 1.0)))
    cross = json.loads((tmp_path / "w1" / "crossencoder_scores.json").read_text())
    assert set(cross) == set(bench.queries) and all(len(v) == 4 for v in cross.values())
    run = read_run(tmp_path / "w1" / "run.trec")
    for qid, ranked in run.items():  # weight 1: the top 4 in the cross-encoder's order
        assert [d for d, _ in ranked[:4]] == sorted(cross[qid], key=lambda d: -cross[qid][d])
    assert res["rerank"]["speed"]["pairs"] == 4 * len(bench.queries) and res["rerank"]["top_n"] == 4
    with pytest.raises(ValueError, match="rerank weight"):
        RerankOptions("m", 4, 2.0)


@pytest.fixture
def self_training(tmp_path, tiny_model_dir, monkeypatch):
    """Self-training on a tiny co-citation set in tmp_path/cc, with a split file (20 train queries, the
    rest dev) and the tiny model as start and first stage. Call it with the test's own config overrides;
    it runs `self_train` into tmp_path/st and returns the log of rounds."""
    from test_benchmarks import make_cocite

    from aspire.benchmarks import context2doc as c2d
    from aspire.train.self_training import self_train

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    source = make_cocite(tmp_path / "cc" / "cocitations.jsonl")
    meta = c2d.make_split(source)
    queries = [q for part in meta["splits"].values() for q in part["queries"]]
    meta["splits"] = {name: {"n_queries": len(qs), "queries": qs, "citing_papers": [], "n_citing_papers": 0}
                      for name, qs in (("train", queries[:20]), ("dev", queries[20:]), ("test", []))}
    meta["checksum"] = c2d._checksum(meta["splits"])
    (tmp_path / "split.json").write_text(json.dumps(meta))
    shared = [f"start_model={tiny_model_dir}", "max_queries=8", "shortlist=6", "positives=2", "band_from=4",
              "band_to=6", "negatives=2", f"train.first_stage_model={tiny_model_dir}", "train.max_length=32",
              "train.batch_size=8"]

    def run(*overrides: str) -> list[dict]:
        cfg = load_config(SelfTrainingConfig, None, [*shared, *overrides])
        return self_train(tmp_path / "cc", tmp_path / "st", cfg, split_file=tmp_path / "split.json")

    return run


def test_self_training_rounds_end_to_end(tmp_path, self_training):
    log = self_training("label_with_start=true", "rounds=2", "train.max_steps=2", "train.dev_top_n=3",
                        "train.logging_steps=1")
    assert [r["round"] for r in log] == [1, 2] and all(r["steps"] == 2 for r in log)
    assert all(r["pairs"] == 8 * (2 + 2) and r["positives"] == 16 for r in log)
    assert all(0.0 <= r["pseudo_positive_precision"] <= 1.0 for r in log)
    assert all(r["dev"]["top_n"] == 3 and "MRR" in r["dev"]["reranked"] for r in log)
    saved = json.loads((tmp_path / "st" / "rounds.json").read_text())
    assert saved["rounds"] == json.loads(json.dumps(log)) and (tmp_path / "st" / "round-2" / "model").is_dir()


def test_self_training_takes_acl_queries_without_the_candidates(tmp_path, self_training):
    import gzip

    acl = tmp_path / "acl.jsonl.gz"
    records = [{"paper_id": "A1", "title": "Text Paper!", "abstract": "The text model. We show results."},  # a candidate
               {"paper_id": "A2", "title": "Neural data", "abstract": "A neural model of data. It learns."},
               {"paper_id": "A3", "title": "Citation task", "abstract": "Citation counts. A task."}]
    with gzip.open(acl, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(json.dumps(r) for r in records) + "\n")
    log = self_training("rounds=1", "acl_queries=5", f"acl_path={acl}", "benchmarks_dir=null", "train.max_steps=1",
                        "train.dev_top_n=0")
    assert log[0]["acl"] == {"read": 3, "removed_benchmark": 1, "used": 2, "excluded_titles": {"candidates": 10},
                            "rejected": {}, "removed_benchmark_by": {"title": 1, "paper_id": 0, "abstract": 0}}
    assert log[0]["queries"] == 8 + 2 and log[0]["pairs"] == 10 * (2 + 2)


@pytest.mark.parametrize("module", ["aspire.train.crossencoder", "aspire.train.self_training"])
def test_training_commands_refuse_an_out_folder_that_holds_files(tmp_path, capsys, module):
    """train-crossencoder and self-train refuse an --out holding an earlier run's files before they read any data
    (--data here does not exist: the --out check comes first, after the config's)."""
    import importlib

    out = tmp_path / "run"
    (out / "round-3").mkdir(parents=True)
    main = importlib.import_module(module).main
    assert main(["--data", str(tmp_path / "no-data"), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"error: --out {out} already holds an earlier run's files; choose another "
                                       "--out or remove that folder first\n")
    assert [p.name for p in out.iterdir()] == ["round-3"]


def test_self_training_draws_its_starting_head_from_its_seed(self_training, monkeypatch):
    """The start model is a plain encoder, so `load_cross_encoder` gives it a fresh head: drawn from seed 0 whatever
    the config's seed was, until self-training passed its own."""
    from aspire.scoring import crossencoder

    seeds, real = [], crossencoder.load_cross_encoder

    def load(*args, seed=0, **kwargs):
        seeds.append(seed)
        return real(*args, seed=seed, **kwargs)

    monkeypatch.setattr(crossencoder, "load_cross_encoder", load)
    self_training("rounds=1", "seed=11", "train.max_steps=1", "train.dev_top_n=0")
    assert seeds[:1] == [11]
