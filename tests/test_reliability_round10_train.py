"""Round 10, training extras checked against references: WiSE-FT interpolation and soups against the merged weights
computed by hand, the adapter-only export, the cross-encoder's training pairs and self-training's ACL queries."""

from __future__ import annotations

import json
import logging
import shutil
from types import SimpleNamespace

import pytest
import torch
from test_formats import PAPERS, perturb_adapters
from test_interpolate import tuned_model
from test_train import tiny_config
from transformers import AutoModel

from aspire.data.papers import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.train.crossencoder import labelled_pairs
from aspire.train.document_model import MODEL_FILE, DocumentModel
from aspire.train.export import export_adapter, plain_weights
from aspire.train.interpolate import interpolate, soup
from aspire.train.self_training import SelfTrainingConfig, add_acl_queries
from aspire.train.trainer import build_model


def _weights(path) -> dict[str, torch.Tensor]:
    model = AutoModel.from_pretrained(path)
    return {**model.state_dict(), **{f"buffer:{n}": b for n, b in model.named_buffers()}}


def test_interpolation_toward_an_adapted_base_starts_from_its_merged_weights(tiny_model_dir, examples_dir, tmp_path):
    """A base saved with adapters (a trained checkpoint, or a shipped adapter-only model) is the model with them:
    alpha 0 gives its merged weights, 0.5 the elementwise mean of those and the tuned ones, 1 the tuned model."""
    adapted = build_model(tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "model.kind=abstract",
                                      "model.adapter.kind=lora"))
    perturb_adapters(adapted.encoder)
    adapted.save_pretrained(tmp_path / "adapted")  # base weights as the tiny model's, the change in adapter/
    shipped, _ = export_adapter(tmp_path / "adapted", tmp_path / "shipped", str(tiny_model_dir))  # adapters alone
    start = plain_weights(tmp_path / "adapted")[1]
    assert any(not torch.allclose(start[n], w) for n, w in AutoModel.from_pretrained(tiny_model_dir).state_dict().items())
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    end = _weights(tuned)
    for base in (tmp_path / "adapted", shipped):
        got = _weights(interpolate(tuned, 0.0, tmp_path / "a0", base=str(base)))
        assert got.keys() == end.keys()
        for name, weight in start.items():
            assert torch.equal(got[name], weight), name  # before: the tiny model's own weights (adapters left out)
        half = _weights(interpolate(tuned, 0.5, tmp_path / "a5", base=str(base)))
        for name, weight in start.items():
            if weight.is_floating_point():
                assert torch.allclose(half[name], (weight + end[name]) / 2, atol=1e-7), name
    whole = _weights(interpolate(tuned, 1.0, tmp_path / "a1", base=str(shipped)))
    assert all(torch.equal(whole[name], end[name]) for name in end)  # every weight and buffer
    carried = ContextualSentenceEncoder.from_pretrained(tmp_path / "a1")
    original = ContextualSentenceEncoder.from_pretrained(tuned)
    assert carried.settings() == original.settings()
    assert carried.tokenizer.get_vocab() == original.tokenizer.get_vocab()
    assert torch.equal(carried.encode(PAPERS).emb, original.encode(PAPERS).emb)


def _coded(tiny_model_dir, path, codes, code):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    encoder.add_codes(codes, code)
    encoder.save_pretrained(path)
    return path


def test_a_soup_refuses_members_whose_rows_or_codes_stand_for_other_tokens(tiny_model_dir, examples_dir, tmp_path):
    """Task codes go in in the order of a run's tasks: two runs of the same two tasks in another order hold the
    codes on swapped embedding rows, which a soup would average into tokens of neither model."""
    first = _coded(tiny_model_dir, tmp_path / "first", ["[COCITE]", "[CROP]"], "[COCITE]")
    swapped = _coded(tiny_model_dir, tmp_path / "swapped", ["[CROP]", "[COCITE]"], "[CROP]")
    with pytest.raises(ValueError, match=rf"{swapped}: token '\[CO(CITE|P)\]' has id \d+ in it, \d+ in {first}"):
        soup([first, swapped], tmp_path / "soup")
    other_code = _coded(tiny_model_dir, tmp_path / "other_code", ["[COCITE]", "[CROP]"], "[CROP]")
    with pytest.raises(ValueError, match=rf"{other_code}: every paper gets the control code '\[CROP\]' in it, "
                                         rf"'\[COCITE\]' in {first}"):
        soup([first, other_code], tmp_path / "soup")
    same = _coded(tiny_model_dir, tmp_path / "same", ["[COCITE]", "[CROP]"], "[COCITE]")
    assert (soup([first, same], tmp_path / "soup") / "model.safetensors").is_file()

    # kind abstract's text settings say how its one vector is made: members must agree on them too
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path / "t")
    shutil.copytree(tuned, tmp_path / "unnormalised")
    meta = json.loads((tmp_path / "unnormalised" / MODEL_FILE).read_text())
    meta["abstract"]["normalize"] = False
    (tmp_path / "unnormalised" / MODEL_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"unnormalised: abstract\.normalize is False, True in .*--mixed-kinds"):
        soup([tuned, tmp_path / "unnormalised"], tmp_path / "soup2")
    soup([tuned, tmp_path / "unnormalised"], tmp_path / "soup2", mixed_kinds=True)
    record = json.loads((tmp_path / "soup2" / "interpolation.json").read_text())
    assert record["mixed"] == {str(tmp_path / "unnormalised"): {"abstract.normalize": False}}


def test_adapter_only_export_of_a_model_with_codes_is_refused_naming_them(tiny_model_dir, examples_dir, tmp_path):
    """The codes' vocabulary entries and embedding rows live in the model's own tokenizer and weights: over the base
    they would be out of its vocabulary (before: an IndexError from inside peft, naming nothing)."""
    model = build_model(tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "model.kind=abstract",
                                    "model.adapter.kind=lora", "model.control_codes=task"))
    perturb_adapters(model.encoder)
    model.save_pretrained(tmp_path / "coded")
    with pytest.raises(ValueError, match=r"coded has control codes \['\[COCITE\]'\] that the base .* lacks"):
        export_adapter(tmp_path / "coded", tmp_path / "out", str(tiny_model_dir))
    assert not (tmp_path / "out").exists()
    # over a base that holds the codes (the adapted model's own base weights and tokenizer) it is written, verified
    out, _ = export_adapter(tmp_path / "coded", tmp_path / "out", str(tmp_path / "coded"))
    again = DocumentModel.from_pretrained(out)
    assert torch.allclose(again.encode(PAPERS).emb, model.encode(PAPERS).emb, atol=1e-6)


def test_labelled_pairs_refuse_labels_of_a_query_without_text():
    texts = {"p": "neural model", "n": "data"}
    pairs = labelled_pairs({"q1": "a query"}, {"q1": ["p"]}, {"q1": ["n"]}, texts)
    assert pairs == [("a query", "neural model", 1.0), ("a query", "data", 0.0)]
    with pytest.raises(ValueError, match="query q2: labelled documents but no query text"):  # before: left out
        labelled_pairs({"q1": "a query"}, {"q1": ["p"], "q2": ["p"]}, {"q1": ["n"]}, texts)
    with pytest.raises(ValueError, match="query q3: labelled documents but no query text"):
        labelled_pairs({"q1": "a query"}, {"q1": ["p"]}, {"q3": ["n"]}, texts)


def test_acl_queries_without_benchmark_removal_are_warned_about(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    acl = tmp_path / "acl.jsonl"
    records = [{"paper_id": "A1", "title": "Text Paper", "abstract": ["The text model.", "We show results."]},
               {"paper_id": "A2", "title": "Neural data", "abstract": ["A neural model of data.", "It learns."]}]
    acl.write_text("".join(json.dumps(r) + "\n" for r in records))
    bench = SimpleNamespace(queries={"q": "a citing sentence"}, candidates=[Paper("c1", "Text paper!", ["x."])])
    cfg = SelfTrainingConfig(acl_queries=5, acl_path=str(acl), benchmarks_dir=None)
    with caplog.at_level(logging.WARNING):
        stats = add_acl_queries(bench, cfg)
    assert "benchmarks_dir is null: benchmark papers are NOT removed" in caplog.text  # before: silent
    assert stats["used"] == 1 and stats["excluded_titles"] == {"candidates": 1}
    assert list(bench.queries) == ["q", "acl:A2"]
