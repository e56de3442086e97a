"""Search on one's own collection in batch (issue 45): k means k papers under BM25, an encoded query never
loses the indexed paper that shares its id, queries encode with the index's backend, a batch shows progress
and says its short searches once, --quiet is quiet, the maxpassage stage scores only its depth."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.cli.search import main as search_main
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SearchConfig, SentenceIndex
from aspire.search import Searcher


def word_corpus(n: int = 12) -> EncodedCorpus:
    """`n` one-sentence papers; only w0..w2 hold the word "parsing"."""
    rng = np.random.default_rng(0)
    texts = [[f"parsing of graphs number {i}."] if i < 3 else [f"speech signal {i}."] for i in range(n)]
    ids = [f"w{i}" for i in range(n)]
    offsets = np.arange(n + 1, dtype=np.int64)
    return EncodedCorpus(rng.standard_normal((n, 4)).astype(np.float32), offsets, ids, ids, texts)


def text_query(text: str) -> DocBatch:
    return DocBatch.from_list([torch.ones(1, 4)], ["q"], [[text]])


def test_bm25_alone_returns_k_papers_the_rest_tied_at_zero():
    searcher = Searcher(SentenceIndex.build(word_corpus(), IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))
    hits = searcher.search(text_query("parsing"), k=8, stages="bm25")
    assert len(hits) == 8  # the old stage returned the 3 papers holding the word
    assert {h.paper_id for h in hits[:3]} == {"w0", "w1", "w2"} and all(h.stages["bm25"] > 0 for h in hits[:3])
    assert [h.paper_id for h in hits[3:]] == ["w3", "w4", "w5", "w6", "w7"]  # the fill: index order, score 0
    assert all(h.stages["bm25"] == 0.0 for h in hits[3:])
    # more than the index holds: every paper once, no more
    assert len(searcher.search(text_query("parsing"), k=50, stages="bm25")) == 12


def build_index(tmp_path, model_dir, extra=()):
    """An index of ten papers built by `aspire index build` (`extra`: its backend flags): tmp_path/idx."""
    from aspire.index.__main__ import main as index_main

    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({
        "paper_id": f"p{i}", "title": f"a model of text {i}",
        "abstract": ["we propose a new method.", f"results {i} improve the task.", "the data is scientific."]}) + "\n"
        for i in range(10)))
    assert index_main(["build", "--model", str(model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "idx"),
                       "--quiet", *extra]) == 0
    return tmp_path / "idx"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir):
    return build_index(tmp_path_factory.mktemp("batch"), tiny_model_dir)


def paper_line(paper_id: str, i: int) -> str:
    return json.dumps({"paper_id": paper_id, "title": f"a model of text {i}",
                       "abstract": ["we propose a new method.", f"results {i} improve the task.",
                                    "the data is scientific."]})


def run_rows(path) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc, *_ = line.split()
        rows.setdefault(qid, []).append(doc)
    return rows


def test_an_encoded_query_keeps_the_indexed_paper_sharing_its_id(index_dir, tmp_path, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_text(paper_line("p3", 3) + "\np3\n")  # the same paper: encoded (JSON) and indexed (ID)
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--queries", str(queries), "--k", "10", "--json"]) == 0
    encoded, by_id = ([h["paper_id"] for h in json.loads(line)["hits"]] for line in capsys.readouterr().out.splitlines())
    assert "p3" in encoded and encoded[0] == "p3"  # its own text: the nearest paper, not silently dropped
    assert "p3" not in by_id and len(by_id) == 9  # an indexed paper as the query leaves itself out
    from aspire.cli.search import build_parser

    assert "encoded paper never leaves out anything" in " ".join(build_parser("aspire search").format_help().split())


def test_quiet_batch_with_a_run_file_prints_nothing_and_run_only_too(index_dir, tmp_path, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_text("p1\np2 0,1\n" + paper_line("new", 11) + "\n")
    for flag in ("--quiet", "--run-only"):
        run = tmp_path / f"{flag}.run"
        capsys.readouterr()
        assert search_main(["--index", str(index_dir), "--queries", str(queries), "--k", "4", "--run-out", str(run),
                            flag]) == 0
        assert capsys.readouterr().out == ""
        assert [len(v) for v in run_rows(run).values()] == [4, 4, 4]
    capsys.readouterr()  # --quiet without a run file: one line a hit, no alignments
    assert search_main(["--index", str(index_dir), "--query-id", "p1", "--k", "3", "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and not any("q:" in line or "<->" in line for line in out)


def test_batch_progress_on_stderr_with_rate_and_one_summary_of_short_searches(index_dir, tmp_path, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_text("p1\np2\np3\n")
    run = tmp_path / "b.run"
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--queries", str(queries), "--k", "20", "--run-out", str(run),
                        "--json"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"searched 3/3 queries in [\d.]+ s \([\d.]+ queries/s\)", err), err
    # k=20 of 9 other papers: one line for the batch, not one a query
    assert err.count("found fewer papers than asked") == 1 and "found 9 of the k=20" not in err
    assert "3 of 3 queries found fewer papers than asked (k=20; found 9 to 9)" in err
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--queries", str(queries), "--k", "20", "--run-out", str(run),
                        "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "searched" not in err and err.count("found fewer papers than asked") == 1


def test_progress_lines_give_rate_and_eta(capsys):
    from aspire.cli.search import Progress

    progress = Progress("searched", "queries", 3, every=0.0)
    for _ in range(3):
        progress.step()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2  # none after the first query (its time holds the model's loading): no rate yet
    assert re.fullmatch(r"searched 2/3 queries, [\d.]+ queries/s, ETA \d+ s", lines[0])
    assert lines[1].startswith("searched 3/3 queries in")


def test_search_takes_the_backend_the_index_was_built_with(tmp_path, tiny_model_dir, capsys):
    index = build_index(tmp_path, tiny_model_dir, ["--quantize", "bf16"])  # torch bf16: its own fingerprint
    query = tmp_path / "q.json"
    query.write_text(paper_line("new", 4) + "\n")
    capsys.readouterr()
    assert search_main(["--index", str(index), "--query-file", str(query), "--k", "3", "--json", "--quiet"]) == 0
    assert len(json.loads(capsys.readouterr().out)["hits"]) == 3
    assert SentenceIndex.load(index).config.encode.quantize == "bf16"  # recorded, in the saved config
    # another precision asked for: the message names backend and precision of both, not only the model
    assert search_main(["--index", str(index), "--query-file", str(query), "--backend", "torch", "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "backend torch bf16" in err and "backend torch fp32" in err and "leave out --backend/--quantize to use the index's" in err


def test_no_bm25s_debug_line_at_the_default_log_level(tmp_path, tiny_model_dir, capsys, caplog):
    caplog.set_level(logging.WARNING)
    capsys.readouterr()
    build_index(tmp_path, tiny_model_dir, ["--log-level", "INFO"])
    assert "bm25s" not in capsys.readouterr().err


def test_index_build_progress_moves_every_few_batches():
    from aspire.data.papers import Paper
    from aspire.index.config import EncodeConfig
    from aspire.index.corpus import encode_corpus

    calls = []

    class Encoder:
        dim = 4

        def encode(self, papers, batch_size=32, progress=False):
            calls.append(len(papers))
            return DocBatch.from_list([torch.ones(len(p.sentences), 4) for p in papers], [p.paper_id for p in papers],
                                      [p.sentences for p in papers])

    papers = [Paper(f"p{i}", "t", [f"sentence {i}."]) for i in range(50)]
    corpus = encode_corpus(Encoder(), papers, EncodeConfig(batch_size=2, chunk_papers=1024), progress=False)
    assert corpus.paper_ids == [p.paper_id for p in papers]
    assert max(calls) == 8 and sum(calls) == 50  # 4 batches of 2 a call, not the whole 1,024-paper chunk


def test_maxpassage_scores_only_its_depth_and_keeps_the_rest_in_first_stage_order(monkeypatch):
    from aspire.retrieval import rerank as rerank_module

    rng = np.random.default_rng(1)
    n = 150
    counts = rng.integers(1, 5, n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    ids = [f"r{i}" for i in range(n)]
    corpus = EncodedCorpus(rng.standard_normal((int(offsets[-1]), 4)).astype(np.float32), offsets, ids, ids,
                           [[f"s{j}" for j in range(c)] for c in counts])
    searcher = Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"),
                        SearchConfig())  # passage_depth 100
    scored = []
    stage = rerank_module.RERANK_STAGES["maxpassage"]
    monkeypatch.setitem(rerank_module.RERANK_STAGES, "maxpassage",
                        lambda s, q, papers, cfg: (scored.append(len(papers)), stage(s, q, papers, cfg))[1])
    query = DocBatch.from_list([torch.from_numpy(rng.standard_normal((2, 4)).astype(np.float32))], ["q"], [["a", "b"]])
    hits = searcher.search(query, k=120, rerank="maxpassage", shortlist=150)
    assert scored == [100]  # the old stage scored the whole shortlist of 150
    first = [h.paper_id for h in searcher.search(query, k=150)]
    assert {h.paper_id for h in hits[:100]} == set(first[:100]) and all("maxpassage" in h.stages for h in hits[:100])
    assert [h.paper_id for h in hits[100:]] == first[100:120] and all("maxpassage" not in h.stages for h in hits[100:])
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_the_python_api_opens_an_index_with_its_recorded_backend(tmp_path, tiny_model_dir):
    index = build_index(tmp_path, tiny_model_dir, ["--quantize", "bf16"])
    searcher = Searcher.open(index, load_model=True)  # the old default loaded the exact model: ModelMismatchError
    hits = searcher.search(searcher.query_from_paper(_paper(4)), k=3)
    assert len(hits) == 3


def _paper(i: int):
    from aspire.data.papers import Paper

    return Paper("new", f"a model of text {i}", ["we propose a new method.", f"results {i} improve the task."])


def test_search_runs_its_queries_on_one_thread_unless_told(index_dir, monkeypatch, capsys):
    """On shared cores, spin-waiting threads made one-sentence encodes 5x slower (search_batch.md): 1 by default."""
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        torch.set_num_threads(2)
        assert search_main(["--index", str(index_dir), "--query-id", "p1", "--k", "2", "--quiet"]) == 0
        assert torch.get_num_threads() == 1
        assert search_main(["--index", str(index_dir), "--query-id", "p1", "--k", "2", "--quiet", "--threads", "2"]) == 0
        assert torch.get_num_threads() == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's own setting is kept
        torch.set_num_threads(1)
        assert search_main(["--index", str(index_dir), "--query-id", "p1", "--k", "2", "--quiet"]) == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_index_add_takes_the_backend_the_index_was_built_with(tmp_path, tiny_model_dir, capsys):
    from aspire.index.__main__ import main as index_main

    index = build_index(tmp_path, tiny_model_dir, ["--quantize", "bf16"])
    more = tmp_path / "more.jsonl"
    more.write_text(paper_line("p20", 20) + "\n")
    assert index_main(["add", "--index", str(index), "--corpus", str(more), "--quiet"]) == 0  # old: model mismatch
    assert SentenceIndex.load(index).n_papers == 11
    more.write_text(paper_line("p21", 21) + "\n")
    capsys.readouterr()
    assert index_main(["add", "--index", str(index), "--corpus", str(more), "--backend", "torch", "--quiet"]) == 2
    assert "the index was built with model" in capsys.readouterr().err
