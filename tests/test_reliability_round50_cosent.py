"""Round 50 checks of aspire.encoders.cosentbert against independent references: training pairs against a
brute-force construction, the loss against a hand computation, the saved model against sentence-transformers,
and bad settings refused before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from aspire.encoders import cosentbert
from aspire.encoders.cosentbert import CoSentBertConfig, context_pairs, load_sentence_model, ranking_loss


def _write(path: Path, groups: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(g) + "\n" for g in groups))
    return path


def test_context_pairs_equal_a_brute_force_construction(tmp_path):
    groups = [{"set_id": "A|B", "contexts_clean": ["x", "y", "x", "z"]},
              {"set_id": "C|D", "contexts_clean": ["w"]},
              {"set_id": "E|F", "contexts_clean": ["u", "u"]},
              {"set_id": "G|H", "contexts_clean": ["p", "q"]}]
    path = _write(tmp_path / "groups.train.jsonl", groups)
    expected = []
    for g in groups:
        distinct = []
        for t in g["contexts_clean"]:
            if t not in distinct:
                distinct.append(t)
        for i in range(len(distinct)):
            for j in range(i + 1, len(distinct)):
                expected.append((distinct[i], distinct[j], g["set_id"]))
    got = context_pairs(path, "contexts_clean", max_pairs_per_set=100, seed=0)
    assert got == expected
    assert all(a != b for a, b, _ in got)
    capped = context_pairs(path, "contexts_clean", max_pairs_per_set=2, seed=0)
    assert [s for *_, s in capped] == ["A|B", "A|B", "G|H"]
    assert set(capped[:2]) <= set(expected[:3])


def test_symmetric_loss_equals_a_hand_computation(tiny_model_dir):
    model = load_sentence_model(tiny_model_dir, 16)
    anchors, positives = ["the model", "a paper", "neural text"], ["the method", "a document", "language data"]
    for symmetric in (True, False):
        cfg = CoSentBertConfig(scale=7.0, symmetric=symmetric)
        loss = ranking_loss(model, cfg)
        feats = [model.tokenize(anchors), model.tokenize(positives)]
        model.eval()
        with torch.no_grad():
            got = float(loss(feats, None))
            a = model.encode(anchors, convert_to_tensor=True)
            p = model.encode(positives, convert_to_tensor=True)
        sim = 7.0 * torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(p, dim=-1).T
        fwd = -sum(float(torch.log_softmax(sim[i], 0)[i]) for i in range(3)) / 3
        bwd = -sum(float(torch.log_softmax(sim[:, i], 0)[i]) for i in range(3)) / 3
        want = (fwd + bwd) / 2 if symmetric else fwd
        assert got == pytest.approx(want, rel=1e-4, abs=1e-5)


def test_saved_model_loads_in_sentence_transformers_with_the_same_vectors(tmp_path, tiny_model_dir):
    from sentence_transformers import SentenceTransformer

    groups = [{"set_id": f"S{i}|T{i}", "contexts_clean": [f"the model {i} {j} text" for j in range(3)]}
              for i in range(4)]
    d = tmp_path / "ex"
    _write(d / "groups.train.jsonl", groups)
    _write(d / "groups.dev.jsonl", groups[:2])
    cfg = CoSentBertConfig(base_model=str(tiny_model_dir), epochs=1, batch_size=2, max_seq_length=12,
                           learning_rate=1e-3)
    cosentbert.train_cosentbert(d, tmp_path / "out", cfg)
    plain = SentenceTransformer(str(tmp_path / "out" / "model"), device="cpu")
    ours = load_sentence_model(tmp_path / "out" / "model", device="cpu")
    assert plain.max_seq_length == 12
    texts = ["the model 1 0 text", "a paper about neural networks"]
    assert torch.allclose(plain.encode(texts, convert_to_tensor=True), ours.encode(texts, convert_to_tensor=True),
                          atol=1e-6)


@pytest.mark.parametrize("field, value, match", [
    ("batch_size", 1, "batch_size"), ("epochs", 0, "epochs"), ("max_pairs_per_set", 0, "max_pairs_per_set"),
    ("warmup", 1.5, "warmup"), ("scale", 0.0, "scale"), ("text_field", "paper_ids", "text_field"),
    ("symmetric", "no", "symmetric"),
])
def test_bad_settings_are_refused_naming_the_key_before_the_model_loads(tmp_path, monkeypatch, field, value, match):
    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(cosentbert, "load_sentence_model", no_load)
    cfg = CoSentBertConfig(base_model=str(tmp_path / "nowhere"), **{field: value})
    with pytest.raises(Exception, match=match) as info:
        cosentbert.train_cosentbert(tmp_path, tmp_path / "out", cfg)
    assert not isinstance(info.value, AssertionError)
