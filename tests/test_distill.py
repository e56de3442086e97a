"""Distillation from a teacher's vectors: the teacher file, the `distill` task, and the soft-target
ranking loss (KL to the teacher's in-batch similarities), on a tiny random BERT."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.data.negatives.rank import nearest_negatives
from aspire.losses.ranking import MultipleNegativesRankingLoss
from aspire.train.data import Example, TripletCollator
from aspire.train.tasks import build_tasks
from aspire.train.teacher import load_teacher, main
from aspire.train.trainer import build_model, run
from tests.test_train import read_metrics, tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
WORDS = ["model", "results", "data", "task", "parser", "speech", "translation", "corpus"]


@pytest.fixture(scope="module")
def acl_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("acl") / "acl.jsonl"
    rows = [{"paper_id": f"Q{i}", "title": f"paper {WORDS[i % 8]} {i}",
             "abstract": [f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]}.", f"{WORDS[(i + 1) % 8]} task."]} for i in range(30)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def teacher_dir(tiny_model_dir, acl_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("teacher")
    assert main(["--teacher", str(tiny_model_dir), "--out", str(out), "--acl-path", str(acl_file),
                 "--benchmarks-dir", "", "--max-papers", "0", "--max-length", "32", "--batch-size", "8"]) == 0
    return out


def test_soft_targets_are_the_kl_to_the_teacher_and_other_rows_rank():
    torch.manual_seed(0)
    B, K = 4, 6
    sim = torch.randn(B, K, requires_grad=True)
    teacher = torch.randn(B, K)
    teacher[2] = float("nan")  # anchor 2 has no teacher vector: its row is the plain ranking loss
    teacher[:, 5] = float("nan")  # candidate 5 neither
    mask = torch.ones(B, K, dtype=torch.bool)
    mask[0, 1] = False  # a co-cited paper of anchor 0: in neither distribution
    loss_fn = MultipleNegativesRankingLoss(scale=3.0, teacher_scale=5.0)
    per_anchor, valid = loss_fn(sim, mask, teacher)
    plain, _ = MultipleNegativesRankingLoss(scale=3.0)(sim, mask)
    for b in (0, 1, 3):
        cols = [k for k in range(5) if mask[b, k] or k == b]
        p = torch.softmax(5.0 * teacher[b, cols], 0)
        q = torch.log_softmax(3.0 * sim[b, cols], 0)
        assert per_anchor[b].item() == pytest.approx((p * (p.log() - q)).sum().item(), rel=1e-5, abs=1e-6)
    assert per_anchor[2].item() == pytest.approx(plain[2].item())
    assert valid.all()
    per_anchor.sum().backward()
    assert torch.isfinite(sim.grad).all() and sim.grad[:, 5].abs().sum() > 0  # column 5 still ranks for row 2
    same, _ = loss_fn(5.0 / 3.0 * teacher.nan_to_num(0.0), mask, teacher)  # the model equals the teacher: zero
    assert same[[0, 1, 3]].abs().max().item() < 1e-5
    with pytest.raises(ValueError, match="symmetric does not combine"):
        MultipleNegativesRankingLoss(symmetric=True)(sim, mask, teacher)
    with pytest.raises(ValueError, match=r"teacher similarities \(4, 5\)"):
        loss_fn(sim, mask, teacher[:, :5])


def test_teacher_neighbours_are_the_nearest_other_rows_in_order():
    """The distill task's neighbours: `nearest_negatives` without partners, i.e. each paper's nearest others."""
    v = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.6, 0.8], [-1, 0]], dtype=np.float32)
    ids = list("01234")
    near = nearest_negatives(v, {}, ids, 2).negatives
    assert [[int(j) for j in near[i]] for i in ids] == [[1, 3], [0, 3], [3, 1], [2, 1], [2, 3]]
    near = nearest_negatives(v[:2], {}, ids[:2], 5).negatives
    assert [[int(j) for j in near[i]] for i in ids[:2]] == [[1], [0]]


def test_teacher_file_round_trips_and_names_what_is_missing(teacher_dir, tmp_path):
    teacher = load_teacher(teacher_dir)
    assert teacher.vectors.shape[0] == len(teacher.ids) == 30 and teacher.meta["papers"] == 30
    assert np.allclose(np.linalg.norm(teacher.vectors, axis=1), 1.0, atol=1e-5)
    assert teacher.meta["max_length"] == 32 and teacher.meta["benchmarks_dir"] is None and teacher.meta["removed_benchmark"] == 0
    assert teacher.rows(["Q3", "Q0"], "here").tolist() == [teacher.ids.index("Q3"), teacher.ids.index("Q0")]
    with pytest.raises(ValueError, match=r"here: 1 paper\(s\) have no teacher vector, e\.g\. \['X9'\]"):
        teacher.rows(["Q1", "X9"], "here")
    with pytest.raises(FileNotFoundError, match="vectors.npy is missing"):
        load_teacher(tmp_path)


def _distill_config(tiny_model_dir, examples_dir, out, acl_file, teacher_dir, *more):
    task = (f"{{name: distill, sources: [acl], acl_path: {acl_file}, benchmarks_dir: null, dev_share: 0.3, "
            f"teacher_dir: {teacher_dir}, neighbours: 3, views: 2}}")
    return tiny_config(tiny_model_dir, examples_dir, out, "model.kind=abstract", "loss.kind=mnrl",
                       f"tasks=[{{name: cocite}}, {task}]", "data.dev_batches=1", *more)


def test_distill_task_pairs_teacher_neighbours_and_batches_carry_its_similarities(
        tiny_model_dir, examples_dir, acl_file, teacher_dir, tmp_path):
    cfg = _distill_config(tiny_model_dir, examples_dir, tmp_path / "run", acl_file, teacher_dir)
    train, dev = build_tasks(cfg, "train"), build_tasks(cfg, "dev")
    part = train.parts[1]
    assert part.name == "distill" and len(part.examples) == 2 * len(part.papers)
    teacher = load_teacher(teacher_dir)
    ids = sorted(part.papers)
    vecs = teacher.vectors[teacher.rows(ids, "test")]
    near = {pid: set(others) for pid, others in nearest_negatives(vecs, {}, ids, 3).negatives.items()}
    assert all(e.positive_id in near[e.query_id] and e.task == 1 for e in part.examples)
    assert set(part.papers).isdisjoint(dev.parts[1].papers)
    model = build_model(cfg)
    collate = TripletCollator(model.tokenize, {**train.papers}, train.weights, train.sources, ["cocite", "distill"],
                              train.teacher)
    batch = collate([train.examples[0], part.examples[0], part.examples[1]])  # one co-cited pair, two distilled
    assert batch.teacher.shape == (3, 3) and torch.isnan(batch.teacher[0]).all() and torch.isnan(batch.teacher[:, 0]).all()
    a, p = (part.examples[0].query_id, part.examples[1].positive_id)
    assert batch.teacher[1, 2].item() == pytest.approx(float(train.teacher[a] @ train.teacher[p]), rel=1e-5)
    with pytest.raises(ValueError, match="distill task: needs loss.kind mnrl"):
        build_tasks(_distill_config(tiny_model_dir, examples_dir, tmp_path / "b", acl_file, teacher_dir,
                                    "loss.kind=multi_similarity"), "train")
    with pytest.raises(ValueError, match="teacher_dir is required"):
        build_tasks(_distill_config(tiny_model_dir, examples_dir, tmp_path / "c", acl_file, "null"), "train")


def test_distill_near_negatives_add_another_neighbour_that_the_teacher_scores(
        tiny_model_dir, examples_dir, acl_file, teacher_dir, tmp_path):
    """`near_negatives`: each distilled pair gets another of the anchor's neighbours as its hard negative (the
    partners stay those drawn without it); the batch's teacher matrix scores it; another task refuses the key."""
    from aspire.config import ConfigError

    plain = build_tasks(_distill_config(tiny_model_dir, examples_dir, tmp_path / "a", acl_file, teacher_dir), "train")
    cfg = _distill_config(tiny_model_dir, examples_dir, tmp_path / "b", acl_file, teacher_dir)
    cfg.tasks[1].near_negatives = True
    train = build_tasks(cfg, "train")
    part = train.parts[1]
    assert [(e.query_id, e.positive_id) for e in part.examples] == [(e.query_id, e.positive_id) for e in plain.parts[1].examples]
    teacher = load_teacher(teacher_dir)
    ids = sorted(part.papers)
    near = nearest_negatives(teacher.vectors[teacher.rows(ids, "test")], {}, ids, 3).negatives
    assert all(e.negative in near[e.query_id] and e.negative != e.positive_id for e in part.examples)
    assert all(e.negative is None for e in plain.parts[1].examples)
    model = build_model(cfg)
    collate = TripletCollator(model.tokenize, {**train.papers}, train.weights, train.sources, ["cocite", "distill"],
                              train.teacher)
    batch = collate([train.examples[0], part.examples[0], part.examples[1]])
    assert batch.teacher.shape == (3, 5) and batch.hard_rows.tolist() == [-1, 0, 1]
    a, h = part.examples[0].query_id, part.examples[1].negative
    assert batch.teacher[1, 4].item() == pytest.approx(float(train.teacher[a] @ train.teacher[h]), rel=1e-5)
    out = model(batch)
    assert torch.isfinite(out["loss"]) and out["task_rows"].tolist() == [1, 2]
    with pytest.raises(ConfigError, match="a crop task does not read near_negatives"):
        tiny_config(tiny_model_dir, examples_dir, tmp_path / "c", "tasks=[{name: crop, near_negatives: true}]")


def test_distill_and_cocite_train_together_and_log_each_loss(tiny_model_dir, examples_dir, acl_file, teacher_dir, tmp_path):
    cfg = _distill_config(tiny_model_dir, examples_dir, tmp_path / "run", acl_file, teacher_dir, "train.batch_size=6")
    metrics = run(cfg)
    assert metrics["step"] == 6 and np.isfinite(metrics["loss/distill"]) and np.isfinite(metrics["loss/cocite"])
    devs = [m for m in read_metrics(tmp_path / "run") if "dev_loss/distill" in m]
    assert devs and all(np.isfinite(m["dev_loss/distill"]) for m in devs)
    report = json.loads((tmp_path / "run" / "tasks.json").read_text())
    assert report["train"]["distill"]["teacher"]["papers"] == 30


# ---- sentence-level distillation: the teacher's vector of one sentence encoded alone teaches the facet term ----
@pytest.fixture(scope="module")
def sentence_teacher_dir(tiny_model_dir, acl_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("teacher_sent")
    assert main(["--teacher", str(tiny_model_dir), "--out", str(out), "--acl-path", str(acl_file), "--sentences",
                 "--benchmarks-dir", "", "--max-papers", "0", "--max-length", "32", "--batch-size", "8"]) == 0
    return out


def test_sentence_teacher_encodes_each_papers_seeded_sentence_alone(tiny_model_dir, acl_file, sentence_teacher_dir, tmp_path):
    from aspire.data.acl import read_acl
    from aspire.encoders import ContextualSentenceEncoder
    from aspire.train.teacher import SENTENCE_TEXTS, chosen_sentence

    teacher = load_teacher(sentence_teacher_dir)
    papers = {p.paper_id: p for p in read_acl(acl_file, frozenset(), 0)[0]}
    positions = [teacher.sentence_texts[i][0] for i in range(len(teacher.ids))]
    assert set(positions) == {0, 1}  # two sentences an abstract: the seed picks both across papers
    for pid, (position, text) in zip(teacher.ids, teacher.sentence_texts):
        assert position == chosen_sentence(pid, 2) and papers[pid].sentences[position] == text
    alone = ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir), max_length=32).embed_texts(
        [t for _, t in teacher.sentence_texts[:3]], normalize=True, max_length=32)
    np.testing.assert_allclose(teacher.sentences[:3], alone.numpy(), atol=1e-5)
    assert not np.allclose(teacher.sentences, teacher.vectors, atol=1e-3)  # a sentence alone is not the abstract
    assert load_teacher(teacher_dir_without_sentences(sentence_teacher_dir, tmp_path)).sentences is None
    again = tmp_path / "rebuilt"  # a build without --sentences over one with them leaves no stale sentences
    for args in (["--sentences"], []):
        assert main(["--teacher", str(tiny_model_dir), "--out", str(again), "--acl-path", str(acl_file), *args,
                     "--benchmarks-dir", "", "--max-papers", "5", "--max-length", "32"]) == 0
    assert load_teacher(again).sentences is None and not (again / SENTENCE_TEXTS).exists()
    (tmp_path / "half").mkdir()
    for name in ("vectors.npy", "ids.json", "teacher.json", "sentences.npy"):
        (tmp_path / "half" / name).write_bytes((sentence_teacher_dir / name).read_bytes())
    with pytest.raises(FileNotFoundError, match=f"sentences.npy and {SENTENCE_TEXTS} go together"):
        load_teacher(tmp_path / "half")


def teacher_dir_without_sentences(source: Path, tmp_path: Path) -> Path:
    out = tmp_path / "whole_only"
    out.mkdir()
    for name in ("vectors.npy", "ids.json", "teacher.json"):
        (out / name).write_bytes((source / name).read_bytes())
    return out


def test_sentence_teacher_selects_the_facet_and_gives_the_facet_term_its_targets(
        tiny_model_dir, examples_dir, acl_file, sentence_teacher_dir, tmp_path):
    cfg = _distill_config(tiny_model_dir, examples_dir, tmp_path / "run", acl_file, sentence_teacher_dir,
                          "model.kind=hybrid")
    train = build_tasks(cfg, "train")
    part, teacher = train.parts[1], load_teacher(sentence_teacher_dir)
    for e in part.examples:  # each distilled anchor's facet is the sentence the teacher encoded alone
        position, text = teacher.sentence_texts[teacher.ids.index(e.query_id)]
        assert e.align == (position, -1) and train.papers[e.query_id].sentences[position] == text
    model = build_model(cfg)
    collate = TripletCollator(model.tokenize, train.papers, train.weights, train.sources, ["cocite", "distill"],
                              train.teacher, train.sentence_teacher)
    cocited, d0, d1 = train.examples[0], part.examples[0], part.examples[2]
    moved = Example(d1.query_id, d1.positive_id, d1.members, None, (1 - d1.align[0], -1), task=1)
    batch = collate([cocited, d0, d1, moved])
    facet = batch.facet_teacher
    assert facet.shape == (4, 4) and torch.isnan(facet[0]).all() and torch.isnan(facet[3]).all()  # co-cited; another sentence
    sentence = train.sentence_teacher[d0.query_id][2]
    assert facet[1, 2].item() == pytest.approx(float(sentence @ train.teacher[d1.positive_id]), rel=1e-5)
    assert facet[1, 2].item() != pytest.approx(batch.teacher[1, 2].item(), rel=1e-3)  # not the whole-vector teacher
    docs = model.embed(batch.inputs)
    anchors, positives = docs.index(torch.arange(4)), docs.index(torch.arange(4, 8))
    idx, ok = model._facet_positions(batch, anchors, positives)
    assert ok.tolist() == [bool((torch.tensor(cocited.align) >= 0).all()), True, True, True]
    assert idx[1:].tolist() == [d0.align[0], d1.align[0], 1 - d1.align[0]]  # no title in front (include_title off)
    out = model(batch)
    assert torch.isfinite(out["loss"]) and out["loss/facet"] > 0
    without = TripletCollator(model.tokenize, train.papers, train.weights, train.sources, ["cocite", "distill"],
                              train.teacher)([cocited, d0, d1, moved])
    assert without.facet_teacher is None and model(without)["loss/facet"] != pytest.approx(out["loss/facet"].item())
    with pytest.raises(ValueError, match="sentence teacher vectors without the teacher's whole vectors"):
        TripletCollator(model.tokenize, train.papers, sentence_teacher=train.sentence_teacher)


def test_sentence_teacher_refuses_abstracts_that_changed_since_it_was_written(
        tiny_model_dir, examples_dir, acl_file, sentence_teacher_dir, tmp_path):
    rows = [json.loads(line) for line in acl_file.read_text().splitlines()]
    for r in rows:  # every abstract's sentences rewritten: whichever papers the split holds, none still match
        r["abstract"] = [f"{s} (revised)" for s in r["abstract"]]
    changed = tmp_path / "acl.jsonl"
    changed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = _distill_config(tiny_model_dir, examples_dir, tmp_path / "run", changed, sentence_teacher_dir, "model.kind=hybrid")
    with pytest.raises(ValueError, match=r"distill task \(train\): 21 paper\(s\) no longer hold the sentence the "
                                         r"teacher encoded, e\.g\. \['Q"):
        build_tasks(cfg, "train")


def test_sentence_teacher_past_max_sentences_is_the_cut_not_a_changed_abstract(
        tiny_model_dir, examples_dir, acl_file, sentence_teacher_dir, tmp_path, caplog):
    # data.max_sentences=1 cuts every abstract's second sentence: the papers whose chosen sentence is that one were
    # refused as "no longer hold the sentence the teacher encoded; write the teacher vectors again", which chose it again
    cfg = _distill_config(tiny_model_dir, examples_dir, tmp_path / "run", acl_file, sentence_teacher_dir,
                          "model.kind=hybrid", "data.max_sentences=1")
    part = build_tasks(cfg, "train").parts[1]
    teacher = load_teacher(sentence_teacher_dir)
    position = {pid: teacher.sentence_texts[i][0] for i, pid in enumerate(teacher.ids)}
    past = {pid for pid in part.papers if position[pid] >= 1}
    assert past and len(past) < len(part.papers)
    for e in part.examples:  # a facet where the cut keeps the sentence, none where it does not
        assert e.align == (None if e.query_id in past else (0, -1))
    assert part.stats["sentence_past_max_sentences"] == len(past)
    assert f"{len(past)} of the {len(part.papers)} papers have their teacher sentence past data.max_sentences=1" in caplog.text


def test_hybrid_trains_on_cocited_pairs_and_sentence_distillation(
        tiny_model_dir, examples_dir, acl_file, sentence_teacher_dir, tmp_path):
    cfg = _distill_config(tiny_model_dir, examples_dir, tmp_path / "run", acl_file, sentence_teacher_dir,
                          "model.kind=hybrid", "train.batch_size=6")
    metrics = run(cfg)
    assert metrics["step"] == 6 and np.isfinite(metrics["loss/distill"]) and np.isfinite(metrics["loss/cocite"])
    report = json.loads((tmp_path / "run" / "tasks.json").read_text())
    assert report["train"]["distill"]["teacher"]["sentences"].startswith("one seeded abstract sentence")
