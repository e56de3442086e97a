"""Search semantics and its command line: k means k papers, facets by name from the labels the index
keeps, batch queries from a file, TREC run files, the interactive loop."""

from __future__ import annotations

import io
import json
import logging

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.cli.search import main as search_main
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SearchConfig, SentenceIndex
from aspire.search import Searcher


def crowded_corpus(n_far: int = 20) -> EncodedCorpus:
    """Three papers whose 10 sentences each crowd around e0, and `n_far` one-sentence papers further out."""
    rng = np.random.default_rng(0)
    vectors, ids = [], []
    for p in range(3):
        vectors += [np.eye(4)[0] + 0.01 * rng.standard_normal(4) for _ in range(10)]
        ids.append(f"near{p}")
    for p in range(n_far):
        vectors.append(np.eye(4)[0] * (2.0 + 0.1 * p))
        ids.append(f"far{p}")
    counts = [10, 10, 10] + [1] * n_far
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    sentences = [[f"{pid} s{j}" for j in range(c)] for pid, c in zip(ids, counts)]
    return EncodedCorpus(np.array(vectors, dtype=np.float32), offsets, ids, ids, sentences)


def e0_query() -> DocBatch:
    return DocBatch.from_list([torch.tensor([[1.0, 0, 0, 0]])], ["query"], [["q"]])


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_k_means_k_papers_even_when_neighbours_crowd_into_few_papers(kind):
    index = SentenceIndex.build(crowded_corpus(), IndexBuildConfig(index=IndexConfig(kind=kind)), "fp")
    # 5 sentence neighbours per lookup: all fall in the three crowded papers unless the search widens
    searcher = Searcher(index, SearchConfig(k=8, sentence_k_min=1, sentence_k_factor=0.5))
    hits = searcher.search(e0_query())
    assert len(hits) == 8
    top, _ = searcher.exhaustive(e0_query(), "minl2", k=8)
    assert [h.paper_id for h in hits] == [index.paper_ids[p] for p in top]
    reranked = searcher.search(e0_query(), k=6, rerank="minl2", shortlist=12)
    assert len(reranked) == 6


def test_an_exhausted_corpus_returns_what_it_has_and_says_why(caplog):
    index = SentenceIndex.build(crowded_corpus(n_far=4), IndexBuildConfig(index=IndexConfig(kind="flat")), "fp")
    searcher = Searcher(index, SearchConfig(k=50, sentence_k_min=1))
    with caplog.at_level(logging.WARNING, logger="aspire.search"):
        hits = searcher.search(e0_query())
    assert len(hits) == 7
    assert "found 7 of the k=50 papers" in caplog.text and "holds 7 paper(s)" in caplog.text


def labelled_corpus() -> EncodedCorpus:
    vectors = np.eye(6, dtype=np.float32)[[0, 1, 2, 3, 4, 5]]
    offsets = np.array([0, 3, 5, 6])
    labels = [["background_label", "method_label", "result_label"], ["objective_label", "method_label"], None]
    return EncodedCorpus(vectors, offsets, ["A", "B", "C"], ["a", "b", "c"],
                         [["a0", "a1", "a2"], ["b0", "b1"], ["c0"]], labels=labels)


def test_index_keeps_labels_and_search_selects_sentences_by_facet(tmp_path):
    index = SentenceIndex.build(labelled_corpus(), IndexBuildConfig(index=IndexConfig(kind="flat")), "fp")
    index.save(tmp_path / "idx")
    loaded = SentenceIndex.load(tmp_path / "idx")
    assert loaded.labels == labelled_corpus().labels
    searcher = Searcher(loaded)
    assert searcher.query_from_index("A", "method").mask[0].tolist() == [False, True, False]
    assert searcher.query_from_index("B", "background").mask[0].tolist() == [True, False]  # objective = background
    assert searcher.query_from_index("A", "result,0").mask[0].tolist() == [True, False, True]
    assert searcher.query_from_index("A", ["method_label"]).mask[0].tolist() == [False, True, False]
    with pytest.raises(ValueError, match="paper 'B' has no 'result' sentence; its labels: method_label, objective"):
        searcher.query_from_index("B", "result")
    with pytest.raises(ValueError, match="paper 'C' has no facet labels"):
        searcher.query_from_index("C", "method")
    loaded.add(labelled_corpus().subset([0]), "fp")  # a duplicate: rejected, labels stay aligned
    assert len(loaded.labels) == loaded.n_papers == 3


def build_index_from(root, model_dir, records):
    """An index of `records` (paper records, one a line of root/papers.jsonl) built by `aspire index build` with
    `model_dir`: root/idx."""
    from aspire.index.__main__ import main as index_main

    corpus = root / "papers.jsonl"
    corpus.write_text("".join(json.dumps(record) + "\n" for record in records))
    assert index_main(["build", "--model", str(model_dir), "--corpus", str(corpus), "--out", str(root / "idx"),
                       "--quiet"]) == 0
    return root / "idx"


def build_labelled_index(root, model_dir):
    """An index of eight labelled papers built by `aspire index build` with `model_dir`: root/idx."""
    return build_index_from(root, model_dir, [{
        "paper_id": f"p{i}", "title": "a model of text",
        "abstract": ["we propose a new method.", f"results {i} improve the task.", "the data is scientific."],
        "pred_labels": ["background_label", "result_label", "method_label"]} for i in range(8)])


@pytest.fixture(scope="module")
def cli_index(tmp_path_factory, tiny_model_dir):
    return build_labelled_index(tmp_path_factory.mktemp("search-cli"), tiny_model_dir)


def test_cli_sentences_by_facet_name(cli_index, capsys):
    capsys.readouterr()
    assert search_main(["--index", str(cli_index), "--query-id", "p2", "--sentences", "method,result", "--k", "3",
                        "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["query_sentences"] == [1, 2] and len(out["hits"]) == 3


def test_cli_batch_queries_and_trec_run_file(cli_index, tmp_path, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_text("# indexed papers\np1 method\n\np2 0,1\n"
                       + json.dumps({"paper_id": "new", "title": "t", "abstract": ["the data is new."]}) + "\n")
    run = tmp_path / "out" / "search.run"
    capsys.readouterr()
    assert search_main(["--index", str(cli_index), "--queries", str(queries), "--k", "4", "--json",
                        "--run-out", str(run), "--run-tag", "tiny", "--quiet"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(x["query_id"], x["query_sentences"]) for x in lines] == [("p1", [2]), ("p2", [0, 1]), ("new", [0])]
    rows = [line.split() for line in run.read_text().splitlines()]
    assert len(rows) == 12 and all(len(r) == 6 and r[1] == "Q0" and r[5] == "tiny" for r in rows)
    p1 = [r for r in rows if r[0] == "p1"]
    assert [int(r[3]) for r in p1] == [1, 2, 3, 4] and "p1" not in [r[2] for r in p1]
    scores = [float(r[4]) for r in p1]
    assert scores == sorted(scores, reverse=True)
    assert [r[2] for r in p1] == [h["paper_id"] for h in lines[0]["hits"]]


def test_cli_query_lines_saved_with_a_byte_order_mark_tabs_and_crlf(cli_index, tmp_path, capsys):
    """A byte-order mark once made line 1 ask for paper '\ufeffp1'; a tab once joined the selection to the id."""
    queries = tmp_path / "queries.txt"
    queries.write_bytes("\ufeffp1 method\r\np2\t0,1\r\n".encode("utf-8"))
    capsys.readouterr()
    assert search_main(["--index", str(cli_index), "--queries", str(queries), "--k", "2", "--json", "--quiet"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(x["query_id"], x["query_sentences"]) for x in lines] == [("p1", [2]), ("p2", [0, 1])]


def test_cli_bad_query_line_names_file_and_line(cli_index, tmp_path, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_text("p1\np99 method\n")
    capsys.readouterr()
    assert search_main(["--index", str(cli_index), "--queries", str(queries), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {queries}:2: paper 'p99' is not in the index (8 papers)\n"
    assert captured.out == ""  # nothing is searched before every query is read


def test_cli_interactive_answers_each_line_and_survives_errors(cli_index, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("p1\nnope\np3 result\n\n"))
    capsys.readouterr()
    assert search_main(["--index", str(cli_index), "--interactive", "--k", "2", "--json", "--quiet"]) == 1
    captured = capsys.readouterr()
    answers = [json.loads(line) for line in captured.out.splitlines()]
    assert [(a["query_id"], a["query_sentences"], len(a["hits"])) for a in answers] == [
        ("p1", [0, 1, 2], 2), ("p3", [1], 2)]
    assert captured.err == "error: stdin line 2: paper 'nope' is not in the index (8 papers)\n"


def test_cli_run_file_refuses_a_query_id_twice_rather_than_merge_two_rankings(cli_index, tmp_path, monkeypatch,
                                                                               capsys):
    """Two selections of one paper are two rankings under one qid: a TREC run would merge them into one."""
    queries = tmp_path / "queries.txt"
    queries.write_text("p1 0\np2\np1 1,2\n")
    run = tmp_path / "search.run"
    capsys.readouterr()
    assert search_main(["--index", str(cli_index), "--queries", str(queries), "--run-out", str(run), "--quiet"]) == 2
    assert capsys.readouterr().err == (f"error: {queries}:3: query id 'p1' again (first at line 1): the run file "
                                       "(--run-out) holds one ranking a query id; write each selection of a "
                                       "paper's sentences to a run of its own\n")
    assert not run.exists()
    # printed, not written to a run: both selections are answered
    assert search_main(["--index", str(cli_index), "--queries", str(queries), "--k", "2", "--json", "--quiet"]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(a["query_id"], a["query_sentences"]) for a in answers] == [("p1", [0]), ("p2", [0, 1, 2]), ("p1", [1, 2])]
    # interactive: the repeat is an error for its line, a failed query does not count, the run holds each id once
    monkeypatch.setattr("sys.stdin", io.StringIO("p1 0\np1 1\np3 9\np3 1\np3 0\n"))
    assert search_main(["--index", str(cli_index), "--interactive", "--k", "2", "--run-out", str(run), "--quiet"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err] == ["error"] * 3
    assert "'p1' again (first at stdin line 1)" in err[0] and "'p3' again (first at stdin line 4)" in err[2], err
    assert sorted({row.split()[0] for row in run.read_text().splitlines()}) == ["p1", "p3"]
    assert len(run.read_text().splitlines()) == 4


def test_cli_needs_exactly_one_kind_of_query(cli_index, capsys):
    for argv in ([], ["--query-id", "p1", "--interactive"], ["--queries", "q.txt", "--query-id", "p1"]):
        with pytest.raises(SystemExit) as exc:
            search_main(["--index", str(cli_index), *argv])
        assert exc.value.code == 2
        assert "give one kind of query" in capsys.readouterr().err


def test_exhaustive_search_over_a_memory_mapped_index_warns_nothing(tmp_path):
    import warnings

    SentenceIndex.build(crowded_corpus(), IndexBuildConfig(index=IndexConfig(kind="flat")), "fp").save(tmp_path / "i")
    searcher = Searcher(SentenceIndex.load(tmp_path / "i"))  # vectors: a read-only memory map
    assert isinstance(searcher.index.vectors, np.memmap)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        papers, _ = searcher.exhaustive(e0_query(), "minl2", k=3)
    assert len(papers) == 3


def test_the_page_service_uses_the_labels_the_index_keeps(cli_index):
    from aspire.serve import open_service

    service = open_service(cli_index)
    assert len(service.labels) == 8
    assert service.labels["p0"] == ["background_label", "result_label", "method_label"]
