"""plot_ranked_list keeps what fits of a sentence with no space to cut at: a sentence of a Chinese abstract of the shared
ACL Anthology (102 characters, no spaces) was drawn as "s: [...]" alone, as textwrap.shorten, which keeps whole words
only, cut it; and a wide character is counted as the two columns it is drawn in."""

from __future__ import annotations

import gzip
import json
import textwrap
import unicodedata

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from aspire.search import AlignedPair, Hit  # noqa: E402
from aspire.viz import plot_ranked_list  # noqa: E402

PAPER = "2020.ccl-1.1"  # 基于规则的双重否定识别 (Double Negative Recognition Based on Rules), CCL 2020
ENGLISH = ("We propose a rule-based method that recognises double negation in Chinese sentences and evaluate it on a "
           "corpus of annotated examples drawn from many sources.")


def _columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


def test_a_sentence_without_spaces_keeps_what_fits_of_it(shared_data):
    with gzip.open(shared_data / "acl-anthology" / "papers.jsonl.gz", "rt", encoding="utf-8") as fh:
        paper = next(r for r in map(json.loads, fh) if r["paper_id"] == PAPER)
    sentence = paper["abstract"][: paper["abstract"].index("。") + 1]  # its first sentence
    assert " " not in sentence and len(sentence) > 100
    hit = Hit(1, PAPER, paper["title"], -0.5, [AlignedPair(0, 0, 0.5, 1.0, ENGLISH, sentence)])
    fig = plot_ranked_list([hit], width=100)
    try:
        lines = {t.get_text()[:3]: t.get_text() for t in fig.axes[0].texts}
        drawn = lines["s: "].removeprefix("s: ")
        assert drawn.endswith(" [...]") and sentence.startswith(drawn.removesuffix(" [...]"))
        assert len(drawn) > 40 and _columns(drawn) <= 100  # was "[...]": the sentence was lost
        assert lines["q: "] == "q: " + textwrap.shorten(ENGLISH, 100)  # words that fit: cut as before
    finally:
        plt.close(fig)
