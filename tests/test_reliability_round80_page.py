"""Round 80: the page says what `aspire search` warns of, and `evaluate compare --out FOLDER` is refused as a folder.

Pinned defects: a lexical-only search on the page (`stages: "bm25"`) whose selection shares no word with any paper
was answered with k papers in index order, every one scored 0, and no `note` (the command line warns of it); the
fused list was then the ANN stage's alone, also unsaid on the page. `evaluate compare --out DIR`, DIR a folder
holding one of the inputs, was refused as "would overwrite this command's input DIR/qrels.txt", not as a folder.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from serve_support import PAPERS, build_index, request, running

from aspire.data.papers import Paper
from aspire.encoders import load_encoder
from aspire.serve import open_service

STOP = Paper("z", "stop words", ["The of and it.", "we propose a neural parser."], None)  # sentence 0: stop words alone


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("page")
    index_dir = build_index(load_encoder(tiny_model_dir), [*PAPERS, STOP], root / "index", str(tiny_model_dir))
    service = open_service(index_dir, ["rerank=none", "k=3"])
    with running(service) as srv:
        yield srv, service


def _search(srv, body: dict) -> dict:
    status, _, raw = request(srv, "POST", "/api/search", body)
    assert status == 200, raw
    return json.loads(raw)


@pytest.mark.parametrize("stages, tail", [("bm25", "its papers are the first in index order"),
                                          ("ann,bm25", "the fused list is the other stage's alone")])
def test_a_selection_sharing_no_word_is_said_in_the_answers_note(server, stages, tail, caplog):
    srv, service = server
    with caplog.at_level(logging.WARNING, logger="aspire"):
        out = _search(srv, {"paper_id": "z", "sentences": [0], "stages": stages})
    assert len(out["hits"]) == 3
    if stages == "bm25":  # index order, every paper 0: what the note is there to say
        assert [h["paper_id"] for h in out["hits"]] == ["q", "a", "b"] and {h["score"] for h in out["hits"]} == {0.0}
    assert out["note"] == ("query 'z': no paper shares a word of its text 'The of and it.' (stop words left out, "
                           f"excluded papers aside): BM25 scores every paper 0, {tail}")
    assert "shares a word" not in caplog.text  # said to the page's reader, not (as well) to the server's log
    assert service.searcher.notes is None  # the searcher warns again for its other callers


def test_a_selection_sharing_a_word_has_no_note(server):
    srv, _ = server
    out = _search(srv, {"paper_id": "z", "sentences": [1], "stages": "bm25"})
    assert out["note"] is None and out["hits"][0]["score"] > 0


def test_a_short_answer_says_both(server):
    srv, _ = server
    out = _search(srv, {"paper_id": "z", "sentences": [0], "stages": "bm25", "k": 50})
    assert out["note"].startswith("the index holds only 5 other papers; query 'z': no paper shares a word")


def test_the_command_line_still_warns(server, caplog):
    _, service = server
    searcher = service.searcher
    with caplog.at_level(logging.WARNING, logger="aspire"):
        searcher.search(searcher.query_from_index("z", [0]), stages="bm25")
    assert "query 'z': no paper shares a word of its text 'The of and it.'" in caplog.text


# ---- evaluate compare --out FOLDER ----------------------------------------------------------------------------------
def test_compare_out_a_folder_holding_an_input_is_refused_as_a_folder(tmp_path, capsys):
    from aspire.cli.evaluate import main

    d = tmp_path / "d"
    d.mkdir()
    (d / "qrels.txt").write_text("q1 0 d1 1\nq1 0 d2 0\n")
    (d / "a.trec").write_text("q1 Q0 d1 1 2.0 a\nq1 Q0 d2 2 1.0 a\n")
    (d / "b.trec").write_text("q1 Q0 d2 1 2.0 b\nq1 Q0 d1 2 1.0 b\n")
    before = sorted(p.name for p in d.iterdir())
    args = ["compare", str(d / "a.trec"), str(d / "b.trec"), "--qrels", str(d / "qrels.txt"), "--permutations", "10"]
    assert main([*args, "--out", str(d)]) == 2
    err = capsys.readouterr().err
    assert f"--out {d} is a folder; compare writes one JSON file" in err and "would overwrite" not in err
    assert sorted(p.name for p in d.iterdir()) == before
    assert main([*args, "--out", str(d / "qrels.txt")]) == 2  # an input file itself: still refused as the input
    assert f"would overwrite this command's input {d / 'qrels.txt'}" in capsys.readouterr().err
    assert main([*args, "--out", str(Path(d, "cmp.json"))]) == 0 and (d / "cmp.json").is_file()
