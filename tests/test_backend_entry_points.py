"""The fast inference backends (ONNX Runtime int8; torch bf16) through every entry point that encodes, on
a tiny random BERT: `aspire encode`, sharded encoding (resumable, partial merge), search queries, the page
over a fast-built index, and the evaluation suite. The exact torch model stays the default."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from aspire.data import Paper
from aspire.encoders import load_encoder
from aspire.index import SentenceIndex
from aspire.index.__main__ import main as index_main

PAPERS = [Paper(f"p{i}", f"title {i}", [f"sentence {j} of paper {i} on citation data." for j in range(1 + i % 3)])
          for i in range(9)]
INT8 = ["--backend", "onnx", "--quantize", "int8"]


@pytest.fixture(scope="module")
def fast_int8(tiny_model_dir, cache):
    return load_encoder(tiny_model_dir, backend="onnx", quantize="int8")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "papers.jsonl"
    path.write_text("".join(json.dumps({"paper_id": p.paper_id, "title": p.title, "abstract": p.sentences}) + "\n"
                            for p in PAPERS))
    return path


@pytest.fixture(scope="module")
def int8_index(tmp_path_factory, tiny_model_dir, corpus, fast_int8):
    out = tmp_path_factory.mktemp("int8-index") / "idx"
    assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out), *INT8,
                       "index.kind=flat", "--quiet"]) == 0
    return out


def test_encode_cli_with_the_fast_backend(tmp_path, tiny_model_dir, corpus, fast_int8):
    from aspire.cli.encode import main as encode_main
    from aspire.index.corpus import EncodedCorpus, encode_corpus

    assert encode_main(["--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "v"),
                        *INT8, "--quiet"]) == 0
    saved, meta = EncodedCorpus.load_shard(tmp_path / "v")
    assert meta["model_fingerprint"] == fast_int8.fingerprint() != load_encoder(tiny_model_dir).fingerprint()
    np.testing.assert_allclose(saved.vectors, encode_corpus(fast_int8, PAPERS, progress=False).vectors, atol=1e-6)
    with pytest.raises(SystemExit):  # an unknown backend: argparse's choices
        encode_main(["--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "w"),
                     "--backend", "tensorrt"])
    assert encode_main(["--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "w"),
                        "--quantize", "int8"]) == 2  # --quantize without --backend onnx: a one-line error


@pytest.mark.parametrize("backend", ["torch", "openvino"])
def test_encode_cli_with_bf16(backend, tmp_path, tiny_model_dir, corpus, capsys):
    from aspire.cli.encode import main as encode_main
    from aspire.index.corpus import EncodedCorpus, encode_corpus

    common = ["--model", str(tiny_model_dir), "--corpus", str(corpus), "--quiet"]
    assert encode_main([*common, "--out", str(tmp_path / "v"), "--backend", backend, "--quantize", "bf16"]) == 0
    saved, meta = EncodedCorpus.load_shard(tmp_path / "v")
    bf16 = load_encoder(tiny_model_dir, backend=backend, quantize="bf16")
    assert meta["model_fingerprint"] == bf16.fingerprint() != load_encoder(tiny_model_dir).fingerprint()
    np.testing.assert_allclose(saved.vectors, encode_corpus(bf16, PAPERS, progress=False).vectors, atol=1e-6)
    capsys.readouterr()
    assert encode_main([*common, "--out", str(tmp_path / "w"), "--backend", "onnx", "--quantize", "bf16"]) == 2
    assert "--quantize bf16 goes with --backend torch or openvino" in capsys.readouterr().err


def test_encode_shard_with_the_fast_backend_resumes_and_merges_a_prefix(tmp_path, tiny_model_dir, corpus, fast_int8,
                                                                       capsys, caplog):
    from aspire.index.shards import shard_name

    shards, common = tmp_path / "shards", ["--model", str(tiny_model_dir), "--corpus", str(corpus)]
    # one process (no torchrun: rank 0 of 1) cuts the corpus into 4 shards, each written when done
    assert index_main(["encode-shard", *common, "--shards", str(shards), "--num-shards", "4", *INT8, "--quiet"]) == 0
    assert sorted(p.name for p in shards.iterdir()) == [shard_name(s, 4) for s in range(4)]
    metas = [json.loads((shards / shard_name(s, 4) / "shard.json").read_text()) for s in range(4)]
    assert [m["slice"] for m in metas] == [[0, 2], [2, 4], [4, 6], [6, 9]]
    assert {m["model_fingerprint"] for m in metas} == {fast_int8.fingerprint()}
    assert index_main(["merge", "--shards", str(shards), "--out", str(tmp_path / "all"), "index.kind=flat"]) == 0
    merged = SentenceIndex.load(tmp_path / "all")
    assert merged.paper_ids == [p.paper_id for p in PAPERS] and merged.model_fingerprint == fast_int8.fingerprint()

    # an interrupted run: shard 2 missing. A re-run encodes it alone; the finished shards are kept as they are
    kept = (shards / shard_name(0, 4) / "shard.json").stat().st_mtime_ns
    shutil.rmtree(shards / shard_name(2, 4))
    with pytest.raises(ValueError, match=r"shards \[2\] \(of 4\) are missing"):
        index_main(["merge", "--shards", str(shards), "--out", str(tmp_path / "x"), "--log-level", "debug"])
    assert index_main(["merge", "--shards", str(shards), "--out", str(tmp_path / "part"), "--allow-missing",
                       "index.kind=flat"]) == 0
    assert "missing [2]" in caplog.text
    assert SentenceIndex.load(tmp_path / "part").paper_ids == ["p0", "p1", "p2", "p3", "p6", "p7", "p8"]
    capsys.readouterr()
    assert index_main(["encode-shard", *common, "--shards", str(shards), "--num-shards", "4", *INT8, "--quiet"]) == 0
    assert (shards / shard_name(0, 4) / "shard.json").stat().st_mtime_ns == kept
    assert (shards / shard_name(2, 4) / "shard.json").is_file()
    # the same shards directory with the exact model: refused, never mixed
    assert index_main(["encode-shard", *common, "--shards", str(shards), "--num-shards", "4", "--quiet"]) == 2
    assert "was encoded with model" in capsys.readouterr().err


def test_search_encodes_queries_with_the_backend_the_index_was_built_with(int8_index, tmp_path, capsys):
    from aspire.cli.search import main as search_main
    from aspire.search import Searcher

    query = tmp_path / "query.json"
    query.write_text(json.dumps({"paper_id": "new", "title": "t", "abstract": ["sentence 1 of paper 4 on citation data."]}))
    assert search_main(["--index", str(int8_index), "--query-file", str(query), "--k", "3", "--json", *INT8,
                        "--quiet"]) == 0
    hits = json.loads(capsys.readouterr().out)
    searcher = Searcher.open(int8_index, load_model=True, encoder_options={"backend": "onnx", "quantize": "int8"})
    want = searcher.search(searcher.query_from_paper(Paper("new", "t", ["sentence 1 of paper 4 on citation data."])), k=3)
    assert [h["paper_id"] for h in hits["hits"]] == [h.paper_id for h in want]
    # without --backend/--quantize: the backend and precision the index was built with (issue 45)
    assert search_main(["--index", str(int8_index), "--query-file", str(query), "--k", "3", "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["hits"] == hits["hits"]
    # the exact model's query vectors are not searched against fast vectors: the message names both backends
    assert search_main(["--index", str(int8_index), "--query-file", str(query), "--backend", "torch", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "backend onnx int8" in err and "backend torch fp32" in err


def test_the_page_serves_an_index_built_with_the_fast_backend(int8_index):
    from aspire.search import Searcher
    from aspire.serve import open_service

    service = open_service(int8_index, ["rerank=ot", "k=3", "ot_max_iter=100"])  # queries are indexed papers
    out = service.search({"paper_id": "p4", "sentences": [0, 1], "k": 3})
    searcher = Searcher.open(int8_index, ["rerank=ot", "ot_max_iter=100"])
    want = searcher.search(searcher.query_from_index("p4", [0, 1]), k=3)
    assert [h["paper_id"] for h in out["hits"]] == [h.paper_id for h in want]


@pytest.mark.slow
def test_suite_passes_the_backend_to_every_benchmark(tmp_path, monkeypatch, tiny_model_dir, shared_data):
    """Every benchmark of the suite loads its encoder with the chosen backend (a stand-in `load_encoder`
    stops each run at that call); the suite's record keeps the options."""
    import aspire.encoders
    from aspire.cli.evaluate import main as eval_main
    from aspire.evaluate import suite

    class Loaded(Exception):
        pass

    asked = []

    def record(name, **options):
        asked.append(options)
        raise Loaded

    monkeypatch.setattr(aspire.encoders, "load_encoder", record)
    calls = []
    for name, runner in list(suite.RUNNERS.items()):  # every registered benchmark's runner

        def run(*args, _real=runner.rows):
            try:
                return _real(*args)
            except Loaded:
                calls.append(args[-1].encoder_options)  # the runner's EvalOptions
                return [], "fp"

        monkeypatch.setitem(suite.RUNNERS, name, suite.Runner(run, runner.ensemble, runner.compare, runner.lexical))
    assert eval_main(["suite", "--data", str(shared_data), "--model", str(tiny_model_dir), "--scorer", "minl2",
                      *INT8, "--out", str(tmp_path / "s")]) == 0
    want = {"backend": "onnx", "quantize": "int8"}
    assert calls == [want] * len(suite.RUNNERS) and asked == [want] * len(suite.RUNNERS)
    assert json.loads((tmp_path / "s" / "suite.json").read_text())["encoder_options"] == want
    with pytest.raises(SystemExit):  # BM25 has no encoder to choose a backend for
        eval_main(["suite", "--model", "bm25", *INT8, "--out", str(tmp_path / "b")])
