"""Inference backends on a tiny random BERT: torch bf16, ONNX Runtime (fp32, int8) and OpenVINO (f32, bf16)
against the exact torch encoder."""

from __future__ import annotations

import json
import re

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import backends, load_encoder

LONG = " ".join(["The document similarity of scientific text is based on citation data."] * 6)
PAPERS = [
    Paper("p1", "A new model", ["We propose a new model.", "It improves the results, e.g. on text.", "Fig 2."]),
    Paper("p2", "Citation similarity", ["The document similarity of scientific text is based on citation data."]),
    Paper("p3", "Two", ["Data.", "The paper show results."]),
    Paper("long", "A long abstract", [LONG, "We show results.", LONG, "Two new methods improve performance."]),
]


@pytest.fixture(scope="module")
def exact(tiny_model_dir, cache):
    return load_encoder(tiny_model_dir)


@pytest.fixture(scope="module")
def fast(tiny_model_dir, cache):
    return load_encoder(tiny_model_dir, backend="onnx")


@pytest.fixture(scope="module")
def fast_int8(tiny_model_dir, cache):
    return load_encoder(tiny_model_dir, backend="onnx", quantize="int8")


@pytest.fixture(scope="module")
def fast_bf16(tiny_model_dir, cache):
    return load_encoder(tiny_model_dir, quantize="bf16")


@pytest.fixture(scope="module")
def fast_ov(tiny_model_dir, cache):
    return load_encoder(tiny_model_dir, backend="openvino")


@pytest.fixture(scope="module")
def fast_ov_bf16(tiny_model_dir, cache):
    return load_encoder(tiny_model_dir, backend="openvino", quantize="bf16")


def sentence_cosines(a, b) -> torch.Tensor:
    """Cosine of every real sentence vector of DocBatch `a` to the same slot of `b` -> (N,)."""
    assert torch.equal(a.mask, b.mask)
    return torch.nn.functional.cosine_similarity(a.emb[a.mask], b.emb[b.mask], dim=-1)


def test_onnx_fp32_vectors_match_torch(exact, fast):
    # batch_size=3 gives two batches of different shapes; the long paper overflows into a second window
    assert exact.truncation_report(PAPERS)[0].paper_id == "long"
    want, got = exact.encode(PAPERS, batch_size=3), fast.encode(PAPERS, batch_size=3)
    assert got.paper_ids == want.paper_ids and got.sentences == want.sentences
    assert sentence_cosines(want, got).min() > 0.9999
    torch.testing.assert_close(got.emb, want.emb, atol=1e-4, rtol=1e-4)
    abstract = fast.encode_abstract(PAPERS, batch_size=2)  # the text-pair path goes through the backend too
    torch.testing.assert_close(abstract, exact.encode_abstract(PAPERS, batch_size=2), atol=1e-4, rtol=1e-4)


def test_exported_graph_honours_the_attention_mask_of_a_padded_batch(exact, fast):
    texts = ["a model", "the document similarity of scientific text is based on citation data"]
    enc = exact.tokenizer(texts, padding=True, return_tensors="pt")  # row 0 padded
    assert not enc["attention_mask"][0].all()
    (got,) = fast.model.session.run(["last_hidden_state"], {k: v.numpy() for k, v in enc.items()})
    with torch.inference_mode():
        want = exact.model(**enc).last_hidden_state
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(torch.from_numpy(got)[real], want[real], atol=1e-4, rtol=1e-4)


def test_onnx_int8_vectors_close_to_torch(exact, fast, fast_int8):
    want, got = exact.encode(PAPERS, batch_size=3), fast_int8.encode(PAPERS, batch_size=3)
    assert sentence_cosines(want, got).min() > 0.999  # int8 weights: a looser bound (real MiniLM: bench_backends.md)
    fp32 = fast.encode(PAPERS, batch_size=3)  # and it is the quantized graph, not the fp32 one
    assert (got.emb - fp32.emb).abs().max() > 10 * (fp32.emb - want.emb).abs().max()


def test_torch_bf16_vectors_close_to_torch_and_pooled_in_fp32(exact, fast_bf16):
    want, got = exact.encode(PAPERS, batch_size=3), fast_bf16.encode(PAPERS, batch_size=3)
    assert got.paper_ids == want.paper_ids and got.sentences == want.sentences
    assert got.emb.dtype == torch.float32
    assert sentence_cosines(want, got).min() > 0.999  # bf16: ~3 significant digits (real MiniLM: bench_backends_bf16.md)
    assert (got.emb - want.emb).abs().max() > 1e-4  # and it is the bf16 model, not the exact one
    assert fast_bf16.model.bf16.embeddings.word_embeddings.weight.dtype == torch.bfloat16
    assert fast_bf16.model.exact.embeddings.word_embeddings.weight.dtype == torch.float32  # the exact weights kept
    enc = exact.tokenizer(["a model", "the document similarity of scientific text"], padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = fast_bf16.model(**enc).last_hidden_state  # (2, T, D): fp32 out, zeros past a row's length
    assert hidden.dtype == torch.float32 and not enc["attention_mask"][0].all()
    assert not hidden[0][~enc["attention_mask"][0].bool()].any()
    abstract = fast_bf16.encode_abstract(PAPERS, batch_size=2)  # the text-pair path goes through the backend too
    assert torch.nn.functional.cosine_similarity(abstract, exact.encode_abstract(PAPERS, batch_size=2)).min() > 0.999


def test_openvino_f32_vectors_match_torch(exact, fast_ov):
    assert fast_ov.model.backend_tag.startswith("openvino-f32-")
    want, got = exact.encode(PAPERS, batch_size=3), fast_ov.encode(PAPERS, batch_size=3)
    assert got.paper_ids == want.paper_ids and got.sentences == want.sentences
    torch.testing.assert_close(got.emb, want.emb, atol=1e-4, rtol=1e-4)
    abstract = fast_ov.encode_abstract(PAPERS, batch_size=2)
    torch.testing.assert_close(abstract, exact.encode_abstract(PAPERS, batch_size=2), atol=1e-4, rtol=1e-4)


def test_openvino_streams_run_length_groups_side_by_side_in_order(tiny_model_dir, exact):
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ov2 = load_encoder(tiny_model_dir, backend="openvino")  # one single-thread stream per thread
    finally:
        torch.set_num_threads(threads)
    assert len(ov2.model.queue) == 2
    texts = ["a model", "the document similarity of scientific text is based on citation data", "we propose a new method",
             "data", "two new methods improve performance on text"]
    enc = [exact.tokenizer(t, return_tensors="pt") for t in texts]  # five feeds of five lengths
    got = ov2.model.run_groups([dict(e) for e in enc])
    with torch.inference_mode():
        for e, out in zip(enc, got):
            torch.testing.assert_close(out, exact.model(**e).last_hidden_state, atol=1e-4, rtol=1e-4)


def test_openvino_bf16_vectors_close_to_torch(exact, fast_ov, fast_ov_bf16):
    want, got = exact.encode(PAPERS, batch_size=3), fast_ov_bf16.encode(PAPERS, batch_size=3)
    assert got.emb.dtype == torch.float32
    assert sentence_cosines(want, got).min() > 0.999  # real MiniLM: bench_backends_bf16.md
    f32 = fast_ov.encode(PAPERS, batch_size=3)
    if backends.bf16_is_native():  # it runs at bf16, and says so; a CPU without bf16 runs (and is tagged) f32
        assert fast_ov_bf16.model.backend_tag.startswith("openvino-bf16-")
        assert (got.emb - f32.emb).abs().max() > 10 * (f32.emb - want.emb).abs().max()
    else:
        assert fast_ov_bf16.model.backend_tag.startswith("openvino-f32-")
        torch.testing.assert_close(got.emb, f32.emb)


def test_fingerprint_differs_by_backend_and_quantization(tiny_model_dir, exact, fast, fast_int8, fast_bf16, fast_ov,
                                                         fast_ov_bf16):
    from aspire.encoders import ContextualSentenceEncoder

    encoders = [exact, fast, fast_int8, fast_bf16, fast_ov, fast_ov_bf16]
    assert len({e.fingerprint() for e in encoders}) == len(encoders) - (not backends.bf16_is_native())
    assert exact.fingerprint() == ContextualSentenceEncoder.from_pretrained(tiny_model_dir).fingerprint()
    assert fast.fingerprint() == load_encoder(tiny_model_dir, backend="onnx").fingerprint()  # stable
    assert fast_bf16.fingerprint() == load_encoder(tiny_model_dir, quantize="bf16").fingerprint()
    assert fast_ov_bf16.fingerprint() == load_encoder(tiny_model_dir, backend="openvino", quantize="bf16").fingerprint()


def test_cli_backend_table_agrees_with_the_backends():
    from aspire import cliutil

    assert cliutil.QUANTIZATIONS == backends.QUANTIZATIONS and tuple(cliutil.QUANTIZATIONS) == backends.BACKENDS


def test_cached_export_is_reused(tiny_model_dir, exact, fast, fast_int8, monkeypatch):
    files = {q: backends.onnx_model_path(exact.fingerprint(), q) for q in (None, "int8")}
    assert all(path.is_file() for path in files.values())
    before = {q: path.stat().st_mtime_ns for q, path in files.items()}

    def refuse(*args, **kwargs):
        raise AssertionError("exported again instead of reading the cache")

    monkeypatch.setattr(backends, "export_onnx", refuse)
    monkeypatch.setattr(backends, "quantize_int8", refuse)
    again = load_encoder(tiny_model_dir, backend="onnx", quantize="int8")
    assert {q: path.stat().st_mtime_ns for q, path in files.items()} == before
    assert torch.equal(again.encode(PAPERS[:2]).emb, fast_int8.encode(PAPERS[:2]).emb)
    assert not list(files[None].parent.glob("*.tmp"))  # no temporary file left behind


def test_settings_pass_through_to_the_onnx_encoder(tiny_model_dir, fast):
    other = load_encoder(tiny_model_dir, backend="onnx", include_title=True)
    assert other.include_title and other.fingerprint() != fast.fingerprint()
    assert backends.onnx_model_path(load_encoder(tiny_model_dir, include_title=True).fingerprint(), None).is_file()
    want = load_encoder(tiny_model_dir, include_title=True).encode(PAPERS)
    assert sentence_cosines(want, other.encode(PAPERS)).min() > 0.9999


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "tensorrt"}, "unknown encoder backend 'tensorrt'; valid: ['torch', 'onnx', 'openvino']"),
        ({"backend": "onnx", "quantize": "int4"}, "quantize='int4' does not go with backend='onnx'; valid: 'bf16' "
                                                  "(backend='torch'), 'int8' (backend='onnx'), 'bf16' (backend='openvino')"),
        ({"backend": "openvino", "quantize": "int8"}, "quantize='int8' does not go with backend='openvino'"),
        ({"backend": "openvino", "device": "cuda"}, "the openvino backend runs on the CPU; got device 'cuda'"),
        ({"quantize": "int8"}, "quantize='int8' does not go with backend='torch'"),
        ({"backend": "onnx", "quantize": "bf16"}, "quantize='bf16' does not go with backend='onnx'"),
        ({"backend": "onnx", "device": "cuda"}, "the onnx backend runs on the CPU; got device 'cuda'"),
    ],
)
def test_bad_backend_options_are_clear_errors(tiny_model_dir, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_encoder(tiny_model_dir, **kwargs)


@pytest.mark.parametrize("which", ["fast", "fast_bf16", "fast_ov_bf16"])
def test_fast_backends_refuse_training(which, request):
    encoder = request.getfixturevalue(which)
    with pytest.raises(RuntimeError, match=r"inference only; train the exact model \(backend='torch', quantize=None\)"):
        encoder.train()
    assert not encoder.training


def test_length_groups_cover_every_row_once_within_the_padding_slack():
    lengths = [512, 30, 200, 198, 7, 512, 199, 31, 100, 3]
    groups = backends.length_groups(lengths, slack=0.05)
    assert sorted(r for g in groups for r in g) == list(range(len(lengths)))
    for g in groups:
        assert lengths[g[0]] == max(lengths[r] for r in g)
        assert lengths[g[0]] * len(g) <= 1.05 * sum(lengths[r] for r in g)
    assert [sorted(g) for g in groups[:2]] == [[0, 5], [2, 3, 6]]  # equal-ish lengths share a call
    assert len(backends.length_groups(lengths, slack=0.0)) == 9  # only the two 512s pad to each other


@pytest.mark.slow
def test_evaluate_cli_encodes_with_the_chosen_backend(small_csfcube, tiny_model_dir, fast_int8, tmp_path, capsys):
    from aspire.cli.evaluate import main

    common = ["csfcube", "--data", str(small_csfcube), "--model", str(tiny_model_dir), "--scorer", "minl2",
              "--cache-dir", str(tmp_path / "vectors")]
    assert main([*common, "--backend", "onnx", "--quantize", "int8", "--out", str(tmp_path / "int8")]) == 0
    saved = json.loads((tmp_path / "int8" / "results.json").read_text())
    assert saved["encoder_fingerprint"] == fast_int8.fingerprint()
    assert saved["encoder_options"] == {"backend": "onnx", "quantize": "int8"}
    assert main([*common, "--out", str(tmp_path / "exact")]) == 0  # the exact run gets its own cache entry
    assert len(list((tmp_path / "vectors").glob("*.pt"))) == 2
    assert main([*common, "--quantize", "bf16", "--out", str(tmp_path / "bf16")]) == 0  # and so does bf16
    saved = json.loads((tmp_path / "bf16" / "results.json").read_text())
    assert saved["encoder_options"] == {"quantize": "bf16"}
    assert saved["encoder_fingerprint"] == load_encoder(tiny_model_dir, quantize="bf16").fingerprint()
    assert len(list((tmp_path / "vectors").glob("*.pt"))) == 3
    with pytest.raises(SystemExit):
        main([*common, "--quantize", "int8", "--out", str(tmp_path / "bad")])  # int8 needs --backend onnx
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["csfcube", "--data", str(small_csfcube), "--ranked", str(tmp_path), "--exp", "x", "--quantize", "bf16",
              "--out", str(tmp_path / "bad")])  # a ranked run encodes nothing
    assert "--backend/--quantize choose how a model encodes: not with --ranked" in capsys.readouterr().err


def test_index_cli_builds_with_onnx_and_add_checks_the_backend(tmp_path, tiny_model_dir, fast, cache, capsys):
    from aspire.index import SentenceIndex
    from aspire.index.__main__ import main as index_main

    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": p.paper_id, "title": p.title, "abstract": p.sentences}) + "\n"
                              for p in PAPERS))
    out = tmp_path / "idx"
    assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out),
                       "--backend", "onnx", "index.kind=flat"]) == 0
    assert SentenceIndex.load(out).model_fingerprint == fast.fingerprint()
    capsys.readouterr()
    corpus = tmp_path / "more.jsonl"  # new papers: a corpus indexed already is refused before any model check
    corpus.write_text("".join(json.dumps({"paper_id": f"new-{p.paper_id}", "title": p.title, "abstract": p.sentences})
                              + "\n" for p in PAPERS))
    # exact vectors are not added to an index of fast ones (ModelMismatchError, one error line)
    assert index_main(["add", "--index", str(out), "--corpus", str(corpus), "--backend", "torch"]) == 2
    err = capsys.readouterr().err
    assert "backend onnx fp32; this `index add` encodes papers with" in err and "backend torch fp32" in err
    assert "leave out --backend/--quantize to use the index's" in err and "--model" not in err
    # --quantize alone keeps the backend the index records (onnx): int8 vectors are not added to fp32 ones
    assert index_main(["add", "--index", str(out), "--corpus", str(corpus), "--quantize", "int8"]) == 2
    assert "the index was built with model" in capsys.readouterr().err
    assert index_main(["add", "--index", str(out), "--corpus", str(corpus), "--backend", "torch", "--quantize",
                       "int8"]) == 2
    assert "--quantize int8 goes with --backend onnx" in capsys.readouterr().err
