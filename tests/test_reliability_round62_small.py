"""Round 62, three small leftovers: a paragraph of S2ORC full text without `text` is refused naming its paper; a
sentence label cut to its width never parts a combining accent from its letter; fusion weights whose use passes the
float range are refused, naming the weight and document, instead of fusing to inf or a bare error."""

from __future__ import annotations

import json
import textwrap
import unicodedata
from pathlib import Path

import pytest

from aspire.data.cocite import IngestConfig
from aspire.data.s2orc import mine_s2orc
from aspire.evaluate.fuse import fuse_runs
from aspire.io import DataError
from aspire.scoring.fusion import fuse_ranked
from aspire.viz import sentence_label
from tests.test_reliability_round45_s2orc import PLAIN, _write

FIXTURE = Path(__file__).parent / "fixtures" / "s2orc_mini"

# ------------------------------------------------------------------ s2orc: a paragraph without text names its paper


def _fixture_with(tmp_path: Path, paragraph) -> Path:
    """The fixture's full text with paper C2's (line 2) first paragraph replaced by `paragraph`."""
    rows = [json.loads(line) for line in (FIXTURE / "pdf_parses.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows[1]["paper_id"] == "C2" and rows[1]["body_text"]
    rows[1]["body_text"][0] = paragraph
    return _write(tmp_path / "pdf_parses.jsonl", rows)


def test_paragraph_without_text_names_its_paper_and_line(tmp_path):
    """The old message, "pdf_parses.jsonl:2: body_text[0] lacks 'text'", named no paper (each other error of the
    reader does); a paragraph that is no object was blamed on a missing 'text'."""
    real = json.loads((FIXTURE / "pdf_parses.jsonl").read_text(encoding="utf-8").splitlines()[1])["body_text"][0]
    no_text = {k: v for k, v in real.items() if k != "text"}
    full = _fixture_with(tmp_path, no_text)
    with pytest.raises(DataError, match=r"pdf_parses\.jsonl:2: paper 'C2': body_text\[0\] lacks 'text'$"):
        mine_s2orc(full, FIXTURE / "abstracts.jsonl", tmp_path / "o", PLAIN)
    skip = IngestConfig(splitter="regex", exclude_benchmark_test=False, exclude_benchmark_papers=False,
                        on_error="skip")
    report = mine_s2orc(full, FIXTURE / "abstracts.jsonl", tmp_path / "s", skip)
    assert report["bad_lines"] == 1 and "paper 'C2': body_text[0]" in report["bad_line_messages"][0]
    with pytest.raises(DataError, match=r"pdf_parses\.jsonl:2: paper 'C2': body_text\[0\] must be an object, got str"):
        mine_s2orc(_fixture_with(tmp_path, real["text"]), FIXTURE / "abstracts.jsonl", tmp_path / "p", PLAIN)


# ------------------------------------------------------------------ viz: a cut keeps a letter and its accent whole

CAFE = "cafe\u0301"  # "café" decomposed: e + COMBINING ACUTE ACCENT


def test_sentence_label_cut_never_parts_an_accent_from_its_letter():
    """"q1 café" is 8 characters; cut to 7 for the "…" of width 8 the old code kept "q1 cafe…" (the accent
    dropped: another word); now the letter goes with its accent. A word longer than the line was broken by textwrap
    between "e" and its accent, the next line beginning with it ("q1", "ca", "fe", "\u0301 ", ... at width 2); now
    the break falls before the letter. Every line keeps the pinned bound, `width` characters."""
    assert sentence_label("q", 1, (CAFE + " ") * 10, width=8, lines=1) == "q1 caf…"
    assert sentence_label("q", 1, (CAFE + " ") * 10, width=2, lines=5) == "q1\nca\nf\ne\u0301\nc…"
    for width in range(2, 40):  # width 1 holds no letter with its accent: that one is cut all the same
        for lines in (1, 2, 3, 6):
            label = sentence_label("q", 1, (CAFE + " ") * 12, width=width, lines=lines)
            for line in label.split("\n"):
                assert len(line) <= width, (width, lines, label)
                assert not unicodedata.combining(line[0]), (width, lines, label)
                assert all(line[k + 1 : k + 2] == "\u0301" for k, ch in enumerate(line) if ch == "e"), (width, lines,
                                                                                                      label)
    plain = "relational similarity between pairs of words is measured by latent analysis of the patterns " * 3
    for width in range(1, 60):  # text without combining marks is wrapped as textwrap wraps it
        assert sentence_label("q", 1, plain, width=width, lines=10**6).split("\n") == textwrap.wrap(f"q1 {plain}", width)


# ------------------------------------------------------------------ fusion: weights whose use overflows are refused

TEN = {f"d{i}": 0.0 for i in range(10)} | {"d0": 1.0}  # d0 z-scores to 3: 3 * 1e308 is inf


def test_weight_times_a_score_that_overflows_is_refused():
    """The old code fused d0 to inf, unsaid (and, with the same run negated beside it, raised fsum's bare
    "-inf + inf in fsum")."""
    with pytest.raises(ValueError, match=r"fusion weight 1e\+308 of list 0 overflows: .* score 3 of document 'd0'"):
        fuse_ranked([TEN], [1e308], "z")
    negated = {d: -s for d, s in TEN.items()}
    with pytest.raises(ValueError, match=r"weight 1e\+308 of list 0 overflows"):
        fuse_ranked([TEN, negated], [1e308, 1e308], "z")
    runs = [{"q": sorted(TEN.items(), key=lambda kv: -kv[1])}, {"q": [("d0", 2.0), ("d1", 1.0)]}]
    with pytest.raises(ValueError, match="overflows"):  # through the benchmark runs' fusion too
        fuse_runs(runs, [1e308, 1.0], "z")


def test_weighted_scores_whose_sum_overflows_are_refused_and_large_safe_weights_are_not_rescaled():
    """Each weighted score is finite (1e308), their sum is not: fsum raised a bare "intermediate overflow in fsum"
    naming neither weight nor document. Weights that stay in range are used as given (no rescaling)."""
    lists = [{"x": 1.0, "y": 0.0}, {"x": 1.0, "y": 0.0}]
    with pytest.raises(ValueError, match=r"fusion weights 1e\+308, 1e\+308 overflow: .* of document 'x' sum past"):
        fuse_ranked(lists, [1e308, 1e308], "minmax")
    assert fuse_ranked(lists, [1e300, 1e300], "minmax") == [("x", 2e300), ("y", 0.0)]
    assert fuse_ranked(lists, [1e308, 1e308], "rrf") == [("x", 2 * (1e308 * (1 / 61))), ("y", 2 * (1e308 * (1 / 62)))]
