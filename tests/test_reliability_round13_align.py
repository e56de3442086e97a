"""Sentence alignment (`aspire.data.align`) against brute force: ties, padding, chunking, order, the real data."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.align import AlignConfig, abs_align, align_examples, cc_align
from aspire.io import iter_jsonl


class _HashTeacher:
    """A deterministic stand-in teacher: each text's vector is seeded by the text's hash (identical texts, identical
    vectors), whatever the batch or the order."""

    max_seq_length = 128

    def encode(self, texts, batch_size=32, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False):
        rows = [torch.randn(24, generator=torch.Generator().manual_seed(int(hashlib.sha1(t.encode()).hexdigest()[:12], 16)))
                for t in texts]
        emb = torch.stack(rows)
        return torch.nn.functional.normalize(emb, dim=-1) if normalize_embeddings else emb


def _brute(teacher, sentences_q: list[str], sentences_p: list[str], contexts: list[str]) -> tuple[list[int], list[int]]:
    """cc_align and abs_align by Python loops in float64, a tie going to the first."""
    def vec(texts):
        return teacher.encode(texts).double()

    q, p, c = vec(sentences_q), vec(sentences_p), vec(contexts)

    def best(rows):
        scores = [max(float(r @ x) for x in c) for r in rows]
        return next(i for i, s in enumerate(scores) if s >= max(scores) - 1e-9)

    pairs = [(float(q[i] @ p[j]), i, j) for i in range(len(q)) for j in range(len(p))]
    top = max(s for s, _, _ in pairs)
    return [best(q), best(p)], next([i, j] for s, i, j in pairs if s >= top - 1e-9)


def test_ties_go_to_the_earliest_sentence_whatever_the_padding():
    # a sentence repeated in an abstract has one cosine to the contexts; the batched matmul made the two copies'
    # cosines a rounding apart (by their row and the batch's padding), so the later copy won about one time in ten
    gen = torch.Generator().manual_seed(0)
    wrong_cc, wrong_abs = [], []
    for trial in range(200):
        D = int(torch.randint(8, 800, (), generator=gen))
        S = int(torch.randint(2, 40, (), generator=gen))
        C = int(torch.randint(1, 20, (), generator=gen))
        s, c = torch.randn(S, D, generator=gen), torch.randn(C, D, generator=gen)
        j = int(torch.randint(1, S, (), generator=gen))
        i = int(torch.randint(0, j, (), generator=gen))
        s[i] = s[j] = 3 * c[0]  # two identical sentences, both the best
        others = [torch.randn(int(torch.randint(1, 50, (), generator=gen)), D, generator=gen)
                  for _ in range(int(torch.randint(1, 5, (), generator=gen)))]
        index, sim = cc_align(DocBatch.from_list([*others, s]),
                              DocBatch.from_list([torch.randn(3, D, generator=gen) for _ in others] + [c]))
        if int(index[-1]) != i:
            wrong_cc.append((trial, i, j, int(index[-1])))
        assert float(sim[-1]) == pytest.approx(1.0, abs=1e-5)
        p = torch.randn(int(torch.randint(1, 30, (), generator=gen)), D, generator=gen)
        p[0] = c[0]
        pair, _ = abs_align(DocBatch.from_list([s]), DocBatch.from_list([p]))
        if pair[0].tolist() != [i, 0]:
            wrong_abs.append((trial, i, j, pair[0].tolist()))
    assert not wrong_cc, f"cc_align chose a later copy of a tied sentence: (trial, first, copy, chosen) {wrong_cc[:5]}"
    assert not wrong_abs, f"abs_align chose a later copy of a tied sentence: {wrong_abs[:5]}"


def test_alignment_equals_brute_force_on_ragged_batches():
    gen = torch.Generator().manual_seed(1)
    lengths = [(1, 4, 2), (5, 1, 1), (3, 3, 6), (7, 2, 3), (1, 1, 1)]  # (sentences of q, of p, contexts)
    qs, ps, cs = ([torch.randn(n[k], 16, generator=gen) for n in lengths] for k in range(3))
    qi, qsim = cc_align(DocBatch.from_list(qs), DocBatch.from_list(cs))
    pair, psim = abs_align(DocBatch.from_list(qs), DocBatch.from_list(ps))
    unit = torch.nn.functional.normalize
    for b, (q, p, c) in enumerate(zip(qs, ps, cs)):
        per_sentence = (unit(q.double(), dim=-1) @ unit(c.double(), dim=-1).T).max(dim=1).values
        assert int(qi[b]) == int(per_sentence.argmax()) and float(qsim[b]) == pytest.approx(float(per_sentence.max()), abs=1e-6)
        direct = unit(q.double(), dim=-1) @ unit(p.double(), dim=-1).T
        flat = int(direct.argmax())
        assert pair[b].tolist() == [flat // direct.shape[1], flat % direct.shape[1]]
        assert float(psim[b]) == pytest.approx(float(direct.max()), abs=1e-6)


def _examples(root: Path) -> Path:
    """Papers with a one-sentence abstract, a repeated sentence, a title that matches a context (the title is no
    sentence), and examples in both splits."""
    abstracts = {
        "A": ("Context one", ["Alpha zero.", "Alpha one.", "Context two", "Alpha three."]),
        "B": ("B title", ["Context one"]),  # one sentence
        "C": ("C title", ["Gamma zero.", "Context two", "Gamma two.", "Context two"]),  # a sentence repeated
        "D": ("D title", ["Delta zero.", "Delta one.", "Delta two.", "Delta three.", "Delta four.", "Delta five."]),
    }
    examples = [("A", "B", ["Context one"]), ("A", "C", ["Context two", "Unrelated words"]), ("C", "D", ["Delta four."]),
                ("B", "D", ["Context one", "Delta one."]), ("D", "A", ["Nothing alike"])]
    root.mkdir(parents=True)
    (root / "abstracts.jsonl").write_text("".join(
        json.dumps({"paper_id": k, "title": t, "abstract": a}) + "\n" for k, (t, a) in abstracts.items()))
    for split, rows in (("train", examples[:3]), ("dev", examples[3:])):
        (root / f"examples.{split}.jsonl").write_text("".join(json.dumps(
            {"example_id": f"{q}|{p}", "query_id": q, "positive_id": p, "contexts_clean": c}) + "\n" for q, p, c in rows))
    return root


def _aligned(out: Path) -> dict:
    return {obj["example_id"]: (obj["cc_align"], obj["abs_align"])
            for split in ("train", "dev") for _, obj in iter_jsonl(out / f"examples.{split}.jsonl")}


def test_align_examples_indices_are_the_abstracts_sentences_whatever_the_chunk_and_order(tmp_path):
    d = _examples(tmp_path / "ex")
    teacher = _HashTeacher()
    align_examples(d, teacher, tmp_path / "big", AlignConfig(chunk=256, encode_batch_size=64))
    align_examples(d, teacher, tmp_path / "small", AlignConfig(chunk=1, encode_batch_size=1))
    reversed_dir = tmp_path / "rev"
    reversed_dir.mkdir()
    (reversed_dir / "abstracts.jsonl").write_text("".join(reversed((d / "abstracts.jsonl").read_text().splitlines(True))))
    for split in ("train", "dev"):
        (reversed_dir / f"examples.{split}.jsonl").write_text(
            "".join(reversed((d / f"examples.{split}.jsonl").read_text().splitlines(True))))
    align_examples(reversed_dir, teacher, tmp_path / "rev-out", AlignConfig(chunk=2))
    got = _aligned(tmp_path / "big")
    assert got == _aligned(tmp_path / "small") == _aligned(tmp_path / "rev-out")
    abstracts = {obj["paper_id"]: obj["abstract"] for _, obj in iter_jsonl(tmp_path / "big" / "abstracts.jsonl")}
    for split in ("train", "dev"):
        for _, e in iter_jsonl(d / f"examples.{split}.jsonl"):
            q, p = abstracts[e["query_id"]], abstracts[e["positive_id"]]
            assert list(got[e["example_id"]]) == list(_brute(teacher, q, p, e["contexts_clean"])), e["example_id"]
    # known answers: B has one sentence; the repeated "Context two" of C is its first copy
    assert got["A|B"][0][1] == 0 and got["A|C"][0] == [2, 1] and got["C|D"][0][1] == 4 and got["B|D"][0] == [0, 1]


def test_real_cocitation_examples_align_to_sentences_their_abstracts_have(tmp_path, shared_data):
    run = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "aspire.data", "run-all", "--in",
                    str(shared_data / "cocite-acl" / "cocitations.jsonl"), "--out", str(run)],
                   check=True, capture_output=True, cwd=Path(__file__).resolve().parents[1])
    teacher = _HashTeacher()
    report = align_examples(run / "5_examples", teacher, tmp_path / "aligned", AlignConfig(chunk=64))
    abstracts = {obj["paper_id"]: obj["abstract"] for _, obj in iter_jsonl(tmp_path / "aligned" / "abstracts.jsonl")}
    n = 0
    for split in ("train", "dev"):
        rows = [obj for _, obj in iter_jsonl(tmp_path / "aligned" / f"examples.{split}.jsonl")]
        assert len(rows) == report[split]["examples"] == sum(1 for _ in iter_jsonl(run / "5_examples" / f"examples.{split}.jsonl"))
        for k, e in enumerate(rows):
            q, p = abstracts[e["query_id"]], abstracts[e["positive_id"]]
            for key in ("cc_align", "abs_align"):
                assert 0 <= e[key][0] < len(q) and 0 <= e[key][1] < len(p), (e["example_id"], key, e[key])
            if k % 10 == 0:  # brute force on a tenth of them
                n += 1
                assert [e["cc_align"], e["abs_align"]] == list(_brute(teacher, q, p, e["contexts_clean"])), e["example_id"]
    assert n > 50
