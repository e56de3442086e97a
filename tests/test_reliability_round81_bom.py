"""Round 81: a UTF-8 byte-order mark at a file's start, in the readers that still kept it; a slow tokenizer's refusal.

Round 78 cut it in `decoded_lines` (label files) and round 80 in `read_run` / `read_qrels`; a review found the
same defect in more readers, each refusing a file an editor saved with one: `read_json` ("not JSON ... Unexpected
UTF-8 BOM"; the reviewer predictions, most JSON inputs), the reviewer ratings (the header's first column read as
'\\ufeffParticipantID'), co-citation records ("line 1: not JSON") and CSFCube's query titles (a bare KeyError 'pid').
`fuse_runs` also sorted query ids of mixed types (1 and '1') for its message: a TypeError in their place."""

from __future__ import annotations

import json

import pytest

from aspire.io import UTF8_BOM


def _saved_with_bom(path, text: str):
    path.write_bytes(UTF8_BOM + text.encode("utf-8"))
    return path


def test_read_json_ignores_a_byte_order_mark(tmp_path):
    from aspire.io import read_json

    assert read_json(_saved_with_bom(tmp_path / "a.json", '{"k": [1, 2]}'), "test file") == {"k": [1, 2]}


def test_reviewer_ratings_read_a_header_saved_with_a_byte_order_mark(tmp_path):
    from aspire.benchmarks.reviewers import load_ratings

    body = "ParticipantID\tPaper1\tExpertise1\tPaper2\tExpertise2\nr1\tp1\t4\tp2\t2.5\n"
    plain = tmp_path / "plain.tsv"
    plain.write_text(body, encoding="utf-8")
    assert load_ratings(_saved_with_bom(tmp_path / "bom.tsv", body)) == load_ratings(plain) == {
        "r1": [("p1", 4.0), ("p2", 2.5)]}


def test_cocitation_records_and_csfcube_titles_read_past_a_byte_order_mark(tmp_path):
    from aspire.benchmarks.context2doc import read_records
    from aspire.benchmarks.csfcube import query_titles

    record = {"context": "as in [1]", "citing_paper_id": "c1", "cited": [{"paper_id": "a", "title": "t",
                                                                          "abstract": ["x."]}]}
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert read_records(_saved_with_bom(tmp_path / "bom.jsonl", json.dumps(record) + "\n")) == read_records(plain)
    _saved_with_bom(tmp_path / "queries-release.csv", "pid,facet,title\n123,method,A title\n")
    assert query_titles(tmp_path) == {"123_method": "A title"}


def test_fuse_runs_names_query_ids_of_mixed_types_that_differ():
    from aspire.evaluate.fuse import fuse_runs

    with pytest.raises(ValueError, match=r"runs x and y rank different queries \(e.g. \[1, '1', 2\]\)"):
        fuse_runs([{1: [("a", 1.0)]}, {"1": [("a", 1.0)], 2: [("b", 1.0)]}], None, "rrf", 60, names=["x", "y"])


def test_a_slow_tokenizer_is_named_as_the_folder_s_not_as_a_bad_setting(tiny_model_dir, tmp_path, monkeypatch):
    """Round 81: from_folder named the settings file in front of every refusal of the encoder's arguments, the
    tokenizer's too ("X/aspire_encoder.json: ContextualSentenceEncoder needs a fast tokenizer")."""
    import shutil

    import transformers

    from aspire.encoders import load_encoder
    from aspire.encoders.pretrained import SETTINGS_FILE

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    (folder / SETTINGS_FILE).write_text(json.dumps({"include_title": True}))
    real = transformers.AutoTokenizer.from_pretrained

    class Slow:  # the real tokenizer, but not fast
        is_fast = False

        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Slow(real(*a, **k)))
    with pytest.raises(ValueError) as err:
        load_encoder(folder)
    assert str(err.value) == f"{folder}: its tokenizer is no fast tokenizer (character offsets), which the encoder needs"


def test_ids_of_one_text_and_two_types_are_named_in_one_order_whatever_the_hash_seed():
    """1 and '1' sorted by their text alone came in the set's order, which the hash seed moves: a message named them
    in either order from one process to the next (the test above failed now and then)."""
    import os
    import subprocess
    import sys

    code = ("from aspire.evaluate.fuse import fuse_runs\n"
            "try:\n"
            "    fuse_runs([{1: [('a', 1.0)]}, {'1': [('a', 1.0)], 2: [('b', 1.0)]}], None, 'rrf', 60, names=['x', 'y'])\n"
            "except ValueError as err:\n"
            "    print(err)\n")
    said = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(6)}
    assert said == {"runs x and y rank different queries (e.g. [1, '1', 2])\n"}
