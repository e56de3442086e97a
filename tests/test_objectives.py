"""Objectives beyond the triplet loss: kind `abstract`, ranking losses over every similarity,
tasks (context2doc, crops) and how they mix, on a tiny random BERT. Resume is exact in every mode."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from aspire.data.acl import normalise_title, read_acl
from aspire.data.papers import Paper
from aspire.train.config import TaskConfig
from aspire.train.data import TripletCollator, load_split
from aspire.train.mixing import MixSampler, alternating_cycle, split_batch
from aspire.train.tasks import author_pairs, build_tasks, crop_pairs, title_pair
from aspire.train.trainer import build_model, run
from tests.test_train import read_metrics, tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
CROP = "{name: crop, sources: [cocite], benchmarks_dir: null, views: 2, dev_share: 0.4, span_max: 2}"


# ---- kind abstract ------------------------------------------------------------------------------------
def test_abstract_kind_encodes_like_the_abstract_scorer(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=abstract", "model.max_length=24")
    model = build_model(cfg)
    papers = [load_split(cfg.data, "train").papers[p] for p in sorted(load_split(cfg.data, "train").papers)[:5]]
    papers.append(Paper("ctx", "", ["a citing sentence with the model"]))  # a context: no title
    ours = model.encode(papers).emb[:, 0]
    theirs = model.encoder.encode_abstract(papers, joiner=" ", normalize=True, max_length=24)
    assert torch.allclose(ours, theirs, atol=1e-5)
    model.save_pretrained(tmp_path / "saved")
    loaded = type(model).from_pretrained(tmp_path / "saved")
    assert loaded.inference_name == "abstract" and loaded.abstract_cfg == model.abstract_cfg
    sim = loaded.score(loaded.encode(papers), loaded.encode(papers))
    assert torch.allclose(sim.diagonal(), torch.ones(6), atol=1e-5)


# ---- ranking losses over each similarity ---------------------------------------------------------------
@pytest.mark.parametrize("kind", ["abstract", "max", "ot", "ts", "cocite_vector"])
@pytest.mark.parametrize("loss", ["mnrl", "multi_similarity", "bce"])
def test_matrix_losses_train_every_similarity(kind, loss, tiny_model_dir, examples_dir, tmp_path):
    hard = tmp_path / "hard.jsonl"
    names = sorted(json.loads(x)["paper_id"] for x in open(examples_dir / "abstracts.jsonl"))
    hard.write_text("".join(json.dumps({"paper_id": n, "negatives": [names[0], names[-1]]}) + "\n" for n in names))
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, f"model.kind={kind}", f"loss.kind={loss}",
                      f"data.hard_negatives={hard}",
                      *([] if loss != "multi_similarity" else ["loss.ms_base=0.5" if kind == "abstract" else "loss.ms_base=-1.0"]))
    model = build_model(cfg)
    data = load_split(cfg.data, "train")
    batch = TripletCollator(model.tokenize, data.papers)([data[i] for i in range(0, 24, 3)])
    out = model(batch)
    assert torch.isfinite(out["loss"]) and out["loss"] > 0 and int(out["triples"]) > 0
    out["loss"].backward()
    grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)


def test_mnrl_model_loss_matches_a_hand_computation(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", "loss.kind=mnrl",
                      "loss.scale=3.0")
    model = build_model(cfg).eval()
    data = load_split(cfg.data, "train")
    examples = [data[i] for i in range(12)]  # several anchors share a co-cited set: masked out
    batch = TripletCollator(model.tokenize, data.papers)(examples)
    with torch.no_grad():
        out = model(batch)
        docs = model.embed(batch.inputs)
    B = len(examples)
    dist = torch.cdist(docs.emb[:B, 0], docs.emb[B : 2 * B, 0])
    per_anchor = []
    for i, e in enumerate(examples):
        cols = [i] + [j for j in range(B) if examples[j].positive_id not in e.members]
        if len(cols) > 1:
            logits = -3.0 * dist[i, cols]
            per_anchor.append(logits.logsumexp(0) - logits[0])
    assert int(out["triples"]) == len(per_anchor) > 0
    assert out["loss"].item() == pytest.approx(torch.stack(per_anchor).mean().item(), rel=1e-5)


def test_in_batch_ot_is_a_batch_of_transport_problems(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=ot", "loss.kind=mnrl")
    model = build_model(cfg).eval()
    data = load_split(cfg.data, "train")
    batch = TripletCollator(model.tokenize, data.papers)([data[i] for i in range(0, 15, 3)])
    with torch.no_grad():
        docs = model.embed(batch.inputs)
        a, p = docs.index(torch.arange(5)), docs.index(torch.arange(5, 10))
        ot = model._dist("ot")
        full = ot.dist(a, p)  # (5, 5): 25 transport problems at once
        for j in range(5):
            column = ot.pairwise_dist(a, p.index([j] * 5))  # each anchor against positive j, one at a time
            assert torch.allclose(full[:, j], column, atol=1e-4)


# ---- mixing -------------------------------------------------------------------------------------------
def test_mixed_batches_hold_every_task_by_ratio_and_resume_anywhere():
    assert split_batch(10, [1, 1, 3]) == [2, 2, 6]
    with pytest.raises(ValueError, match="no pair"):
        split_batch(2, [1, 1, 10])
    s = MixSampler([40, 30], [0, 40], "mixed", [3, 1], batch_size=8, seed=1, epoch=0)
    batches = list(s)
    assert len(batches) == 70 // 8
    for b in batches:
        assert sum(i < 40 for i in b) == 6 and sum(i >= 40 for i in b) == 2
    assert list(MixSampler([40, 30], [0, 40], "mixed", [3, 1], 8, 1, 0, start=4)) == batches[4:]
    later = list(MixSampler([40, 30], [0, 40], "mixed", [3, 1], 8, 1, epoch=1))
    assert later != batches
    first = [i for b in batches[:6] for i in b if i < 40]  # task 0: 6 chunks of 6 = one pass (40 // 6 = 6)
    assert len(first) == len(set(first)) == 36
    shards = [list(MixSampler([40, 30], [0, 40], "mixed", [3, 1], 4, 1, 0, rank=r, world_size=2)) for r in (0, 1)]
    for b0, b1 in zip(*shards):
        assert not set(b0) & set(b1)


def test_alternating_batches_follow_the_ratios():
    cycle = alternating_cycle([2, 1, 1])
    assert [cycle.count(t) for t in range(3)] == [30, 15, 15]
    assert all(cycle[i : i + 2] != [1, 1] for i in range(len(cycle) - 1))  # spread out, not in runs
    s = MixSampler([50, 20, 20], [0, 50, 70], "alternating", [2, 1, 1], 5, seed=0, epoch=0)
    tasks = [0 if b[0] < 50 else 1 if b[0] < 70 else 2 for b in s]
    for b, t in zip(s, tasks):
        lo, hi = [(0, 50), (50, 70), (70, 90)][t]
        assert all(lo <= i < hi for i in b)
    assert len(tasks) == 90 // 5 and tasks == cycle[:18]  # the batches follow the cycle slot by slot


def test_sequential_stages_run_in_order():
    s = MixSampler([20, 20], [0, 20], "sequential", [1, 1], 4, seed=0, epoch=0, stage_batches=[3, 2])
    batches = list(s)
    assert len(batches) == 5
    assert all(i < 20 for b in batches[:3] for i in b) and all(i >= 20 for b in batches[3:] for i in b)
    with pytest.raises(ValueError, match="steps >= 1"):
        MixSampler([20, 20], [0, 20], "sequential", [1, 1], 4, 0, 0, stage_batches=[3, 0])


# ---- tasks ---------------------------------------------------------------------------------------------
def test_crops_are_spans_of_the_abstract_drawn_the_same_every_time():
    paper = Paper("p1", "A title", [f"sentence {i}." for i in range(6)])
    task = TaskConfig(name="crop", span_min=2, span_max=3, views=4)
    examples, crops = crop_pairs(paper, task, index=1)
    assert len(examples) == 4 and len(crops) == 8
    text = paper.sentences
    for crop in crops:
        n = len(crop.sentences)
        assert 2 <= n <= 3 and crop.title == ""
        assert any(text[s : s + n] == crop.sentences for s in range(len(text)))
    assert all(e.members == ("p1",) and e.positive_source == "p1" and e.task == 1 for e in examples)
    assert crop_pairs(paper, task, 1) == (examples, crops)
    assert crop_pairs(Paper("p2", "t", ["one sentence."]), task, 1) == ([], [])


def test_acl_reader_removes_benchmark_titles_and_counts_them(tmp_path, monkeypatch):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    assert normalise_title("BERT: Pre-training of Deep (Bidirectional) Transformers!") == "bertpretrainingofdeepbidirectionaltransformers"
    path = tmp_path / "papers.jsonl.gz"
    rows = [{"paper_id": f"P{i}", "title": f"Paper number {i}", "abstract": "First sentence here. Second one there."}
            for i in range(5)]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in rows))
    papers, stats = read_acl(path, frozenset({normalise_title("PAPER number-1"), normalise_title("paper number 3")}), 0)
    assert sorted(p.paper_id for p in papers) == ["P0", "P2", "P4"]
    assert stats == {"read": 5, "removed_benchmark": 2, "used": 3, "rejected": {}}
    assert len(papers[0].sentences) == 2


def test_acl_reader_caches_split_abstracts_and_resplits_a_changed_one(tmp_path, monkeypatch):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "acl.jsonl"
    rows = [{"paper_id": f"P{i}", "title": f"T {i}", "abstract": f"First {i} here. Second one."} for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    papers, _ = read_acl(path, frozenset(), 0)
    cache = next((tmp_path / "cache" / "sentences").glob("*.json"))  # not its .lock file
    stored = json.loads(cache.read_text())
    assert sorted(stored) == ["P0", "P1", "P2"] and stored["P1"][1] == ["First 1 here.", "Second one."]
    stored["P1"][1] = ["From the cache."]  # a hit is read, not re-split
    cache.write_text(json.dumps(stored))
    read_acl.cache_clear()
    assert read_acl(path, frozenset(), 0)[0][1].sentences == ["From the cache."]
    stored["P2"][0] = "another text"  # a text whose hash differs is split again
    cache.write_text(json.dumps(stored))
    read_acl.cache_clear()
    assert read_acl(path, frozenset(), 0)[0][2].sentences == ["First 2 here.", "Second one."]


def test_acl_reader_takes_a_presplit_plain_file_and_keeps_other_fields(tmp_path, monkeypatch):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "papers.split.jsonl"
    rows = [{"paper_id": "A1", "title": "T one", "abstract": ["One. Not split again.", "Two."], "authors": ["X Y"]},
            {"paper_id": "A2", "title": "T two", "abstract": "First here. Second there.", "year": 2020}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    papers, stats = read_acl(path, frozenset(), 0)
    assert [p.sentences for p in papers] == [["One. Not split again.", "Two."], ["First here.", "Second there."]]
    assert papers[0].extra["authors"] == ["X Y"] and papers[1].extra["year"] == 2020
    assert stats == {"read": 2, "removed_benchmark": 0, "used": 2, "rejected": {}}


def test_acl_reader_names_a_bad_record_and_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "acl.jsonl"
    rows = [{"paper_id": "G1", "title": "Good", "abstract": ["Fine."]},
            {"paper_id": "B2", "title": "Bad", "abstract": ["Fine.", "\ufeff"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    papers, stats = read_acl(path, frozenset(), 0)
    assert [p.paper_id for p in papers] == ["G1"] and stats["used"] == 1
    assert list(stats["rejected"]) == [f"{path}:2"] and "B2" in stats["rejected"][f"{path}:2"]


def test_title_pair_is_the_title_against_the_abstract_without_it():
    example, title, body = title_pair(Paper("p1", "A title", ["s one.", "s two."]), 2)
    assert (title.title, title.sentences) == ("", ["A title"])
    assert (body.title, body.sentences) == ("", ["s one.", "s two."])
    assert (example.query_id, example.positive_id) == (title.paper_id, body.paper_id)
    assert example.members == ("p1",) and example.positive_source == "p1" and example.task == 2
    assert title_pair(Paper("p2", "  ", ["s."]), 0) is None and title_pair(Paper("p3", "t", []), 0) is None


def test_author_pairs_link_papers_sharing_enough_authors():
    def paper(pid, *names):
        return Paper(pid, pid, ["s."], extra={"authors": list(names)})

    papers = [paper("a", "Ann Lee", "Bo Chen"), paper("b", "ann  LEE", "Bo Chen"), paper("c", "Ann Lee", "Cy Dee"),
              paper("d", "Dan Fox"), paper("e", "Prolific P")] + [paper(f"p{i}", "Prolific P") for i in range(3)]
    task = TaskConfig(name="author", sources=["acl"], views=5, max_author_papers=3)
    examples, stats = author_pairs(papers, task, 1)
    pairs = {(e.query_id, e.positive_id) for e in examples}
    assert pairs == {("a", "b"), ("a", "c"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")}
    assert {e.query_id: e.members for e in examples}["c"] == ("a", "b", "c")
    assert stats["authors_over_max"] == 1 and stats["papers_without_partner"] == 5
    strict, _ = author_pairs(papers, TaskConfig(name="author", sources=["acl"], views=5, min_shared_authors=2), 0)
    assert {(e.query_id, e.positive_id) for e in strict} == {("a", "b"), ("b", "a")}
    one, _ = author_pairs(papers, TaskConfig(name="author", sources=["acl"], views=1, max_author_papers=3), 0)
    assert len(one) == 3 and one == author_pairs(papers, TaskConfig(name="author", sources=["acl"], views=1, max_author_papers=3), 0)[0]
    with pytest.raises(ValueError, match="paper x: 'authors' must be a list"):
        author_pairs([Paper("x", "t", ["s."], extra={"authors": "Ann Lee"})], task, 0)


def test_title_and_author_tasks_train_from_an_acl_file(tiny_model_dir, examples_dir, tmp_path):
    path = tmp_path / "acl.jsonl"
    rows = [{"paper_id": f"Q{i}", "title": f"paper title {i}", "abstract": ["model results.", "data task."],
             "authors": [f"author {i % 4}", "shared person" if i % 2 else "other person"]} for i in range(24)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    src = f"sources: [acl], acl_path: {path}, benchmarks_dir: null, dev_share: 0.25"
    tasks = f"tasks=[{{name: title, {src}}}, {{name: author, {src}, views: 2}}]"
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "model.kind=abstract", "loss.kind=mnrl", tasks,
                      "data.dev_batches=1")
    train, dev = build_tasks(cfg, "train"), build_tasks(cfg, "dev")
    assert train.names == ["title", "author"] and min(train.sizes) > 0 and min(dev.sizes) > 0
    train_ids = {e.positive_source for e in train.examples}
    assert train_ids.isdisjoint({e.positive_source for e in dev.examples})
    with pytest.raises(ValueError, match=r"author task: unknown source\(s\) \['cocite'\]"):
        build_tasks(tiny_config(tiny_model_dir, examples_dir, tmp_path / "bad", "tasks=[{name: author, sources: [cocite], benchmarks_dir: null}]"),
                    "train")
    metrics = run(cfg)
    assert metrics["step"] > 0 and all(k in metrics for k in ("loss/title", "loss/author"))


@pytest.mark.slow
def test_context2doc_task_uses_train_and_dev_queries_only(shared_data, tiny_model_dir, examples_dir, tmp_path):
    from aspire.benchmarks.context2doc import load_split as load_c2d

    task = f"tasks=[{{name: context2doc, data_dir: {shared_data / 'cocite-acl'}}}]"
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, task)
    meta = load_c2d()["splits"]
    # a test query's text, markers written otherwise (L1623, L1838, L1317), or a reworded copy of one citing its
    # papers (>= 0.5 of its word 5-grams: L877, L235, L82, L2448, L844; heldout_reworded.md)
    twins = {"train": {"L1623", "L1838", "L877", "L235", "L82"}, "dev": {"L1317", "L2448", "L844"}}
    for split in ("train", "dev"):
        data = build_tasks(cfg, split)
        anchors = {e.query_id for e in data.examples}
        assert anchors == {f"ctx:{q}" for q in meta[split]["queries"] if q not in twins[split]}
        assert all(e.positive_id in e.members and e.query_id in e.members for e in data.examples)
    with pytest.raises(ValueError, match="test"):
        from aspire.train.tasks import context2doc_task

        context2doc_task(cfg, cfg.tasks[0], "test", 0)


# ---- multi-task runs: per-task logs, exact resume in every mode ----------------------------------------
@pytest.mark.parametrize("mode", ["mixed", "alternating", "sequential"])
def test_multitask_resume_gives_the_same_weights_and_losses(mode, tiny_model_dir, examples_dir, tmp_path):
    steps = "steps: 3, " if mode == "sequential" else ""
    tasks = f"tasks=[{{name: cocite, {steps}weight: 1.0}}, {CROP[:-1]}, {steps}weight: 0.5}}]"
    common = ("model.kind=cocite_vector", "loss.kind=mnrl", tasks, f"mix.mode={mode}", "data.dev_batches=1")
    straight = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "a", *common))
    part = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", *common, "train.stop_after=4"))
    assert part["step"] == 4
    resumed = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", *common), resume=True)
    assert resumed["step"] == straight["step"] == 6
    assert resumed["weights_digest"] == straight["weights_digest"]
    logged = lambda d: [{k: v for k, v in m.items() if k != "triples_per_s"} for m in read_metrics(d)  # noqa: E731
                        if "loss" in m or "dev_loss" in m]
    assert logged(tmp_path / "b") == logged(tmp_path / "a")
    train = [m for m in read_metrics(tmp_path / "a") if "loss" in m]
    assert all({"loss/cocite", "loss/crop"} <= set(m) for m in train)
    dev = [m for m in read_metrics(tmp_path / "a") if "dev_loss" in m]
    for m in dev:
        assert m["dev_loss"] == pytest.approx(m["dev_loss/cocite"] + 0.5 * m["dev_loss/crop"])
    report = json.loads((tmp_path / "a" / "tasks.json").read_text())
    assert set(report["train"]) == {"cocite", "crop"} and report["dev"]["crop"]["pairs"] > 0
    if mode == "sequential":  # stage 1 is co-citation only, stage 2 crops only
        assert [m["loss/crop"] is None for m in train] == [True] * 3 + [False] * 3
        assert [m["loss/cocite"] is None for m in train] == [False] * 3 + [True] * 3


def test_a_task_whose_dev_split_cannot_fill_a_batch_is_named_before_training(tiny_model_dir, examples_dir, tmp_path):
    tasks = f"tasks=[{{name: cocite, weight: 1.0}}, {CROP[:-1]}, weight: 0.5}}]"  # dev: cocite 10, crop 26 examples
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", "loss.kind=mnrl", tasks,
                      "train.batch_size=11")
    with pytest.raises(ValueError, match=r"^task 'cocite''s dev split holds 10 example\(s\), fewer than one batch"):
        run(cfg)
    assert not list(tmp_path.glob("checkpoint-*"))


def test_sequential_needs_max_steps_to_match_the_stages(tiny_model_dir, examples_dir, tmp_path):
    tasks = f"tasks=[{{name: cocite, steps: 2}}, {CROP[:-1]}, steps: 2}}]"
    with pytest.raises(ValueError, match="max_steps must be 0 or that"):
        run(tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", tasks, "mix.mode=sequential"))
