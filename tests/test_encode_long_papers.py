"""The papers of a corpus longer than the encoder's window are named in one warning for the whole corpus: `aspire
encode` (and `index build`, `encode-shard`: `encode_corpus`) encodes 4 batches a call, and each call warned of its own
long papers (aspire-minilm on CSFCube's 4,205 abstracts: 33 warnings, each counting 14 to 47 papers, no total)."""

from __future__ import annotations

import json
import logging

from aspire.cli import main


def _long_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "longer than" in r.getMessage()]


def test_aspire_encode_names_the_long_papers_of_the_corpus_in_one_warning(tiny_model_dir, tmp_path, caplog):
    long = [{"paper_id": f"p{i}", "title": "Title", "abstract": [f"The model {k} improves the results." for k in range(30)]}
            for i in range(25)]
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in [*long, {"paper_id": "short", "title": "T",
                                                                     "abstract": ["One short sentence."]}]))
    with caplog.at_level(logging.WARNING, logger="aspire"):  # --batch-size 2: 8 papers a call, 4 calls
        assert main(["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "v"),
                     "--batch-size", "2", "-q"]) == 0
    warnings = _long_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("25 paper(s) longer than 128 word pieces (") and "and 5 more" in warnings[0]


def test_an_encode_call_outside_a_corpus_still_warns_itself(tiny_model_dir, caplog):
    from aspire.data.papers import Paper
    from aspire.encoders import load_encoder
    from aspire.encoders.pieces import long_papers_held

    encoder, other = load_encoder(tiny_model_dir), load_encoder(tiny_model_dir)
    paper = Paper("p", "Title", [f"The model {k} improves the results." for k in range(30)])
    with caplog.at_level(logging.WARNING, logger="aspire"):
        with long_papers_held(encoder) as held:
            encoder.encode([paper])
            other.encode([paper])  # another encoder's call is its own
            assert [r.paper_id for r in held] == ["p"] and len(_long_warnings(caplog)) == 1
        encoder.encode([paper])
    assert len(_long_warnings(caplog)) == 3
