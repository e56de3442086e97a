"""Bad and extreme input through the corpus entry points (index build, then search): every input
paper is either indexed or listed as rejected with its reason, and size extremes are handled."""

from __future__ import annotations

import json

from aspire.cli.search import main as search_main
from aspire.index import SentenceIndex
from aspire.index.__main__ import main as index_main


def test_index_build_accounts_for_every_record_including_extremes(tmp_path, tiny_model_dir, capsys):
    words = "the model learns a representation of scientific text".split()
    long_abstract = [" ".join(words[(i + j) % len(words)] for j in range(9)) + "." for i in range(200)]
    lines = [
        json.dumps({"paper_id": "one", "title": "T", "abstract": ["a single sentence abstract."]}),
        json.dumps({"paper_id": "many", "title": "T", "abstract": long_abstract}),  # 200 sentences, > 512 pieces
        json.dumps({"paper_id": "huge", "title": "T", "abstract": ["intro.", "word " * 2000 + "end.", "outro."]}),
        json.dumps({"paper_id": "ok", "title": "T", "abstract": ["we propose a method.", "it works."]}),
        "{not json",
        json.dumps({"paper_id": "ok", "title": "dup", "abstract": ["again."]}),
        json.dumps({"paper_id": 12.5, "title": "T", "abstract": ["float id."]}),
        json.dumps({"paper_id": "empty", "title": "", "abstract": []}),
        json.dumps({"paper_id": "typed", "title": "T", "abstract": [1, 2]}),
    ]
    raw = ("\n".join(lines) + "\n").encode() + b'{"paper_id": "latin1", "title": "caf\xe9", "abstract": ["x."]}\n'
    corpus = tmp_path / "papers.jsonl"
    corpus.write_bytes(raw)
    out = tmp_path / "idx"
    assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out),
                       "index.kind=flat"]) == 0
    text = capsys.readouterr().out
    index = SentenceIndex.load(out)
    assert sorted(index.paper_ids) == ["huge", "many", "ok", "one"]
    # every sentence of the extremes is indexed (long abstracts are encoded in overlapping windows)
    n_sent = dict(zip(index.paper_ids, (index.offsets[1:] - index.offsets[:-1]).tolist()))
    assert n_sent == {"one": 1, "many": 200, "huge": 3, "ok": 2}
    assert "6 record(s) rejected" in text
    report = index.rejected  # saved with the index
    assert sorted(r["line"] for r in report) == [5, 6, 7, 8, 9, 10]
    assert all(r["reason"] for r in report)

    # searching it: the 200-sentence paper as a query, a selection at its far end; its own 200
    # sentences are the nearest to each lookup and must not crowd out every other paper
    assert search_main(["--index", str(out), "--query-id", "many", "--sentences", "0,199", "--k", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    hits = result["hits"]
    assert {h["paper_id"] for h in hits} == {"one", "huge", "ok"}
