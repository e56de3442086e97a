"""Facet control codes at query time: the CSFCube evaluator and search encode a facet's queries with its
code, and everything else with the model's own code (a tiny random BERT with facet codes)."""

from __future__ import annotations

import json

import pytest
import torch
from test_search_cli import build_labelled_index

from aspire.benchmarks.csfcube import ABSTRACTS_FILE, LABEL_TO_FACET
from aspire.benchmarks.runs import read_run
from aspire.cli.evaluate import main as evaluate_main
from aspire.cli.search import main as search_main
from aspire.data.facets import selection_facet
from aspire.data.papers import read_paper_map
from aspire.encoders import ContextualSentenceEncoder
from aspire.evaluate.facets import facet_queries
from aspire.scoring import get_scorer
from aspire.search import Searcher

FACET_CODES = ["[BACKGROUND]", "[METHOD]", "[RESULT]", "[DOC]"]


@pytest.fixture(scope="module")
def coded_model_dir(tiny_model_dir, tmp_path_factory):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    encoder.add_codes(FACET_CODES, "[DOC]")
    g = torch.Generator().manual_seed(0)  # the same codes whichever tests ran before (they moved torch's global RNG)
    with torch.no_grad():  # distinct code embeddings, so the facet's code visibly changes a query
        table = encoder.model.get_input_embeddings().weight
        for code in FACET_CODES:
            table[encoder.tokenizer.convert_tokens_to_ids(code)] = torch.randn(table.shape[1], generator=g) * 2
    path = tmp_path_factory.mktemp("coded") / "model"
    encoder.save_pretrained(path)
    return path


def test_selection_facet():
    assert selection_facet("method") == "method" and selection_facet("method_label") == "method"
    assert selection_facet("objective,background") == "background"
    assert selection_facet("method,result") is None and selection_facet("0,2") is None
    assert selection_facet("method,2") is None and selection_facet(None) is None


def evaluate(small_csfcube, model, out, *extra) -> dict:
    assert evaluate_main(["csfcube", "--data", str(small_csfcube), "--model", str(model), "--scorer", "minl2",
                          "--out", str(out), "--no-cache", "--quiet", *extra]) == 0
    return json.loads((out / "results.json").read_text())


def ranked(out, facet) -> dict:
    (path,) = out.glob(f"*-{facet}-ranked.json")
    return json.loads(path.read_text())


@pytest.mark.slow
def test_csfcube_queries_get_their_facet_code_and_candidates_the_doc_code(small_csfcube, coded_model_dir, tmp_path):
    auto = evaluate(small_csfcube, coded_model_dir, tmp_path / "auto")
    assert auto["query_codes"] == {"background": "[BACKGROUND]", "method": "[METHOD]", "result": "[RESULT]"}
    assert auto["doc_code"] == "[DOC]"
    none = evaluate(small_csfcube, coded_model_dir, tmp_path / "none", "--facet-code", "none")
    assert "query_codes" not in none
    assert ranked(tmp_path / "auto", "method") != ranked(tmp_path / "none", "method")
    # one method query by hand: [METHOD] query, its method sentences, min-L2 against [DOC] candidates
    qid, pool = next(iter(ranked(tmp_path / "auto", "method").items()))
    papers = read_paper_map(small_csfcube / ABSTRACTS_FILE, needed_by="pooled")
    encoder = ContextualSentenceEncoder.from_pretrained(coded_model_dir)
    with encoder.using_code("[METHOD]"):
        query = facet_queries(encoder.encode([papers[qid]]), papers, "method", LABEL_TO_FACET)
    cands = encoder.encode([papers[c] for c, _ in pool])
    want = get_scorer("minl2").score(query, cands)[0]
    assert torch.allclose(torch.tensor([s for _, s in pool]), want, atol=1e-4)


@pytest.mark.slow
def test_facet_code_errors_and_the_doc_code_option(small_csfcube, tiny_model_dir, coded_model_dir, tmp_path, capsys):
    assert evaluate_main(["csfcube", "--data", str(small_csfcube), "--model", str(tiny_model_dir), "--scorer",
                          "minl2", "--out", str(tmp_path / "x"), "--no-cache", "--quiet", "--facet-code",
                          "method"]) == 2
    assert "facet code [METHOD] asked for, but the model's control codes are none" in capsys.readouterr().err
    no_doc = evaluate(small_csfcube, coded_model_dir, tmp_path / "nodoc", "--doc-code", "none")
    assert no_doc["encoder_options"] == {"code": None} and no_doc["doc_code"] is None
    (tmp_path / "auto").mkdir()  # a ranked folder that is there: the refusal is of --facet-code with --ranked
    with pytest.raises(SystemExit):
        evaluate_main(["csfcube", "--data", str(small_csfcube), "--ranked", str(tmp_path / "auto"), "--exp", "x",
                       "--out", str(tmp_path / "y"), "--facet-code", "method"])


@pytest.fixture(scope="module")
def coded_index(tmp_path_factory, coded_model_dir):
    return build_labelled_index(tmp_path_factory.mktemp("coded-index"), coded_model_dir)


def search_scores(index, capsys, *extra) -> list[tuple[str, float]]:
    capsys.readouterr()
    assert search_main(["--index", str(index), "--query-id", "p2", "--sentences", "method", "--k", "4", "--json",
                        "--quiet", *extra]) == 0
    return [(h["paper_id"], h["score"]) for h in json.loads(capsys.readouterr().out)["hits"]]


def test_search_encodes_a_facet_query_with_its_code(coded_index, capsys):
    auto = search_scores(coded_index, capsys)
    none = search_scores(coded_index, capsys, "--facet-code", "none")
    assert [s for _, s in auto] != pytest.approx([s for _, s in none])
    searcher = Searcher.open(coded_index, load_model=True)
    i = searcher.index.position("p2")
    from aspire.data.papers import Paper

    paper = Paper("p2", searcher.index.titles[i], searcher.index.sentences[i], searcher.index.labels[i])
    with searcher.encoder.using_code("[METHOD]"):
        query = searcher.query_from_paper(paper, "method")
    hits = searcher.search(query, k=4)
    assert [(h.paper_id, pytest.approx(h.score, abs=1e-5)) for h in hits] == auto
    plain = searcher.search(searcher.query_from_index("p2", "method"), k=4)
    assert [(h.paper_id, pytest.approx(h.score, abs=1e-5)) for h in plain] == none


@pytest.fixture(scope="module")
def task_coded_model_dir(tiny_model_dir, tmp_path_factory):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    encoder.add_codes(["[COCITE]", "[CONTEXT2DOC]"], "[COCITE]")
    g = torch.Generator().manual_seed(0)  # as `coded_model_dir`: the same codes whichever tests ran before
    with torch.no_grad():
        table = encoder.model.get_input_embeddings().weight
        for code in ("[COCITE]", "[CONTEXT2DOC]"):
            table[encoder.tokenizer.convert_tokens_to_ids(code)] = torch.randn(table.shape[1], generator=g) * 2
    path = tmp_path_factory.mktemp("task-coded") / "model"
    encoder.save_pretrained(path)
    return path


def test_benchmark_commands_take_the_code_every_text_gets(task_coded_model_dir, tmp_path):
    from test_benchmarks import tiny_context2doc

    from aspire.cli.evaluate import build_parser, eval_options
    from aspire.evaluate.context2doc_run import run_context2doc
    from aspire.evaluate.options import EvalOptions

    parser = build_parser()
    for command in ("reviewers", "context2doc", "suite"):
        args = parser.parse_args([command, "--model", "m", "--scorer", "abstract", "--out", "o", "--code",
                                  "[CONTEXT2DOC]"])
        assert eval_options(args).encoder_options == {"code": "[CONTEXT2DOC]"}
    args = parser.parse_args(["context2doc", "--model", "m", "--scorer", "abstract", "--out", "o", "--code", "none"])
    assert eval_options(args).encoder_options == {"code": None}

    bench = tiny_context2doc(tmp_path)
    scores = {}
    for code in ("[COCITE]", "[CONTEXT2DOC]"):
        res = run_context2doc(bench, tmp_path / code, code, str(task_coded_model_dir), "abstract",
                              EvalOptions(encoder_options={"code": code}))
        assert res["encoder_options"] == {"code": code}
        scores[code] = read_run(tmp_path / code / "run.trec")
    run_context2doc(bench, tmp_path / "default", "d", str(task_coded_model_dir), "abstract")
    assert read_run(tmp_path / "default" / "run.trec") == scores["[COCITE]"]  # the model's own code is its first task's
    assert scores["[CONTEXT2DOC]"] != scores["[COCITE]"]
    with pytest.raises(ValueError, match=r"\[BOGUS\]"):
        run_context2doc(bench, tmp_path / "bogus", "b", str(task_coded_model_dir), "abstract",
                        EvalOptions(encoder_options={"code": "[BOGUS]"}))
