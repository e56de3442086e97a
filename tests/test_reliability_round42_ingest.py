"""Round 42: the filter stage refuses a hand-built context that is not Unicode text, naming the record and key."""

from __future__ import annotations

import json

import pytest

from aspire.data.cocite import DataError, FilterConfig, filter_contexts

ABSTRACT = ["One sentence here.", "Two sentence here.", "Three sentence here."]


@pytest.mark.parametrize("key", ["text", "text_clean", "citing_paper_id", "source"])
def test_filter_refuses_lone_surrogate_in_context_naming_line_and_key(tmp_path, key):
    in_dir = tmp_path / "in"
    in_dir.mkdir()
    (in_dir / "abstracts.jsonl").write_text(
        "".join(json.dumps({"paper_id": p, "title": "T" + p, "abstract": ABSTRACT}) + "\n" for p in "AB"))
    ctx = {"context_id": "c1", "citing_paper_id": "X", "text": "a context with enough words in it",
           "text_clean": "a context with enough words in it", "cited_ids": ["A", "B"], "source": "s"}
    ok = dict(ctx, context_id="c0")
    ctx[key] = ctx[key] + "\ud800"  # json.dumps writes the escape "\ud800", which json.loads reads back
    (in_dir / "contexts.jsonl").write_text(json.dumps(ok) + "\n" + json.dumps(ctx) + "\n")
    with pytest.raises(DataError) as err:  # was: UnicodeEncodeError while writing the output
        filter_contexts(in_dir, tmp_path / "out", FilterConfig())
    message = str(err.value)
    assert "contexts.jsonl:2:" in message and "'c1'" in message and f"{key} holds a lone surrogate" in message
    assert not (tmp_path / "out" / "report.json").exists()
