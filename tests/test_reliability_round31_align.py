"""Round 31: sentence alignment, facet masks and ensembles checked against brute force (numpy, a hand fusion)."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.align import TIE_TOLERANCE, AlignConfig, abs_align, align_examples, cc_align
from aspire.data.papers import Paper
from aspire.evaluate import ensemble as ens
from aspire.evaluate.facets import facet_candidates, facet_queries
from aspire.evaluate.fuse import fuse_runs
from aspire.io import DataError, iter_jsonl
from tests.test_align import _HashTeacher


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _first(values: np.ndarray) -> int:
    """The first (row-major) index within TIE_TOLERANCE of the best: the documented tie rule."""
    return int(np.flatnonzero(values.ravel() >= values.max() - TIE_TOLERANCE)[0])


def test_alignments_equal_a_numpy_argmax_with_ties_one_sentence_papers_and_several_contexts():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(5, 4)).astype(np.float32)  # few distinct directions: exact ties are common
    for _ in range(40):
        n = int(rng.integers(1, 5))
        sents = [base[rng.integers(0, 5, size=int(rng.integers(1, 5)))] * float(rng.uniform(0.5, 3)) for _ in range(n)]
        sents[0] = sents[0][:1]  # a one-sentence abstract in every batch
        others = [base[rng.integers(0, 5, size=int(rng.integers(1, 5)))] for _ in range(n)]
        ctxs = [base[rng.integers(0, 5, size=int(rng.integers(1, 4)))] for _ in range(n)]
        index, sim = cc_align(DocBatch.from_list([torch.from_numpy(s) for s in sents]),
                              DocBatch.from_list([torch.from_numpy(c) for c in ctxs]))
        pair, pair_sim = abs_align(DocBatch.from_list([torch.from_numpy(s) for s in sents]),
                                   DocBatch.from_list([torch.from_numpy(o) for o in others]))
        for b in range(n):
            s, c, o = (_unit(x.astype(np.float64)) for x in (sents[b], ctxs[b], others[b]))
            per_sentence = (s @ c.T).max(axis=1)
            assert index[b].item() == _first(per_sentence)
            assert sim[b].item() == pytest.approx(per_sentence.max(), abs=1e-5)
            direct = s @ o.T
            flat = _first(direct)
            assert pair[b].tolist() == [flat // direct.shape[1], flat % direct.shape[1]]
            assert pair_sim[b].item() == pytest.approx(direct.max(), abs=1e-5)
    assert cc_align(DocBatch.from_list([torch.ones(1, 3)]), DocBatch.from_list([-torch.ones(2, 3)]))[0].tolist() == [0]


def _examples(tmp_path, papers: dict, examples: dict) -> object:
    d = tmp_path / "ex"
    d.mkdir()
    (d / "abstracts.jsonl").write_text("".join(json.dumps({"paper_id": k, "title": "T " + k, "abstract": v}) + "\n"
                                               for k, v in papers.items()))
    for split in ("train", "dev"):
        (d / f"examples.{split}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in examples[split]))
    return d


def test_align_examples_equal_numpy_over_chunks_shared_contexts_and_repeated_sentences(tmp_path):
    rng = np.random.default_rng(1)
    vocab = [f"s{k}" for k in range(6)]  # sentences repeat within and across abstracts: ties go to the earliest
    papers = {f"P{k}": [str(x) for x in rng.choice(vocab, size=int(rng.integers(1, 5)))] for k in range(6)}
    examples = {split: [{"example_id": f"{split}{n}", "query_id": q, "positive_id": p,
                         "contexts_clean": [str(x) for x in rng.choice(vocab, size=int(rng.integers(1, 4)))]}
                        for n, (q, p) in enumerate(rng.choice(sorted(papers), size=2, replace=False).tolist()
                                                   for _ in range(7))] for split in ("train", "dev")}
    teacher = _HashTeacher()
    report = align_examples(_examples(tmp_path, papers, examples), teacher, tmp_path / "out", AlignConfig(chunk=3))

    def vecs(texts):
        return _unit(torch.stack([teacher.cache[t] for t in texts]).double().numpy())

    for split in ("train", "dev"):
        rows = [e for _, e in iter_jsonl(tmp_path / "out" / f"examples.{split}.jsonl")]
        assert [e["example_id"] for e in rows] == [e["example_id"] for e in examples[split]]
        cc_equals_abs = 0
        for e in rows:
            q, p, c = vecs(papers[e["query_id"]]), vecs(papers[e["positive_id"]]), vecs(e["contexts_clean"])
            mq, mp, direct = (q @ c.T).max(axis=1), (p @ c.T).max(axis=1), q @ p.T
            flat = _first(direct)
            assert e["cc_align"] == [_first(mq), _first(mp)]
            assert e["abs_align"] == [flat // direct.shape[1], flat % direct.shape[1]]
            assert e["cc_align_sim"] == [pytest.approx(mq.max(), abs=1e-4), pytest.approx(mp.max(), abs=1e-4)]
            assert e["abs_align_sim"] == pytest.approx(direct.max(), abs=1e-4)
            cc_equals_abs += e["cc_align"] == e["abs_align"]
        assert report[split]["examples"] == 7 and report[split]["cc_equals_abs"] == cc_equals_abs


@pytest.mark.parametrize("change, message", [
    ({"query_id": 3}, r"examples.train.jsonl:1: example e0: query_id must be a string"),
    ({"positive_id": "NOPE"}, r"example e0: positive_id 'NOPE' has no abstract"),
    ({"positive_id": "A"}, r"example e0 pairs paper 'A' with itself"),
    ({"contexts_clean": "one text"}, r"example e0: contexts_clean must be a list of strings"),
    ({"contexts_clean": ["ok", "  "]}, r"example e0: contexts_clean\[1\] is blank"),
    ({"example_id": ""}, r"example_id must be a non-empty string"),
])
def test_malformed_examples_are_refused_by_id(tmp_path, change, message):
    good = {"example_id": "e0", "query_id": "A", "positive_id": "B", "contexts_clean": ["ok"]}
    d = _examples(tmp_path, {"A": ["a."], "B": ["b."]}, {"train": [good | change], "dev": [good]})
    with pytest.raises(DataError, match=message):
        align_examples(d, _HashTeacher(), tmp_path / "out")
    assert not (tmp_path / "out" / "examples.train.jsonl").exists()


def test_a_repeated_example_id_in_a_split_is_refused(tmp_path):
    good = {"example_id": "e0", "query_id": "A", "positive_id": "B", "contexts_clean": ["ok"]}
    d = _examples(tmp_path, {"A": ["a."], "B": ["b."]}, {"train": [good, good], "dev": [good]})
    with pytest.raises(DataError, match=r"examples.train.jsonl:2: example_id 'e0' repeats the one of .*:1"):
        align_examples(d, _HashTeacher(), tmp_path / "out")


def test_facet_masks_equal_a_loop_over_labels_with_and_without_a_title_row():
    papers = {"a": Paper("a", "T", ["s0", "s1", "s2"], ["background", "method", "method"]),
              "b": Paper("b", "T", ["s0", "s1"], ["result", "result"]),
              "c": Paper("c", "T", ["s0"], ["objective"])}
    to_facet = {"background": "background", "objective": "background", "method": "method", "result": "result"}
    rows = {"a": ["T", "s0", "s1", "s2"], "b": ["s0", "s1"], "c": ["T", "s0"]}  # a and c encoded with their titles
    batch = DocBatch.from_list([torch.randn(len(r), 3) for r in rows.values()], paper_ids=list(rows),
                               sentences=list(rows.values()))
    for facet in ("background", "method", "result"):
        want = torch.zeros_like(batch.mask)
        for i, (pid, row) in enumerate(rows.items()):
            offset = len(row) - len(papers[pid].sentences)
            for j, lab in enumerate(papers[pid].labels):
                want[i, j + offset] = to_facet[lab] == facet
        narrowed, whole = facet_candidates(batch, papers, facet, to_facet)
        empty = [pid for i, pid in enumerate(rows) if not want[i].any()]
        assert whole == empty
        for i, pid in enumerate(rows):
            assert narrowed.mask[i].tolist() == (batch.mask[i] if pid in empty else want[i]).tolist()
        if empty:
            with pytest.raises(ValueError, match=re.escape(f"no encoded sentence of facet {facet!r} in queries {empty}")):
                facet_queries(batch, papers, facet, to_facet)
        else:
            assert facet_queries(batch, papers, facet, to_facet).mask.tolist() == want.tolist()


def test_ensemble_fusion_equals_a_hand_z_fusion_of_the_members_scores():
    runs = [{"q": [("d1", 3.0), ("d2", 1.0), ("d3", 0.5)]}, {"q": [("d2", 0.9), ("d3", 0.2), ("d1", 0.1)]}]
    weights = [0.8, 0.2]

    def z(run):
        v = np.array([s for _, s in run["q"]])
        return {d: (s - v.mean()) / v.std() for d, s in run["q"]}

    hand = {d: sum(w * z(r)[d] for w, r in zip(weights, runs)) for d in ("d1", "d2", "d3")}
    fused = fuse_runs(runs, weights, "z")["q"]
    assert [d for d, _ in fused] == sorted(hand, key=lambda d: -hand[d])
    for d, s in fused:
        assert s == pytest.approx(hand[d], abs=1e-9)
    rrf = dict(fuse_runs(runs, [1.0, 2.0], "rrf", rrf_k=10.0)["q"])
    assert rrf["d3"] == pytest.approx(1 / 13 + 2 / 12) and rrf["d1"] == pytest.approx(1 / 11 + 2 / 13)


@pytest.mark.parametrize("text, message", [
    ("members: [{name: a, model: m, scorer: abstract, weight: .nan}, {name: b, model: m, scorer: ot}]",
     r"members\[0\] \(a\): weight must be >= 0 and finite, got nan"),
    ("members: [{name: a, model: m, scorer: abstract, weight: .inf}, {name: b, model: m, scorer: ot}]",
     r"members\[0\] \(a\): weight must be >= 0 and finite"),
    ("members: [{name: a, model: m, scorer: abstract, weight: 0}, {name: b, model: m, scorer: ot, weight: 0}]",
     "weights sum to 0"),
    ("members: [{name: a, model: m, scorer: nope}, {name: b, model: m, scorer: ot}]",
     r"unknown scorer 'nope'; valid: .*minl2"),
    ("members: [{name: a, model: m, scorer: ot}, {name: a, model: m, scorer: minl2}]", "distinct name"),
    ("rrf_k: .inf\nmembers: [{name: a, model: m, scorer: ot}, {name: b, model: m, scorer: minl2}]",
     "rrf_k must be > 0 and finite"),
])
def test_ensemble_members_are_validated_by_name(tmp_path, text, message):
    path = tmp_path / "ens.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        ens.load_ensemble(path)


def test_an_ensemble_suite_checks_every_benchmarks_weights_before_any_member_runs(tmp_path, monkeypatch):
    """bm25 weighted, both model members at 0: context2doc (bm25 + models) can fuse, venue (models only) cannot. Its
    refusal came only once context2doc's members had all been run."""
    ran = []
    fake = {name: dataclasses.replace(r, ensemble=lambda bench, data, members, out, settings, fuse, name=name:
                                      ran.append(name) or [])
            for name, r in ens.RUNNERS.items()}
    monkeypatch.setattr(ens, "RUNNERS", fake)
    path = tmp_path / "ens.yaml"
    path.write_text("members: [{name: lex, model: bm25, weight: 1}, {name: a, model: m, scorer: ot, weight: 0},"
                    " {name: b, model: m, scorer: minl2, weight: 0}]")
    with pytest.raises(ValueError, match=r"venue: the weights of the members that apply there \(a, b\) sum to 0"):
        ens.run_ensemble_suite(path, tmp_path / "out", tmp_path / "data", benchmarks=["context2doc", "venue"])
    assert ran == []
    assert ens.run_ensemble_suite(path, tmp_path / "out", tmp_path / "data", benchmarks=["context2doc"])["rows"] == []
    assert ran == ["context2doc"]
    assert math.isfinite(sum(m.weight for m in ens.load_ensemble(path).members))
