"""cc_align / abs_align pick the right sentences: on constructed vectors and end to end with a teacher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.align import AlignConfig, abs_align, align_examples, cc_align
from aspire.data.cocite import iter_jsonl


def _basis(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def test_cc_align_picks_the_sentence_closest_to_any_context():
    # paper 0: sentence 2 points along the second context; paper 1: sentence 0 along the first
    sents = DocBatch.from_list([
        _basis([1, 0, 0], [0.6, 0.8, 0], [0, 0.1, 1.0]),
        _basis([0, 1, 0], [1, 1, 1]),
    ])
    contexts = DocBatch.from_list([_basis([0, 0, 1], [0, 1, 1e-3]), _basis([0, 2, 0])])
    index, sim = cc_align(sents, contexts)
    assert index.tolist() == [2, 0]
    assert sim[1].item() == pytest.approx(1.0)
    # the padded context row of paper 1 (zeros) and padded sentence rows are never chosen
    assert sim[0].item() == pytest.approx(1 / (1.01 ** 0.5), rel=1e-4)


def test_cc_align_ignores_padding_even_when_it_would_win():
    sents = DocBatch(emb=_basis([1, 0], [-1, 0], [5, 0])[None], mask=torch.tensor([[True, True, False]]))
    contexts = DocBatch(emb=_basis([-1, 0], [1, 0])[None], mask=torch.tensor([[True, False]]))
    index, _ = cc_align(sents, contexts)
    assert index.tolist() == [1]  # the masked context [1, 0] would pick sentence 0 or the padded 2


def test_abs_align_picks_the_best_pair_and_respects_masks():
    a = DocBatch(emb=_basis([1, 0, 0], [0, 1, 0], [0, 0, 1])[None], mask=torch.tensor([[True, True, False]]))
    b = DocBatch.from_list([_basis([0, 0, 1], [1, 1, 0], [0, 1, 0.2])])
    index, sim = abs_align(a, b)
    assert index.tolist() == [[1, 2]]  # (a2, b0) would be exact but a2 is padding
    assert sim.item() == pytest.approx(1 / (1.04 ** 0.5), rel=1e-4)


def test_alignment_is_batched_consistently():
    torch.manual_seed(0)
    a = [torch.randn(n, 8) for n in (3, 5, 4)]
    b = [torch.randn(n, 8) for n in (6, 2, 3)]
    batch_index, _ = abs_align(DocBatch.from_list(a), DocBatch.from_list(b))
    for k in range(3):
        one, _ = abs_align(DocBatch.from_list([a[k]]), DocBatch.from_list([b[k]]))
        sim = torch.nn.functional.normalize(a[k], dim=-1) @ torch.nn.functional.normalize(b[k], dim=-1).T
        flat = int(sim.argmax())
        assert batch_index[k].tolist() == one[0].tolist() == [flat // sim.shape[1], flat % sim.shape[1]]


class _HashTeacher:
    """A stand-in teacher: one fixed random vector per distinct text (identical texts -> cosine 1)."""

    max_seq_length = 128

    def __init__(self):
        self.cache: dict[str, torch.Tensor] = {}
        self.gen = torch.Generator().manual_seed(0)

    def encode(self, texts, batch_size=32, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False):
        for t in texts:
            if t not in self.cache:
                self.cache[t] = torch.randn(64, generator=self.gen)
        emb = torch.stack([self.cache[t] for t in texts])
        return torch.nn.functional.normalize(emb, dim=-1) if normalize_embeddings else emb


def _examples_dir(tmp_path: Path) -> Path:
    papers = {
        "P": ["P zero.", "P one shared.", "P two cited.", "P three."],
        "Q": ["Q zero cited.", "Q one.", "Q two.", "Q three shared."],
        "N": ["N zero.", "N one.", "N two."],
    }
    papers["Q"][3] = papers["P"][1]  # the direct best pair: P1 ~ Q3
    example = {"example_id": "P|Q", "split": "train", "query_id": "P", "positive_id": "Q", "negative_ids": ["N"],
               "set_ids": ["P|Q"], "context_ids": ["c1", "c2"], "contexts": ["raw 1", "raw 2"],
               "contexts_clean": [papers["P"][2], papers["Q"][0]]}  # the contexts say what P2 and Q0 say
    d = tmp_path / "examples"
    d.mkdir()
    (d / "abstracts.jsonl").write_text("".join(
        json.dumps({"paper_id": k, "title": k, "abstract": v}) + "\n" for k, v in papers.items()))
    (d / "examples.train.jsonl").write_text(json.dumps(example) + "\n")
    (d / "examples.dev.jsonl").write_text(json.dumps(example | {"split": "dev"}) + "\n")
    return d


def test_align_examples_end_to_end(tmp_path):
    d = _examples_dir(tmp_path)
    report = align_examples(d, _HashTeacher(), tmp_path / "out", AlignConfig(chunk=1))
    (out,) = [obj for _, obj in iter_jsonl(tmp_path / "out" / "examples.train.jsonl")]
    assert out["cc_align"] == [2, 0] and out["abs_align"] == [1, 3]
    assert out["cc_align_sim"] == [pytest.approx(1.0), pytest.approx(1.0)] and out["abs_align_sim"] == pytest.approx(1.0)
    assert out["negative_ids"] == ["N"] and out["contexts"] == ["raw 1", "raw 2"]  # everything else kept
    assert report["train"] == {"examples": 1, "cc_equals_abs": 0, "cc_on_first_sentences": 0}
    assert (tmp_path / "out" / "abstracts.jsonl").read_text() == (d / "abstracts.jsonl").read_text()


def test_align_with_a_tiny_sentence_transformer(tmp_path, tiny_model_dir):
    from aspire.encoders.cosentbert import load_sentence_model

    d = _examples_dir(tmp_path)
    report = align_examples(d, load_sentence_model(tiny_model_dir), tmp_path / "out", AlignConfig(max_seq_length=32))
    (out,) = [obj for _, obj in iter_jsonl(tmp_path / "out" / "examples.dev.jsonl")]
    # identical texts embed identically, so the exact matches win even with random weights
    assert out["cc_align"] == [2, 0] and out["abs_align"] == [1, 3]
    assert report["dev"]["examples"] == 1


def test_align_refuses_an_example_without_contexts(tmp_path):
    d = _examples_dir(tmp_path)
    line = json.loads((d / "examples.train.jsonl").read_text())
    (d / "examples.train.jsonl").write_text(json.dumps(line | {"contexts_clean": []}) + "\n")
    with pytest.raises(ValueError, match="P\\|Q has no contexts"):
        align_examples(d, _HashTeacher(), tmp_path / "out")
