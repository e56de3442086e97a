"""Round 78: query and document ids of mixed types in `aspire.benchmarks.runs`; a label file's byte-order mark; a query id
typed in another Unicode form; the query paper found itself scoring -0.0.

`per_query` sorted the judged queries with `sorted`, a TypeError ("'<' not supported between instances of 'str' and
'int'") for qrels keyed by 1 and '2'; its refusals of a run that disagrees with the qrels, or ranks a document
twice, hit the same TypeError before their message. `write_run` / `write_qrels` read an integer id as text (a
TypeError from iterating it) and would write None or 1.5 as "None" and "1.5"."""

from __future__ import annotations

import pytest

from aspire.benchmarks.runs import per_query, read_qrels, read_run, write_qrels, write_run


def test_per_query_scores_queries_keyed_by_ints_and_strings_together():
    qrels = {1: {"a": 1, "b": 0}, "2": {"c": 1, "d": 0}}
    run = {1: [("b", 2.0), ("a", 1.0)], "2": [("c", 2.0), ("d", 1.0)]}
    values = per_query(qrels, run, ["map", "bpref"])
    assert values == {"map": {1: 0.5, "2": 1.0}, "bpref": {1: 0.0, "2": 1.0}}
    # the same queries keyed by strings alone score the same
    same = per_query({str(q): d for q, d in qrels.items()}, {str(q): r for q, r in run.items()}, ["map", "bpref"])
    assert {m: {str(q): v for q, v in by.items()} for m, by in values.items()} == same


def test_per_query_refusals_name_mixed_ids():
    with pytest.raises(ValueError, match=r"1 judged queries not ranked \(e.g. \[1\]\), 2 ranked queries not judged "
                                         r"\(e.g. \['1', 2\]\)"):
        per_query({1: {"a": 1}}, {"1": [("a", 1.0)], 2: [("a", 1.0)]}, ["map"])
    with pytest.raises(ValueError, match=r"query 1: \[7, 'a'\]"):
        per_query({1: {"a": 1}}, {1: [(7, 3.0), ("a", 2.0), (7, 1.0), ("a", 0.5)]}, ["map"])


def test_trec_files_take_integer_ids_as_their_digits_and_refuse_other_types(tmp_path):
    write_run(tmp_path / "run", {1: [(7, 2.0), ("a", 1.0)]}, "t")
    assert read_run(tmp_path / "run") == {"1": [("7", 2.0), ("a", 1.0)]}
    write_qrels(tmp_path / "qrels", {1: {7: 1, "a": 0}})
    assert read_qrels(tmp_path / "qrels") == {"1": {"7": 1, "a": 0}}
    for bad, kind in ((None, "NoneType"), (1.5, "float"), (True, "bool")):
        with pytest.raises(ValueError, match=f"query id {bad!r} is a {kind}"):
            write_run(tmp_path / "run", {bad: [("a", 1.0)]}, "t")
        with pytest.raises(ValueError, match=f"document id {bad!r} is a {kind}"):
            write_qrels(tmp_path / "qrels", {"q": {bad: 1}})
    with pytest.raises(ValueError, match=r"query 1 ranks \['7', 'a'\] more than once"):
        write_run(tmp_path / "run", {1: [(7, 4.0), ("a", 3.0), (7, 2.0), ("a", 1.0)]}, "t")
    # 1 and '1' are one id once written: refused, where the file merged two queries or ranked a document twice
    with pytest.raises(ValueError, match=r"query q ranks \['1'\] more than once"):
        write_run(tmp_path / "run", {"q": [(1, 2.0), ("1", 1.0)]}, "t")
    twice = r"ids \['1'\] are given twice, as a number and as text"
    with pytest.raises(ValueError, match=f"^query {twice}"):
        write_run(tmp_path / "run", {1: [("a", 2.0)], "1": [("b", 1.0)]}, "t")
    with pytest.raises(ValueError, match=f"^query {twice}"):
        write_qrels(tmp_path / "qrels", {1: {"a": 1}, "1": {"b": 1}})
    with pytest.raises(ValueError, match=f"^query q: document {twice}"):
        write_qrels(tmp_path / "qrels", {"q": {1: 1, "1": 0}})


def test_a_label_file_saved_with_a_byte_order_mark_reads_as_without(tmp_path):
    """`decoded_lines` (the label files' reader) kept a leading UTF-8 byte-order mark in the first line: a label
    file saved by an editor that writes one was refused, "line 1: not JSON", where papers files read."""
    from aspire.benchmarks.acl_formats import read_label_file
    from aspire.io import UTF8_BOM, decoded_lines

    body = '{"paper_id": "a", "label": "x"}\n{"paper_id": "b", "label": "y"}\n'
    (tmp_path / "plain.jsonl").write_text(body, encoding="utf-8")
    (tmp_path / "bom.jsonl").write_bytes(UTF8_BOM + body.encode())
    assert read_label_file(tmp_path / "bom.jsonl", "class") == read_label_file(tmp_path / "plain.jsonl", "class") \
        == {"a": "x", "b": "y"}
    assert decoded_lines(UTF8_BOM + b"a\n\xef\xbb\xbfb", "f") == ["a", "\ufeffb"]  # only the file's start is cut


def test_a_query_id_in_another_unicode_form_is_refused_naming_the_indexed_id(tmp_path, tiny_model_dir, capsys):
    """Ids match as exact strings; `café` typed as `cafe` + a combining accent (NFD, as some systems' file names
    and copied text give it) was "not in the index" with an id that prints the same, nothing more said."""
    from aspire.cli.search import main as search_main
    from tests.test_search_cli import build_index_from

    composed = "caf\u00e9-1"
    index = build_index_from(tmp_path, tiny_model_dir, [
        {"paper_id": pid, "title": "a model of text", "abstract": ["we propose a method.", "results improve."]}
        for pid in (composed, "p2", "p3")])
    capsys.readouterr()
    assert search_main(["--index", str(index), "--query-id", composed, "--k", "1", "--quiet"]) == 0
    for typed in ("cafe\u0301-1", f" {composed}"):
        assert search_main(["--index", str(index), "--query-id", typed, "--k", "1", "--quiet"]) == 2
        said = capsys.readouterr().err
        assert f"paper {typed!r} is not in the index (3 papers)" in said
        assert f"the index holds {composed!r}, the same text written otherwise: give that id" in said
    assert search_main(["--index", str(index), "--query-id", "p9", "--k", "1", "--quiet"]) == 2
    assert "the index holds" not in capsys.readouterr().err  # no near id, no hint


def test_the_query_paper_found_itself_scores_zero_not_minus_zero(tmp_path, tiny_model_dir, capsys):
    """With `search.exclude_query=false` the query paper is its own first hit at distance 0, whose negation -0.0
    printed as `-0.0000` (and `-0.0` in JSON)."""
    import json as json_module

    from aspire.cli.search import main as search_main
    from tests.test_search_cli import build_labelled_index

    index = build_labelled_index(tmp_path, tiny_model_dir)
    capsys.readouterr()
    for rerank in ("none", "minl2"):
        assert search_main(["--index", str(index), "--query-id", "p1", "--k", "2", "--quiet", "--rerank", rerank,
                            "--stages", "ann", "search.exclude_query=false"]) == 0
        first = capsys.readouterr().out.splitlines()[1]
        assert first.startswith("  1. +0.0000  p1"), first
        assert search_main(["--index", str(index), "--query-id", "p1", "--k", "2", "--quiet", "--json",
                            "--rerank", rerank, "--stages", "ann", "search.exclude_query=false"]) == 0
        hit = json_module.loads(capsys.readouterr().out)["hits"][0]
        assert hit["paper_id"] == "p1" and str(hit["score"]) == "0.0" and "-0.0" not in json_module.dumps(hit)
