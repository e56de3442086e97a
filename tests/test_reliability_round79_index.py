"""Round 79: `aspire search` options that a search reads nothing of are said, not silently dropped
(aspire/cli/search.py `unused_encoder_options`, `unread_selection`).

- `--model` (or `--backend` / `--quantize`) beside queries that are all indexed papers given by id: no paper is
  encoded, so the index's stored vectors answer. `--query-id p1 --model OTHER` over an index built by another model
  answered with the index's model's vectors and exit status 0, without a word (a `--query-file` paper with the same
  `--model` is refused as a model mismatch).
- a sentence selection with the first stage 'whole' and no re-ranker or cross-encoder: the whole-abstract vectors'
  cosine ranks alone, so `--sentences 0` gave the ranking of every sentence while the answer said `sentences [0]`.
"""

from __future__ import annotations

import io
import json

import pytest

from aspire.cli.search import main as search_main
from tests.conftest import build_tiny_model
from tests.test_search_cli import build_labelled_index

CLI_LOGGER = "aspire.cli.search"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir):
    return build_labelled_index(tmp_path_factory.mktemp("r79-index"), tiny_model_dir)


@pytest.fixture(scope="module")
def other_model(tmp_path_factory):
    """A tiny model of another width: not the model the index was built with."""
    return build_tiny_model(tmp_path_factory.mktemp("r79-other"), hidden=48)


def hits(out: str) -> list[list[str]]:
    """The hit ids of each JSON answer (one object, or one a line) on stdout."""
    text = out.strip()
    answers = [json.loads(text)] if text.startswith("{\n") else [json.loads(line) for line in text.splitlines()]
    return [[h["paper_id"] for h in answer["hits"]] for answer in answers]


def test_a_model_given_beside_a_query_by_id_is_said_to_be_unused(index_dir, other_model, caplog, capsys):
    capsys.readouterr()
    with caplog.at_level("WARNING", logger=CLI_LOGGER):
        assert search_main(["--index", str(index_dir), "--query-id", "p1", "--k", "3", "--json",
                            "--model", str(other_model)]) == 0
    said = [r.getMessage() for r in caplog.records if r.name == CLI_LOGGER]
    assert len(said) == 1, said
    assert said[0].startswith(f"--model {other_model} not used: no query paper was encoded")
    assert "encoded by the index's model" in said[0] and "--query-file" in said[0]
    assert len(hits(capsys.readouterr().out)[0]) == 3  # the search itself is answered as before

    caplog.clear()
    with caplog.at_level("WARNING", logger=CLI_LOGGER):  # --backend / --quantize alike, named as given
        assert search_main(["--index", str(index_dir), "--query-id", "p1", "--k", "2", "--quiet",
                            "--backend", "onnx", "--quantize", "int8"]) == 0
    assert "--backend onnx --quantize int8 not used: no query paper was encoded" in caplog.text


def test_a_model_that_encodes_a_query_is_not_called_unused(index_dir, tiny_model_dir, tmp_path, caplog, capsys):
    paper = tmp_path / "query.json"
    paper.write_text(json.dumps({"paper_id": "new", "title": "a model", "abstract": ["we propose a new method."]}))
    with caplog.at_level("WARNING", logger=CLI_LOGGER):
        assert search_main(["--index", str(index_dir), "--query-file", str(paper), "--k", "2", "--quiet",
                            "--model", str(tiny_model_dir)]) == 0
        assert search_main(["--index", str(index_dir), "--query-id", "p1", "--k", "2", "--quiet"]) == 0
    assert "not used" not in caplog.text


def test_interactive_says_an_unused_backend_once_at_the_end(index_dir, monkeypatch, caplog, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("p1 0\np2\n"))
    with caplog.at_level("WARNING", logger=CLI_LOGGER):
        assert search_main(["--index", str(index_dir), "--interactive", "--k", "2", "--quiet", "--json",
                            "--backend", "onnx"]) == 0
    assert caplog.text.count("--backend onnx not used") == 1
    assert len(hits(capsys.readouterr().out)) == 2


def test_a_selection_the_whole_vector_stage_does_not_read_is_said(index_dir, caplog, capsys):
    base = ["--index", str(index_dir), "--query-id", "p1", "--k", "4", "--json", "--stages", "whole"]
    capsys.readouterr()
    with caplog.at_level("WARNING", logger=CLI_LOGGER):
        assert search_main(base) == 0
        every = hits(capsys.readouterr().out)
        assert search_main(base + ["--sentences", "0"]) == 0
    assert hits(capsys.readouterr().out) == every  # the selection moved nothing: why it must be said
    said = [r.getMessage() for r in caplog.records if r.name == CLI_LOGGER]
    assert len(said) == 1, said
    assert said[0].startswith("the sentence selection of 1 of 1 query (e.g. 'p1') is not used: the first stage "
                              "'whole' ranks by the whole-abstract vectors")
    assert "--rerank hybrid" in said[0]


@pytest.mark.parametrize("extra", [["--rerank", "hybrid"], ["--rerank", "minl2"], ["--stages", "ann"],
                                   ["--sentences", "0,1,2"]])
def test_a_selection_that_is_read_or_selects_every_sentence_is_not_called_unused(index_dir, extra, caplog, capsys):
    args = ["--index", str(index_dir), "--query-id", "p1", "--k", "2", "--quiet", "--stages", "whole",
            "--sentences", "method", *extra]
    with caplog.at_level("WARNING", logger=CLI_LOGGER):
        assert search_main(args) == 0
    assert "not used" not in caplog.text


def test_a_batch_says_its_unread_selections_once_and_interactive_names_the_line(index_dir, tmp_path, monkeypatch,
                                                                                caplog, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_text("p1 0\np2\np3 method\n")
    with caplog.at_level("WARNING", logger=CLI_LOGGER):
        assert search_main(["--index", str(index_dir), "--queries", str(queries), "--k", "2", "--quiet",
                            "--stages", "whole"]) == 0
    assert caplog.text.count("is not used") == 1
    assert "the sentence selection of 2 of 3 queries (e.g. 'p1') is not used" in caplog.text
    caplog.clear()
    monkeypatch.setattr("sys.stdin", io.StringIO("p2\np3 method\n"))
    with caplog.at_level("WARNING", logger=CLI_LOGGER):
        assert search_main(["--index", str(index_dir), "--interactive", "--k", "2", "--quiet",
                            "--stages", "whole"]) == 0
    said = [r.getMessage() for r in caplog.records if r.name == CLI_LOGGER]
    assert len(said) == 1 and said[0].startswith("stdin line 2: the sentence selection of 1 of 1 query (e.g. 'p3')")
