"""`aspire search` and the page's request / reload layer, round 30 (correctness).

Fixed: `requests.check` described a body that is no JSON object by Python's type name ("got NoneType" for `null`,
"got list" for an array) where the client sent JSON. Checked as they are: the command's hits equal a brute-force
min-L2 ranking of the stored vectors; its JSON, text and run-file outputs say the same ranking; a selection out of
range, empty or with an empty item is refused naming the paper, repeats are merged; a wrong path or key is refused
before torch and faiss load; a reload that fails leaves the old generation served, and a later one picks up the
fixed index."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from aspire.cli.search import main as search_main
from aspire.serve.requests import PapersQuery, RequestError, SearchBody, check, parse_json
from tests.test_search_cli import build_index_from

WORDS = ["we propose a new neural parser.", "the data is scientific text.", "results improve the task.",
         "citation sentences in a paper.", "a model of document similarity.", "learning language models.",
         "an approach based on aspect.", "performance of state of the art methods."]


def build_index(root, model_dir):
    """An index of eight papers of different sentences (2 to 4 each), built by `aspire index build`."""
    return build_index_from(root, model_dir, [
        {"paper_id": f"p{i}", "title": f"title {i}", "abstract": [WORDS[(i * 3 + j) % len(WORDS)] for j in range(2 + i % 3)]}
        for i in range(8)])


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir):
    return build_index(tmp_path_factory.mktemp("r30-search"), tiny_model_dir)


# ---- fixed: a body that is no JSON object is described in JSON's words ----------------------------------------

@pytest.mark.parametrize("raw, word, python", [
    (b"null", "null", "NoneType"), (b"[1, 2]", "array", "list"), (b'"x"', "string", "str"),
    (b"3", "number", "int"), (b"2.5", "number", "float"), (b"true", "true", "bool"),
])
def test_a_body_that_is_no_object_is_named_by_its_json_kind(raw, word, python):
    with pytest.raises(RequestError) as err:
        check(SearchBody, parse_json(raw))
    assert err.value.status == 400
    assert err.value.message.startswith("the request must be a JSON object, got")
    said = err.value.message.removeprefix("the request must be a JSON object, got ")
    assert word in said.split() and python not in said.split()


def test_an_object_body_is_still_checked_field_by_field():
    assert check(SearchBody, parse_json(b'{"paper_id": "q", "sentences": [0, 2]}')).sentences == [0, 2]
    with pytest.raises(RequestError, match="empty selection"):
        check(SearchBody, {"paper_id": "q", "sentences": []})
    with pytest.raises(RequestError, match=r"limit must be an integer in 1\.\.100; got '0'"):
        check(PapersQuery, {"limit": "0"})


# ---- checked: hits equal a brute-force ranking; the outputs agree --------------------------------------------

def brute_force(index_dir, query_id: str, selected: list[int]) -> list[tuple[str, float]]:
    """(paper id, -min L2 distance) of every other paper, best first, from the stored vectors."""
    from aspire.index import SentenceIndex

    index = SentenceIndex.load(index_dir)
    q = index.gather([index.position(query_id)])
    qv = q.emb[0][selected].double()
    out = []
    for pid in index.paper_ids:
        if pid == query_id:
            continue
        d = index.gather([index.position(pid)])
        dv = d.emb[0][d.mask[0]].double()
        out.append((pid, -float(torch.cdist(qv, dv).min())))
    return sorted(out, key=lambda x: -x[1])


@pytest.mark.parametrize("rerank", ["none", "minl2"])
def test_cli_hits_equal_a_brute_force_min_l2_ranking(index_dir, capsys, rerank):
    capsys.readouterr()
    argv = ["--index", str(index_dir), "--query-id", "p5", "--sentences", "0,2", "--k", "7", "--json", "--quiet",
            "--rerank", rerank] + (["--shortlist", "7"] if rerank != "none" else [])
    assert search_main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["query_id"] == "p5" and out["query_sentences"] == [0, 2]
    expected = brute_force(index_dir, "p5", [0, 2])
    assert [h["paper_id"] for h in out["hits"]] == [pid for pid, _ in expected]
    np.testing.assert_allclose([h["score"] for h in out["hits"]], [s for _, s in expected], rtol=1e-4, atol=1e-5)
    assert [h["rank"] for h in out["hits"]] == list(range(1, 8))
    for hit in out["hits"]:  # the best pair's distance is the score, and its sentence one of those selected
        assert hit["pairs"][0]["query_sentence"] in (0, 2)
        assert hit["pairs"][0]["dist"] == pytest.approx(-hit["score"], rel=1e-4, abs=1e-5)


def test_json_text_and_run_file_say_the_same_ranking(index_dir, tmp_path, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_text("p1 0\np3\n# a comment\n\np6 1,0\n")
    run = tmp_path / "out.run"
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--queries", str(queries), "--k", "4", "--json", "--quiet",
                        "--run-out", str(run), "--run-tag", "r30"]) == 0
    lines = capsys.readouterr().out.splitlines()
    answers = [json.loads(line) for line in lines]  # one JSON object a line with many queries
    assert [a["query_id"] for a in answers] == ["p1", "p3", "p6"]
    assert [a["query_sentences"] for a in answers][0] == [0] and answers[2]["query_sentences"] == [0, 1]
    from_json = [(a["query_id"], h["paper_id"], h["rank"], h["score"]) for a in answers for h in a["hits"]]
    from_run = [(q, d, int(r), float(s)) for q, q0, d, r, s, tag in (line.split() for line in
                                                                      run.read_text().splitlines())]
    assert from_run == from_json  # the score's text reads back as the same float
    assert {line.split()[1] for line in run.read_text().splitlines()} == {"Q0"}
    assert {line.split()[5] for line in run.read_text().splitlines()} == {"r30"}
    assert search_main(["--index", str(index_dir), "--query-id", "p6", "--sentences", "1,0", "--k", "4"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "query p6 sentences [0, 1]"
    hit_lines = [line for line in text if line[:3].strip().isdigit()]
    got = [(int(line.split(".")[0]), line.split()[2], float(line.split()[1])) for line in hit_lines]
    assert [(r, pid) for r, pid, _ in got] == [(h["rank"], h["paper_id"]) for h in answers[2]["hits"]]
    np.testing.assert_allclose([s for _, _, s in got], [h["score"] for h in answers[2]["hits"]], atol=5e-5)


@pytest.mark.parametrize("selection, words", [
    ("9", "positions [9] out of range 0..3 for paper p5"), ("-1", "positions [-1] out of range"),
    ("", "has an empty item"), ("0,,1", "has an empty item"), ("method", "paper 'p5' has no facet labels"),
])
def test_a_bad_selection_is_refused_naming_the_paper(index_dir, capsys, selection, words):
    assert search_main(["--index", str(index_dir), "--query-id", "p5", "--sentences", selection, "--quiet"]) == 2
    assert words in capsys.readouterr().err


def test_repeated_positions_are_one_selection(index_dir, capsys):
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--query-id", "p5", "--sentences", "2,0,2", "--k", "3",
                        "--json", "--quiet"]) == 0
    once = json.loads(capsys.readouterr().out)
    assert search_main(["--index", str(index_dir), "--query-id", "p5", "--sentences", "0,2", "--k", "3",
                        "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out) == once and once["query_sentences"] == [0, 2]


def test_interactive_answers_good_lines_around_bad_ones(index_dir, monkeypatch, capsys):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("p1 0\np1 7\nnope\n{bad\np2\n"))
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--interactive", "--k", "2", "--json", "--quiet"]) == 1
    captured = capsys.readouterr()
    assert [json.loads(line)["query_id"] for line in captured.out.splitlines()] == ["p1", "p2"]
    assert captured.err.count("error:") == 3
    assert "out of range 0..2 for paper p1" in captured.err and "'nope' is not in the index" in captured.err


@pytest.mark.parametrize("extra, words", [
    (["--queries", "/nonexistent/q.txt"], "No such file"),
    (["--query-file", "/nonexistent/q.jsonl"], "No such file"),
    (["--query-id", "p1", "search.nokey=1"], "unknown config key(s) ['search.nokey']"),
    (["--query-id", "p1", "--cross-top", "3"], "go with --cross-encoder"),
])
def test_a_wrong_path_or_key_is_refused_before_torch_and_faiss_load(index_dir, extra, words):
    code = ("import sys\nfrom aspire.cli.search import main\n"
            "rc = main(sys.argv[1:])\n"
            "print('heavy', 'torch' in sys.modules, 'faiss' in sys.modules)\nsys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, "--index", str(index_dir), *extra], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and words in done.stderr
    assert "heavy False False" in done.stdout


# ---- checked: a failed reload keeps the old generation; a later check picks up the fixed one ------------------

def test_a_failed_reload_keeps_serving_and_a_later_check_recovers(tiny_model_dir, tmp_path):
    import time

    from aspire.serve.reload import ServiceHolder

    index = build_index(tmp_path, tiny_model_dir)
    holder = ServiceHolder(index, check_every=0.0, retry_after=0.0)
    first = holder.get()
    good = (index / "CURRENT").read_text()
    (index / "CURRENT").write_text("gen-000009\n")
    out = holder.reload()
    assert out["reloaded"] is False and "gen-000009" in out["error"] and holder.get() is first
    assert holder.get().search({"paper_id": "p1", "sentences": [0], "k": 2})["hits"]  # still answers
    (index / "CURRENT").write_text(good)  # the same generation again: nothing to open, the error cleared
    holder.get()  # a background check
    for _ in range(100):
        if holder.reload_error is None:
            break
        time.sleep(0.05)
    assert holder.reload_error is None and holder.get() is first
