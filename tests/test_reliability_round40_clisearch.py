"""Round 40: `aspire search` (aspire/cli/search.py) against the Python `Searcher` on the same queries, its query
files (a byte-order mark, a JSON array), and --query-side refused before any model loads."""

from __future__ import annotations

import io
import json

import pytest

from aspire.cli.search import main as search_main
from aspire.cli.search import read_query_papers
from aspire.data.papers import paper_from_record
from tests.test_search_cli import build_labelled_index

PAPER = {"paper_id": "p2", "title": "a model of text",  # an indexed paper's id, given as text: excludes nothing
         "abstract": ["we propose a new method.", "results 2 improve the task.", "the data is scientific."]}


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir):
    return build_labelled_index(tmp_path_factory.mktemp("r40-clisearch"), tiny_model_dir)


def test_a_query_file_answers_as_the_searcher_does_one_per_query_in_order(index_dir, tiny_model_dir, monkeypatch,
                                                                          capsys):
    from aspire.encoders import load_encoder
    from aspire.search import Searcher

    monkeypatch.setattr("sys.stdin", io.StringIO("p1 method\n# skipped\n\n" + json.dumps(PAPER) + "\np3\n"))
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--queries", "-", "--k", "8", "--json", "--quiet"]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    searcher = Searcher.open(index_dir)
    searcher.encoder = load_encoder(str(tiny_model_dir))
    direct = [searcher.search(searcher.query_from_index("p1", "method"), k=8),
              searcher.search(searcher.query_from_paper(paper_from_record(PAPER), None), k=8, exclude=[]),
              searcher.search(searcher.query_from_index("p3", None), k=8)]
    assert [a["query_id"] for a in answers] == ["p1", "p2", "p3"]
    for answer, hits in zip(answers, direct):
        assert [(h["paper_id"], h["rank"], h["score"]) for h in answer["hits"]] == [
            (h.paper_id, h.rank, h.score) for h in hits]
    # an indexed paper by id leaves itself out (7 of 8 papers); the same paper given as text does not
    assert len(answers[0]["hits"]) == 7 and "p1" not in [h["paper_id"] for h in answers[0]["hits"]]
    assert len(answers[1]["hits"]) == 8 and "p2" in [h["paper_id"] for h in answers[1]["hits"]]


def test_a_pretty_printed_query_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    """A BOM once made a pretty-printed paper fail to parse whole, and the line reader then called its line 1 (`{`)
    invalid JSON; a JSONL file with a BOM was read."""
    plain, marked = tmp_path / "plain.json", tmp_path / "marked.json"
    plain.write_text(json.dumps(PAPER, indent=2), encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert read_query_papers(marked) == read_query_papers(plain) == [paper_from_record(PAPER)]


def test_a_json_array_query_file_is_refused_saying_so(tmp_path):
    """A pretty-printed array of papers was once refused as `:1: invalid JSON: Expecting value (column 1)`."""
    path = tmp_path / "papers.json"
    path.write_text(json.dumps([PAPER], indent=2))
    with pytest.raises(ValueError, match=r"papers\.json: a JSON array of papers: give one paper a line \(JSONL\)"):
        read_query_papers(path)


def test_query_side_without_a_query_adapter_is_refused_before_the_cross_encoder_loads(index_dir, tmp_path,
                                                                                       monkeypatch, capsys):
    loaded = []
    monkeypatch.setattr("aspire.retrieval.crossencoder.load_cross_stage", lambda *a, **k: loaded.append(a))
    cross = tmp_path / "cross"
    cross.mkdir()
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--query-id", "p1", "--query-side", "--cross-encoder",
                        str(cross), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--query-side:" in err and "has no query adapter" in err, err
    assert loaded == []
