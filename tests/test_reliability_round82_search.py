"""`aspire search` with a batch of queries says its answers' notes once, at its end.

Pinned defect: a batch of queries warned of each BM25 selection sharing no word with any paper, one line a query,
which floods stderr on a large batch (now one line at its end: how many, the first ids and the first note; the page
keeps its note on each answer).
"""

from __future__ import annotations

import json

import pytest
from serve_support import PAPERS, build_index

from aspire.cli.search import main as search_main
from aspire.data.papers import Paper
from aspire.encoders import load_encoder

STOP = Paper("z", "stop words", ["The of and it.", "we propose a new neural parser."], None)  # 0: stop words alone
NOTE = ("no paper shares a word of its text 'The of and it.' (stop words left out, excluded papers aside): BM25 "
        "scores every paper 0, its papers are the first in index order")


@pytest.fixture(scope="module")
def index(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("search82")
    return build_index(load_encoder(tiny_model_dir), [*PAPERS, STOP], root / "index", str(tiny_model_dir))


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
