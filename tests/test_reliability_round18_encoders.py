"""Round 18 correctness sweep of the contextual encoder, its fast backends and the export of a trained model: an
adapter export written over the base it names (the base's weights replaced by adapters naming themselves), the
exact weights hashed three times on a fast encoder's first load, and the pooling of long abstracts' windows checked
against a loop over the pieces of every window."""

from __future__ import annotations

import json

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder, backends, load_encoder
from aspire.train.export import export_adapter, export_low_rank
from tests.test_reliability_round14_backends import save_random_lora

PAPERS = [Paper("long", "a neural model of text", ["we propose a new approach for the task.",
                                                   "the results show performance on two data.", "café naïve résumé.",
                                                   "we show it."]),
          Paper("short", "short", ["a b."]), Paper("titled", "title only", [])]


@pytest.fixture()
def saved_base(tiny_model_dir, tmp_path):
    """The tiny BERT saved by the encoder (with its settings file, as a trained model's folder has one)."""
    ContextualSentenceEncoder.from_pretrained(tiny_model_dir).save_pretrained(tmp_path / "base")
    return tmp_path / "base"


def folder_bytes(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_adapter_export_refuses_to_write_over_its_base(saved_base, tmp_path):
    """`--adapter-only BASE --out BASE` replaced the base's weights and tokenizer by the adapters, whose settings
    name that very folder as their base: the export reported success and the base no longer loaded."""
    save_random_lora(saved_base, tmp_path / "trained")
    before = folder_bytes(saved_base)
    with pytest.raises(ValueError, match=r"would replace the model .*base.* it reads"):
        export_adapter(tmp_path / "trained", saved_base, str(saved_base))
    assert folder_bytes(saved_base) == before
    ContextualSentenceEncoder.from_pretrained(saved_base)  # still loads
    out, _ = export_adapter(tmp_path / "trained", tmp_path / "exported", str(saved_base))  # elsewhere: written
    assert json.loads((out / "aspire_encoder.json").read_text())["base"] == str(saved_base)


def test_low_rank_export_refuses_to_write_over_its_base(saved_base, tmp_path):
    """The same through `--rank`: the SVDs ran, then the base was replaced by a rank-2 adapter naming itself."""
    tuned = ContextualSentenceEncoder.from_pretrained(saved_base)
    torch.manual_seed(2)
    with torch.no_grad():
        for p in tuned.model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    tuned.save_pretrained(tmp_path / "tuned")
    before = folder_bytes(saved_base)
    with pytest.raises(ValueError, match=r"would replace the model .*base.* it reads"):
        export_low_rank(tmp_path / "tuned", saved_base, str(saved_base), rank=2)
    assert folder_bytes(saved_base) == before


def test_fast_first_load_hashes_the_weights_twice_with_the_same_fingerprints(tiny_model_dir, cache, monkeypatch):
    """A fast encoder's first load hashed every weight three times (the cached graph's name, its own fingerprints,
    the load record's `exact_fingerprint`); the exact ones are now hashed once for both uses. The fast fingerprint
    hashes the backend tag (the graph's digest, the graph named by the exact fingerprint) before the weights, so it
    is a pass of its own. Every value is as the exact and fast encoders compute it themselves."""
    calls = []
    real = ContextualSentenceEncoder.fingerprints

    def counted(self):
        calls.append(type(self).__name__)
        return real(self)

    monkeypatch.setattr(ContextualSentenceEncoder, "fingerprints", counted)
    fast = load_encoder(tiny_model_dir, backend="onnx", max_length=16)
    assert calls == ["ContextualSentenceEncoder", "InferenceEncoder"]
    monkeypatch.setattr(ContextualSentenceEncoder, "fingerprints", real)
    exact = load_encoder(tiny_model_dir, max_length=16)
    record = json.loads(backends.load_record_path(tiny_model_dir, "onnx", None, {"max_length": 16}).read_text())
    assert record["exact_fingerprint"] == exact.fingerprint()
    assert record["graph"] == backends.onnx_model_path(exact.fingerprint(), None).name
    assert (record["fingerprint"], record["legacy_fingerprint"]) == real(fast)  # hashed anew from its weights
    assert fast.fingerprint() == record["fingerprint"] != exact.fingerprint()
    again = load_encoder(tiny_model_dir, backend="onnx", max_length=16)  # from the record: no weights
    assert again.model.exact is None and again.fingerprints() == fast.fingerprints()
    assert torch.allclose(again.encode(PAPERS).emb, exact.encode(PAPERS).emb, atol=1e-5)


def test_cached_onnx_model_given_the_fingerprint_hashes_nothing(tiny_model_dir, cache, monkeypatch):
    """`cached_onnx_model` with the caller's fingerprint names the same file as without it."""
    exact = load_encoder(tiny_model_dir)
    path = backends.cached_onnx_model(exact, None)
    monkeypatch.setattr(ContextualSentenceEncoder, "fingerprints", lambda self: pytest.fail("weights hashed"))
    assert backends.cached_onnx_model(exact, None, path.name.partition("-opset")[0]) == path


@pytest.mark.parametrize("include_title", [False, True])
def test_window_pooling_matches_a_loop_over_every_window(tiny_model_dir, include_title):
    """Each sentence's vector is the mean of its pieces' hidden states over every window it reaches (the title's,
    as sentence 0, over its copy in every window), and the whole vector the mean over every attended piece: checked
    against a loop over the windows' pieces, the sentence of an abstract piece found from its characters."""
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=16, include_title=include_title)
    inputs = encoder.tokenize(PAPERS)
    assert len(inputs.input_ids) > len(PAPERS)  # the long paper overflows into windows
    with torch.no_grad():
        hidden = encoder.model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                               token_type_ids=inputs.token_type_ids).last_hidden_state.double()
        batch = encoder.encode(PAPERS, batch_size=2)
    tokenizer = encoder.tokenizer
    for b, paper in enumerate(PAPERS):
        titled = (include_title and bool(paper.title.strip())) or not paper.sentences
        body = paper.sentences if paper.sentences else []
        spans, at = [], 0
        for s in body:
            spans.append((at, at + len(s)))
            at += len(s) + 1
        n = len(body) + titled
        sums, counts = torch.zeros(n, hidden.shape[-1], dtype=torch.float64), torch.zeros(n)
        whole, attended = torch.zeros(hidden.shape[-1], dtype=torch.float64), 0
        for r in (inputs.row_paper == b).nonzero().flatten().tolist():
            text = " ".join(body)
            enc = tokenizer([paper.title], [text], return_offsets_mapping=True, truncation="only_second",
                            max_length=16, return_overflowing_tokens=True)  # a pair even where `text` is empty
            window = (inputs.row_paper[:r] == b).sum().item()
            ids, offsets, seq = enc["input_ids"][window], enc["offset_mapping"][window], enc.sequence_ids(window)
            assert ids == inputs.input_ids[r, : len(ids)].tolist()
            for t, (s, (_, hi)) in enumerate(zip(seq, offsets)):
                whole += hidden[r, t]
                attended += 1
                if s == 0 and titled:
                    sums[0] += hidden[r, t]
                    counts[0] += 1
                elif s == 1:
                    (k,) = [k for k, (a, z) in enumerate(spans) if a <= hi - 1 < z]
                    sums[k + titled] += hidden[r, t]
                    counts[k + titled] += 1
        assert (counts > 0).all()
        expected = sums / counts[:, None]
        assert torch.allclose(batch.emb[b, :n].double(), expected, atol=1e-5), paper.paper_id
        assert torch.allclose(batch.whole[b].double(), whole / attended, atol=1e-5), paper.paper_id
        assert batch.mask[b, :n].all() and not batch.mask[b, n:].any()
