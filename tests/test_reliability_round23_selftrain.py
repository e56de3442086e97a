"""Round 23, task mixing, self-training and the teacher's files: the mix modes' schedules against hand-computed
ones and an independent smooth weighted round-robin, resume mid-epoch, the mixed mode's shares measured over many
steps, pseudo labels against a brute-force top k, and the inputs each accepted silently."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pytest
import torch
from test_crossencoder import self_training  # noqa: F401  (the fixture: a tiny self-training run)

from aspire.config import ConfigError, load_config
from aspire.train.mixing import CYCLE, MixSampler, alternating_cycle
from aspire.train.self_training import SelfTrainingConfig, pseudo_labels
from aspire.train.teacher import IDS, META, SENTENCE_TEXTS, SENTENCES, VECTORS, load_teacher


def _task_of(offsets):
    return lambda i: max(t for t, o in enumerate(offsets) if i >= o)


def _swrr(weights, length):
    """nginx's smooth weighted round-robin over integer `weights` (summing to `length`), written out again."""
    current, out = [0] * len(weights), []
    for _ in range(length):
        for t, w in enumerate(weights):
            current[t] += w
        best = 0
        for t in range(1, len(weights)):
            if current[t] > current[best]:
                best = t
        current[best] -= sum(weights)
        out.append(best)
    return out


# ---- the mixed mode's shares: the ratios, not the tasks' sizes --------------------------------------------------
@pytest.mark.parametrize("ratios,shares", [([1.0, 1.0, 1.0], [4, 4, 4]), ([3.0, 1.0, 2.0], [6, 2, 4]),
                                           ([0.5, 0.25, 0.25], [6, 3, 3])])
def test_mixed_mode_shares_follow_the_ratios_not_the_task_sizes(ratios, shares):
    """The older "mixed-mode task shares" question: over 1,000 micro-batches of 12 pairs, task sizes 200 / 30 / 70
    (2/3, 1/10, 7/30 of the examples), each task's share of the pairs is its ratio's, in every single batch too."""
    sizes, offsets = [200, 30, 70], [0, 200, 230]
    task = _task_of(offsets)
    sampler = MixSampler(sizes, offsets, "mixed", ratios, 12, seed=3, epoch=0)
    per_batch = [Counter(task(i) for i in sampler.batch(g)) for g in range(1000)]
    assert all([c[t] for t in range(3)] == shares for c in per_batch)
    total = sum(per_batch, Counter())
    assert [total[t] / 12000 for t in range(3)] == pytest.approx([r / sum(ratios) for r in ratios])
    assert sampler.num_batches == sum(sizes) // 12  # the epoch's length is the one thing the sizes set


def test_a_mixed_task_stream_is_a_fresh_permutation_each_pass():
    """Task t's chunks, pass by pass, are disjoint and cover `per_pass * share` distinct examples of its own range."""
    sizes, offsets = [40, 30], [0, 40]
    sampler = MixSampler(sizes, offsets, "mixed", [3, 1], 8, seed=1, epoch=0)
    for t, share in enumerate(sampler.shares):
        per_pass = sizes[t] // share
        for p in range(3):
            seen = [i for g in range(p * per_pass, (p + 1) * per_pass)
                    for i in sampler.batch(g) if _task_of(offsets)(i) == t]
            assert len(seen) == len(set(seen)) == per_pass * share
            assert all(offsets[t] <= i < offsets[t] + sizes[t] for i in seen)


# ---- the alternating and sequential schedules ---------------------------------------------------------------------
@pytest.mark.parametrize("ratios,period", [([2, 1], [0, 1, 0]), ([3, 1], [0, 0, 1, 0]), ([1, 1, 1], [0, 1, 2]),
                                           ([1, 2], [1, 0, 1])])
def test_alternating_tasks_follow_a_hand_computed_schedule(ratios, period):
    """Slot by slot over two epochs (30 micro-batches an epoch: the second starts at slot 30 of the 60), the task of
    each alternating batch is the hand-computed period repeated, and the cycle is an independent SWRR's."""
    cycle = alternating_cycle(ratios)
    assert cycle == period * (CYCLE // len(period))
    counts = [CYCLE * r // sum(ratios) for r in ratios]
    assert cycle == _swrr(counts, CYCLE)
    sizes = [60] * len(ratios)
    offsets = [60 * t for t in range(len(ratios))]
    task = _task_of(offsets)
    full = sum(sizes) // 2
    seen = []
    for epoch in (0, 1):
        for b in MixSampler(sizes, offsets, "alternating", ratios, 2, seed=4, epoch=epoch):
            assert len({task(i) for i in b}) == 1
            seen.append(task(b[0]))
    assert seen == (cycle * 4)[: 2 * full]


@pytest.mark.parametrize("ratios", [[1.0, 0.3, 0.7], [5.0, 1.0], [1.0, 1.0, 1.0, 2.0]])
def test_alternating_cycle_matches_an_independent_swrr_and_the_ratios(ratios):
    exact = [CYCLE * r / sum(ratios) for r in ratios]
    cycle = alternating_cycle(ratios)
    counts = [cycle.count(t) for t in range(len(ratios))]
    assert sum(counts) == CYCLE and all(abs(c - x) < 1 for c, x in zip(counts, exact))
    assert cycle == _swrr(counts, CYCLE)


def test_sequential_stages_follow_the_hand_computed_schedule():
    sizes, offsets = [20, 12, 16], [0, 20, 32]
    sampler = MixSampler(sizes, offsets, "sequential", [1.0] * 3, 4, seed=0, epoch=0, stage_batches=[6, 2, 3])
    task = _task_of(offsets)
    batches = list(sampler)
    assert [task(b[0]) for b in batches] == [0] * 6 + [1] * 2 + [2] * 3
    assert all(len({task(i) for i in b}) == 1 for b in batches)
    first = [i for b in batches[:5] for i in b]  # task 0: 5 chunks of 4 are one pass over its 20 examples
    assert sorted(first) == list(range(20))


# ---- resume mid-epoch -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["mixed", "alternating", "sequential"])
def test_a_sampler_resumed_mid_epoch_gives_the_same_remaining_batches(mode):
    """A fresh sampler started at micro-batch s (its own empty permutation cache) yields exactly the rest of the
    epoch, in every mode, in epoch 0 and (mixed, alternating) epoch 1, with and without a limit."""
    sizes, offsets = [30, 18, 24], [0, 30, 48]
    ratios = [1.0] * 3 if mode == "sequential" else [2.0, 1.0, 1.0]
    kw = dict(stage_batches=[4, 3, 5]) if mode == "sequential" else {}
    epochs = (0,) if mode == "sequential" else (0, 1)
    for epoch in epochs:
        for limit in (None, 8):
            whole = list(MixSampler(sizes, offsets, mode, ratios, 4, seed=9, epoch=epoch, limit=limit, **kw))
            for start in range(len(whole)):
                rest = MixSampler(sizes, offsets, mode, ratios, 4, seed=9, epoch=epoch, start=start, limit=limit, **kw)
                assert len(rest) == len(whole) - start
                assert list(rest) == whole[start:]
            # past the last micro-batch there is nothing to resume (the trainer starts the next epoch at 0 instead):
            # refused since 6739bd8, where an empty sampler kept the trainer looping
            with pytest.raises(ValueError, match="to start from is not one of the epoch's"):
                MixSampler(sizes, offsets, mode, ratios, 4, seed=9, epoch=epoch, start=len(whole), limit=limit, **kw)


# ---- inputs once accepted silently ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["mixed", "alternating"])
def test_fewer_ratios_than_tasks_is_refused(mode):
    """Three tasks with two ratios: task 2 was in no batch at all, while its 20 examples still counted in the
    epoch's length (15 micro-batches of tasks 0 and 1 alone)."""
    with pytest.raises(ValueError, match=r"3 size\(s\), 3 offset\(s\) and 2 ratio\(s\)"):
        MixSampler([20, 20, 20], [0, 20, 40], mode, [1.0, 1.0], 4, seed=0, epoch=0)
    with pytest.raises(ValueError, match=r"2 size\(s\), 1 offset\(s\) and 2 ratio\(s\)"):
        MixSampler([20, 20], [0], mode, [1.0, 1.0], 4, seed=0, epoch=0)  # was an IndexError at the first batch


def test_a_sequential_batch_past_the_run_is_named():
    """Sequential's micro-batch g past its stages was a bare StopIteration, and its epoch 1 a RuntimeError
    'generator raised StopIteration'."""
    sampler = MixSampler([20, 20], [0, 20], "sequential", [1.0, 1.0], 4, seed=0, epoch=1, stage_batches=[2, 3])
    with pytest.raises(ValueError, match=r"micro-batch 5 is outside the run's 5"):
        list(sampler)
    with pytest.raises(ValueError, match=r"micro-batch -1 is outside"):
        sampler.batch(-1)
    assert sampler.batch(4) == MixSampler([20, 20], [0, 20], "sequential", [1.0, 1.0], 4, seed=0, epoch=0,
                                          stage_batches=[2, 3]).batch(4)


# ---- the teacher's files -------------------------------------------------------------------------------------------
def _write_teacher(path, vectors, sentences=None):
    path.mkdir(parents=True, exist_ok=True)
    ids = [f"p{i}" for i in range(len(vectors))]
    np.save(path / VECTORS, np.asarray(vectors, dtype=np.float32))
    (path / IDS).write_text(json.dumps(ids))
    (path / META).write_text(json.dumps({"teacher": "tiny"}))
    if sentences is not None:
        np.save(path / SENTENCES, np.asarray(sentences, dtype=np.float32))
        (path / SENTENCE_TEXTS).write_text(json.dumps([[0, "a sentence."]] * len(ids)))


def _unit(n, d, seed=0):
    v = np.random.default_rng(seed).normal(size=(n, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("row,said", [([np.nan, 0, 0, 0], r"row 1 \(paper 'p1'\): length nan"),
                                      ([2.0, 0, 0, 0], r"row 1 \(paper 'p1'\): length 2,"),
                                      ([0, 0, 0, 0], r"row 1 \(paper 'p1'\): length 0,"),
                                      ([np.inf, 0, 0, 0], r"row 1 \(paper 'p1'\): length inf")])
def test_a_teacher_row_that_is_not_a_finite_unit_vector_is_refused(tmp_path, row, said):
    """The distill task reads a row's dot products as the teacher's cosines, and NaN as "no teacher vector here":
    a NaN row silently dropped that paper's soft targets, a row of length 2 doubled them."""
    vectors = _unit(3, 4)
    vectors[1] = row
    _write_teacher(tmp_path / "w", vectors)
    with pytest.raises(ValueError, match=rf"vectors.npy, {said}"):
        load_teacher(tmp_path / "w")
    sentences = _unit(3, 4, seed=1)
    sentences[1] = row
    _write_teacher(tmp_path / "s", _unit(3, 4), sentences)
    with pytest.raises(ValueError, match=rf"sentences.npy, {said}"):
        load_teacher(tmp_path / "s")
    _write_teacher(tmp_path / "ok", _unit(3, 4), _unit(3, 4, seed=1))
    assert load_teacher(tmp_path / "ok").vectors.shape == (3, 4)


# ---- pseudo labels -------------------------------------------------------------------------------------------------
def test_pseudo_labels_are_the_brute_force_top_k_and_a_seeded_band_sample():
    """Per query of random rankings: positives are the k best by score (sorted by hand), negatives `negatives`
    distinct documents of ranks lo..hi (1-based), drawn in query order from random.Random(seed)."""
    rng = np.random.default_rng(0)
    scores = {f"q{q}": {f"d{j}": float(s) for j, s in enumerate(rng.normal(size=int(rng.integers(3, 25))))}
              for q in range(30)}
    ranked = {q: sorted(s, key=lambda d: -s[d]) for q, s in scores.items()}
    k, lo, hi, n = 3, 6, 20, 4
    pos, neg = pseudo_labels(ranked, k, (lo, hi), n, seed=5)
    draw = random.Random(5)
    for q, s in scores.items():
        by_score = sorted(s.items(), key=lambda kv: -kv[1])
        assert pos[q] == [d for d, _ in by_score[:k]]
        band = [d for rank, (d, _) in enumerate(by_score, start=1) if lo <= rank <= hi]
        assert set(neg[q]) <= set(band) and len(neg[q]) == len(set(neg[q])) == min(n, len(band))
        assert neg[q] == draw.sample(band, min(n, len(band)))
        assert not set(neg[q]) & set(pos[q])
    _, whole = pseudo_labels(ranked, k, (lo, hi), 0, seed=5)
    assert all(whole[q] == ranked[q][lo - 1:hi] for q in ranked)


def test_self_training_refuses_more_negatives_than_its_band_holds():
    """negatives=20 from the band 6..20 (15 documents) gave every query 15, said nowhere."""
    with pytest.raises(ConfigError, match=r"negatives=20 per query, but the band 6..20 holds 15 documents"):
        load_config(SelfTrainingConfig, None, ["negatives=20"]).check()
    assert load_config(SelfTrainingConfig, None, ["negatives=15"]).check().negatives == 15
    assert load_config(SelfTrainingConfig, None, ["negatives=0"]).check().negatives == 0


def test_self_training_rounds_label_with_the_brute_force_top_k(tmp_path, self_training, monkeypatch):  # noqa: F811
    """Round 1 labels by the first stage alone: its positives are the top 2 of the fused first-stage scores of the
    round's queries, recomputed here; round 2 labels by round 1's saved model at weight 1: its positives are the top 2
    of that model's own logits over the shortlist, scored here pair by pair, its negatives from ranks 4..6 of them."""
    from sentence_transformers.cross_encoder import CrossEncoder

    from aspire.benchmarks.context2doc import load_context2doc
    from aspire.evaluate.context2doc_rerank import first_stage_scores
    from aspire.evaluate.context2doc_run import candidate_texts
    from aspire.train import self_training as st

    captured, real = [], st.labelled_pairs
    monkeypatch.setattr(st, "labelled_pairs", lambda q, pos, neg, texts: (captured.append((pos, neg)),
                                                                          real(q, pos, neg, texts))[1])
    self_training("rounds=2", "seed=3", "train.max_steps=2", "train.dev_top_n=0", "rerank_weight=1.0")
    assert len(captured) == 2

    bench = load_context2doc(tmp_path / "cc", "train", tmp_path / "split.json")
    keep = sorted(random.Random(3).sample(sorted(bench.queries), min(8, len(bench.queries))))
    bench.queries = {q: bench.queries[q] for q in keep}
    ids = [p.paper_id for p in bench.candidates]
    cfg = yaml_config(tmp_path)  # the config the run saved: its first stage's model and alpha
    first = first_stage_scores(bench, cfg["train"]["alpha"], cfg["train"]["first_stage_model"])
    shortlist = {}
    for qi, q in enumerate(keep):
        order = sorted(range(len(ids)), key=lambda j: (-first[qi, j], j))[:6]  # stable ties: candidate order
        shortlist[q] = [ids[j] for j in order]
    pos1, neg1 = captured[0]
    assert pos1 == {q: shortlist[q][:2] for q in keep}
    assert all(set(neg1[q]) <= set(shortlist[q][3:6]) and len(neg1[q]) == 2 for q in keep)

    model = CrossEncoder(str(tmp_path / "st" / "round-1" / "model"), max_length=32, device="cpu")
    texts = candidate_texts(bench)
    pos2, neg2 = captured[1]
    for q in keep:
        logits = model.predict([(bench.queries[q], texts[d]) for d in shortlist[q]], convert_to_numpy=True,
                               activation_fn=torch.nn.Identity(), show_progress_bar=False)
        by_logit = [shortlist[q][j] for j in np.argsort(-np.asarray(logits), kind="stable")]
        assert pos2[q] == by_logit[:2], q
        assert set(neg2[q]) <= set(by_logit[3:6]) and len(neg2[q]) == 2


def yaml_config(tmp_path) -> dict:
    import yaml

    return yaml.safe_load((tmp_path / "st" / "self_training.yaml").read_text())
