"""Round 8 of the correctness sweep: evaluation's vector cache, encodings, fusion and stages against references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aspire.benchmarks.context2doc import Context2Doc
from aspire.data.papers import Paper
from aspire.evaluate.options import EvalOptions

PAPERS = [
    Paper("p1", "a title of the paper", ["we propose a new method for text .", "results show the model improves ."]),
    Paper("p2", "neural network", ["the data is scientific .", "we show results on two tasks ."]),
]


# ---- the vector cache: a fast encoder loaded from its load record keys its vectors by the code in force ------------
def test_a_recorded_fast_encoder_is_not_served_another_codes_vectors(tiny_model_dir, tmp_path, monkeypatch):
    from aspire.encoders import ContextualSentenceEncoder, load_encoder
    from aspire.evaluate.encode import encode_papers

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "aspire-cache"))
    coded = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    coded.add_codes(["[DOC]", "[BACKGROUND]", "[METHOD]"], "[DOC]")
    coded.save_pretrained(tmp_path / "coded")
    load_encoder(tmp_path / "coded", backend="onnx")  # exports the graph and writes the load record
    fast = load_encoder(tmp_path / "coded", backend="onnx")
    assert fast.recorded_fingerprint is not None  # read from the record: the case under test
    cache = tmp_path / "vectors"
    with fast.using_code("[BACKGROUND]"):
        background, _ = encode_papers(fast, PAPERS, "contextual", cache)
    with fast.using_code("[METHOD]"):
        method, from_cache = encode_papers(fast, PAPERS, "contextual", cache)
        fresh = fast.encode(PAPERS)
        again, hit = encode_papers(fast, PAPERS, "contextual", cache)
    assert not torch.equal(fresh.emb, background.emb)  # the codes do give other vectors
    assert not from_cache and torch.equal(method.emb, fresh.emb)  # once the [BACKGROUND] vectors, from the cache
    assert hit and torch.equal(again.emb, fresh.emb)  # the same code is read back


# ---- context2doc: the encoding the options name ---------------------------------------------------------------------
def _tiny_bench() -> Context2Doc:
    long = [f"sentence {i} of the data shows the model improves the results on the task ." for i in range(6)]
    cands = [Paper("c1", "neural network", long), Paper("c2", "a title", ["we propose a new method for text ."])]
    return Context2Doc("test", {"L1": "we propose a neural model", "L2": "results on scientific documents"},
                       {"L1": {"c1": 1}, "L2": {"c2": 1}}, cands, {"L1": "x", "L2": "y"})


def test_context2doc_pass_encoding_scores_the_contextual_pass(tiny_model_dir, tmp_path):
    from aspire.encoders import load_encoder
    from aspire.evaluate.context2doc_run import dense_scores

    bench = _tiny_bench()
    options = EvalOptions(encoding="pass", cache_dir=tmp_path / "vectors", encoder_options={"max_length": 16})
    scores, _ = dense_scores(bench, str(tiny_model_dir), "abstract", options)
    encoder = load_encoder(tiny_model_dir, max_length=16)
    queries = encoder.encode([Paper(q, "", [t]) for q, t in bench.queries.items()]).whole
    cands = encoder.encode(bench.candidates).whole
    expected = torch.nn.functional.normalize(queries, dim=-1) @ torch.nn.functional.normalize(cands, dim=-1).T
    np.testing.assert_allclose(scores, expected.numpy(), atol=1e-5)  # once a separate whole-abstract encoding
    names = [p.name for p in (tmp_path / "vectors").glob("*.pt")]
    assert names and all("-contextual-" in n for n in names)
    with pytest.raises(ValueError, match="only goes with scorer 'abstract'"):  # once minl2 over one vector a paper
        dense_scores(bench, str(tiny_model_dir), "minl2", EvalOptions(encoding="pass"))


def test_fused_context2doc_scores_keep_their_float64_order():
    from aspire.evaluate.context2doc_run import fuse_dense_bm25, to_run

    bench = Context2Doc("test", {"q": "x"}, {"q": {"b": 1}}, [Paper(c, "", ["x"]) for c in "zab"], {"q": "x"})
    dense = np.array([[0.0, 1.0, 1.0]], dtype=np.float32)
    lexical = np.array([[0.0, 1.0, 1.0 + 1e-9]])  # b beats a by far less than float32 tells apart
    fused = fuse_dense_bm25(bench, dense, lexical, 0.5)
    assert fused[0, 2] > fused[0, 1]
    assert [c for c, _ in to_run(bench, fused, 3)["q"]] == ["b", "a", "z"]  # once a, b: a float32 tie, candidate order


# ---- the command line: --code reaches the search runs ---------------------------------------------------------------
class _Stop(ValueError):
    pass


def test_search_pipeline_runs_encode_with_the_code_given(tiny_model_dir, tmp_path, monkeypatch):
    from aspire.benchmarks import context2doc, reviewers
    from aspire.cli.evaluate import main
    from aspire.evaluate import search_run

    seen = {}

    def capture(name):
        def run(*args, **kwargs):
            seen[name] = kwargs["encoder_options"]
            raise _Stop("captured")
        return run

    monkeypatch.setattr(context2doc, "load_context2doc", lambda data, split: None)
    monkeypatch.setattr(reviewers, "load_reviewer_set", lambda data: None)
    monkeypatch.setattr(search_run, "run_search_pipeline", capture("context2doc"))
    monkeypatch.setattr(search_run, "run_reviewers_search", capture("reviewers"))
    for command in ("context2doc", "reviewers"):
        main([command, "--model", str(tiny_model_dir), "--code", "[CONTEXT2DOC]", "--search-pipeline", "rerank=none",
              "--out", str(tmp_path / command)])
    assert seen == {"context2doc": {"code": "[CONTEXT2DOC]"}, "reviewers": {"code": "[CONTEXT2DOC]"}}  # once {}
