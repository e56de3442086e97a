"""Round 18, the search layer users meet first: a search whose stages run deeper for its cross-encoder (`cross_top`
papers) warns of a shortfall only when it finds fewer papers than the k asked (it warned "found 19 of the k=50"
when 5 were asked and 5 came back); `build_index` / `add_to_index` load their default encoder with the backend and
precision the config records (they loaded the exact model and recorded another, so the index's own queries were
refused); `aspire search`'s text output keeps one line a hit for a title or sentence holding a line break."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from test_reliability_round11_search import RecordingCrossEncoder, random_index
from test_reliability_round13_mend import PAPERS, StandIn, write_corpus

from aspire.cli.search import main as search_main
from aspire.data.papers import Paper
from aspire.index import IndexBuildConfig, IndexConfig
from aspire.index.build import add_to_index, build_index
from aspire.index.config import EncodeConfig, SearchConfig
from aspire.search import Searcher

# ---------------------------------------------------------------- shortfalls with the cross-encoder stage on


def _cross_searcher(P: int = 20) -> tuple[Searcher, RecordingCrossEncoder]:
    cross = RecordingCrossEncoder()
    return Searcher(random_index(P=P), SearchConfig(cross_top=50), cross_encoder=cross), cross


@pytest.mark.parametrize("stages", ["ann", "bm25", "ann,bm25", "whole"])
@pytest.mark.parametrize("rerank", ["none", "minl2"])
def test_a_search_deepened_for_the_cross_encoder_is_short_only_of_the_k_asked(stages, rerank, caplog):
    # 20 papers, the query left out: 19 to give. k=5 found 5 and warned "found 19 of the k=50 papers asked for"
    searcher, cross = _cross_searcher()
    query = searcher.query_from_index("p3")
    with caplog.at_level(logging.WARNING, logger="aspire"):
        hits = searcher.search(query, k=5, stages=stages, rerank=rerank, cross_encoder=True)
    assert len(hits) == 5 and cross.read == [19]  # the stage read every paper there is
    assert "found" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aspire"):
        hits = searcher.search(query, k=30, stages=stages, rerank=rerank, cross_encoder=True)
    assert len(hits) == 19
    assert "found 19 of the k=30 papers asked for" in caplog.text and "k=50" not in caplog.text
    # a batch's summary counts against the k asked too
    searcher.shortfalls = []
    searcher.search(query, k=5, stages=stages, rerank=rerank, cross_encoder=True)
    assert searcher.shortfalls == []
    searcher.search(query, k=30, stages=stages, rerank=rerank, cross_encoder=True)
    assert [(found, k) for found, k, _ in searcher.shortfalls] == [(19, 30)]


def test_the_cross_encoder_stage_off_still_warns_against_k():
    searcher, _ = _cross_searcher()
    searcher.shortfalls = []
    searcher.search(searcher.query_from_index("p3"), k=25, cross_encoder=False)
    assert [(found, k) for found, k, _ in searcher.shortfalls] == [(19, 25)]


# ---------------------------------------------------------------- the default encoder of build and add


@pytest.mark.parametrize("backend, quantize", [(None, None), ("onnx", "int8"), ("openvino", "bf16"), ("torch", "bf16")])
def test_build_and_add_load_the_default_encoder_with_the_recorded_backend(tmp_path, monkeypatch, backend, quantize):
    # the default loader was `load_encoder(model)`: the exact model encoded an index recorded as onnx int8, whose
    # queries (`Searcher.open(load_model=True)` loads the recorded backend) then met another fingerprint
    import aspire.encoders

    calls = []

    def load(name, **options):
        calls.append((name, options))
        return StandIn(False)

    monkeypatch.setattr(aspire.encoders, "load_encoder", load)
    config = IndexBuildConfig(index=IndexConfig(kind="flat"), encode=EncodeConfig(backend=backend, quantize=quantize))
    index, _ = build_index(tmp_path / "idx", "m", write_corpus(tmp_path / "c.jsonl"), config, progress=False)
    recorded = index.config.encode.encoder_options()  # what search loads for its queries
    assert recorded == ({} if backend is None else {"backend": backend, "quantize": quantize})
    assert calls == [("m", recorded)]
    more = write_corpus(tmp_path / "more.jsonl", {"e": ("more", ["another sentence."])})
    _, _, added, _ = add_to_index(tmp_path / "idx", more, progress=False)
    assert added == 1 and calls[1] == ("m", recorded)


def test_an_index_built_by_the_api_with_a_recorded_precision_serves_its_own_queries(tmp_path, tiny_model_dir):
    # with encode.quantize=bf16 the exact float32 model encoded the papers and bf16 was recorded: opening the index
    # with its model (the recorded bf16) raised ModelMismatchError, and `add_to_index` could not grow it
    config = IndexBuildConfig(index=IndexConfig(kind="flat"), encode=EncodeConfig(backend="torch", quantize="bf16"))
    build_index(tmp_path / "idx", str(tiny_model_dir), write_corpus(tmp_path / "c.jsonl"), config, progress=False)
    searcher = Searcher.open(tmp_path / "idx", load_model=True)
    title, sentences = PAPERS["b"]
    query = searcher.query_from_paper(Paper("b", title, sentences))
    stored = np.asarray(searcher.index.vectors, dtype=np.float32)[searcher.index.offsets[1] : searcher.index.offsets[2]]
    np.testing.assert_array_equal(query.emb[0, : len(stored)].float().numpy(), stored)  # the index's encoding
    hits = searcher.search(query, k=3, exclude=[])
    assert hits[0].paper_id == "b" and hits[0].score == pytest.approx(0.0, abs=1e-3)
    more = write_corpus(tmp_path / "more.jsonl", {"e": ("more", ["another sentence."])})
    assert add_to_index(tmp_path / "idx", more, progress=False)[2] == 1


# ---------------------------------------------------------------- the command's text output


@pytest.fixture(scope="module")
def broken_lines_index(tmp_path_factory, tiny_model_dir):
    """Three papers, one titled across two lines and holding a sentence with a tab and a line break."""
    from aspire.index.__main__ import main as index_main

    root = tmp_path_factory.mktemp("lines")
    records = [{"paper_id": "p0", "title": "a model\nof text", "abstract": ["we propose\ta new\nmethod.", "data."]},
               {"paper_id": "p1", "title": "naïve résumé", "abstract": ["the data is scientific.", "results."]},
               {"paper_id": "p2", "title": "graph", "abstract": ["a neural network model."]}]
    corpus = root / "papers.jsonl"
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(root / "idx"),
                       "--quiet", "--backend", "torch"]) == 0
    return root / "idx"


def test_text_output_keeps_one_line_a_hit_for_a_title_with_a_line_break(broken_lines_index, capsys):
    capsys.readouterr()
    assert search_main(["--index", str(broken_lines_index), "--query-id", "p2", "--k", "2", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3, lines  # the query's line and one a hit: the title's line break made a fourth
    assert lines[0] == "query p2 sentences [0]"
    hit_lines = {line.split()[2]: line for line in lines[1:]}
    assert sorted(hit_lines) == ["p0", "p1"]
    assert hit_lines["p0"].endswith("  p0  a model of text") and hit_lines["p1"].endswith("  p1  naïve résumé")
    # --json keeps the fields as they are
    assert search_main(["--index", str(broken_lines_index), "--query-id", "p2", "--k", "2", "--json", "--quiet"]) == 0
    hits = {h["paper_id"]: h for h in json.loads(capsys.readouterr().out)["hits"]}
    assert hits["p0"]["title"] == "a model\nof text" and hits["p1"]["title"] == "naïve résumé"


def test_text_output_alignments_keep_each_sentence_on_its_line(broken_lines_index, capsys):
    capsys.readouterr()
    assert search_main(["--index", str(broken_lines_index), "--query-id", "p1", "--k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    hit = next(i for i, line in enumerate(lines) if line.split()[2:3] == ["p0"])
    block = lines[hit + 1 :]
    block = block[: next((i for i, line in enumerate(block) if line[:3].strip().rstrip(".").isdigit()), len(block))]
    assert len(block) % 3 == 0 and block, block  # per pair: the pair, its q: line, its s: line
    s_lines = [line.strip() for line in block[2::3]]
    assert all(line.startswith("s: ") for line in s_lines)
    assert "s: we propose a new method." in s_lines or "s: data." in s_lines
