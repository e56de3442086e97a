"""`aspire search` and the int8 build: a typed `-0` is refused, a batch says its notes once, ONNX Runtime's advice
is not printed.

Pinned defects: `--sentences -0` (and a query line `ID 1,-0`) read as sentence 0, as Python's int('-0') is 0, where
every other negative position is refused; a batch of queries warned of each BM25 selection sharing no word with any
paper, one line a query, which floods stderr on a large batch (now one line at its end: how many, the first ids and
the first note; the page keeps its note on each answer); `aspire encode --backend onnx --quantize int8 --quiet`
printed ONNX Runtime's advice to pre-process the graph before quantizing it, which the recipe's fusion stands for.
"""

from __future__ import annotations

import json
import logging
import re

import pytest
from serve_support import PAPERS, build_index

from aspire.cli.encode import main as encode_main
from aspire.cli.search import main as search_main
from aspire.data.facets import parse_selection
from aspire.data.papers import Paper
from aspire.encoders import load_encoder, onnx_int8
from aspire.search import Searcher

STOP = Paper("z", "stop words", ["The of and it.", "we propose a new neural parser."], None)  # 0: stop words alone
NOTE = ("no paper shares a word of its text 'The of and it.' (stop words left out, excluded papers aside): BM25 "
        "scores every paper 0, its papers are the first in index order")


@pytest.fixture(scope="module")
def index(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("search82")
    return build_index(load_encoder(tiny_model_dir), [*PAPERS, STOP], root / "index", str(tiny_model_dir))


# ---- a typed -0 ------------------------------------------------------------------------------------------------------
MINUS_ZERO = "'-0' is no 0-based position (no position is negative; the first sentence is 0)"


@pytest.mark.parametrize("given", ["-0", "1,-0", " -00 "])
def test_minus_zero_is_refused_by_the_selection_parser(given):
    with pytest.raises(ValueError, match=re.escape(f"sentence selection {given!r} for paper 'q': "
                                                   f"{given.split(',')[-1].strip()!r} is no 0-based position")):
        parse_selection(given, "q")
    assert parse_selection("0,-1,method") == [0, -1, "method"]  # -1 is left to the range check, which refuses it


def test_search_refuses_minus_zero_naming_the_option_and_the_line(index, tmp_path, capsys):
    # once: `--sentences -0` answered with sentence 0's neighbours, exit 0
    assert search_main(["--index", str(index), "--query-id", "q", "--sentences", "-0", "--k", "2", "--quiet"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.strip().splitlines()[-1] == f"error: --sentences: sentence selection '-0': {MINUS_ZERO}"
    queries = tmp_path / "queries.txt"
    queries.write_text("a 0\nq 1,-0\n")
    assert search_main(["--index", str(index), "--queries", str(queries), "--k", "2", "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (f"error: {queries}:2: sentence selection '1,-0': "
                                                               f"{MINUS_ZERO}")
    searcher = Searcher.open(index)
    with pytest.raises(ValueError, match=re.escape(MINUS_ZERO)):
        searcher.query_from_index("q", "-0")
    assert search_main(["--index", str(index), "--query-id", "q", "--sentences", "0", "--k", "2", "--quiet"]) == 0


# ---- a batch's notes -------------------------------------------------------------------------------------------------
def stop_line(paper_id: str) -> str:
    """A paper to encode whose one sentence holds stop words alone (BM25 shares no word of it with any paper)."""
    return json.dumps({"paper_id": paper_id, "title": "stop words", "abstract": ["The of and it."]})


def test_a_batch_says_its_notes_once_at_its_end(index, tmp_path, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_text("\n".join(["z 0", "q 1", *(stop_line(f"n{i}") for i in range(1, 7))]) + "\n")
    assert search_main(["--index", str(index), "--queries", str(queries), "--stages", "bm25", "--rerank", "none",
                        "--k", "2", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "shares a word" in err and err.count("shares a word") == 1, err  # once a warning a query: 7 lines
    summary = [line for line in err.splitlines() if "shares a word" in line]
    assert summary == [f"WARNING aspire.cli.search: 7 of 8 queries' answers come with a note (queries 'z', 'n1', 'n2', "
                       f"'n3', 'n4' and 2 more; --log-level DEBUG says each), the first: query 'z': {NOTE}"]
    # each is still there at DEBUG
    assert search_main(["--index", str(index), "--queries", str(queries), "--stages", "bm25", "--rerank", "none",
                        "--k", "2", "--log-level", "DEBUG"]) == 0
    err = capsys.readouterr().err
    assert [f"query 'n{i}'" in err for i in range(1, 7)] == [True] * 6


def test_one_query_still_warns_of_its_note(index, capsys):
    assert search_main(["--index", str(index), "--query-id", "z", "--sentences", "0", "--stages", "bm25",
                        "--rerank", "none", "--k", "2", "--quiet"]) == 0
    assert f"WARNING aspire.search: query 'z': {NOTE}" in capsys.readouterr().err.splitlines()


# ---- ONNX Runtime's pre-processing advice ----------------------------------------------------------------------------
def test_the_advice_alone_is_dropped_while_quantizing(caplog):
    advice = ("Please consider to run pre-processing before quantization. Refer to example: ...",
              "Please consider pre-processing before quantization. See ...")
    with caplog.at_level(logging.WARNING), onnx_int8.without_preprocess_advice():
        for text in advice:
            logging.getLogger().warning(text)
        logging.getLogger().warning("Please consider something else")  # ONNX Runtime's other warnings pass
        logging.getLogger("aspire.x").warning("Please consider to run pre-processing before quantization")
    assert [r.getMessage() for r in caplog.records] == ["Please consider something else",
                                                        "Please consider to run pre-processing before quantization"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        logging.getLogger().warning(advice[0])  # outside the block: as before
    assert [r.getMessage() for r in caplog.records] == [advice[0]]


def test_an_int8_encode_under_quiet_prints_no_advice(tiny_model_dir, cache, tmp_path, capsys):
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": p.paper_id, "title": p.title, "abstract": p.sentences}) + "\n"
                              for p in PAPERS))
    assert encode_main(["--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "enc"),
                        "--backend", "onnx", "--quantize", "int8", "--quiet"]) == 0
    assert list(cache.glob("onnx/*int8*.onnx"))  # quantized here, not read from a cache
    err = capsys.readouterr().err
    assert "pre-processing" not in err, err
