"""Round 27: the guard of `GuardedSplitter` (the default splitter's) on full-width / ideographic sentence ends, long
whitespace runs before a cut, and the start of its look-back window."""

from __future__ import annotations

import gzip
import json

import pytest

from aspire.data.sentences import DEFAULT_SPLITTER, GuardedSplitter, get_splitter
from tests.test_sentences import _FixedStarts as _Fixed


def _cut_before(text: str, *heads: str) -> GuardedSplitter:
    """A guarded splitter whose only base proposes a cut where each of `heads` starts in `text`."""
    return GuardedSplitter("guarded", _Fixed([text.index(h) for h in heads]))


@pytest.mark.parametrize(
    "text, heads",
    [
        ("We propose a method。 It works well！ Really？ Yes．", ["It ", "Really", "Yes"]),
        ("我们提出一种方法。它效果很好。结论如下。", ["它", "结"]),
        ("彼は「はい。」と言った。次の文。", ["次"]),
    ],
    ids=["full-width", "chinese", "japanese-quote"],
)
def test_guard_keeps_cuts_after_full_width_and_ideographic_sentence_ends(text, heads):
    """Every cut after 。 ！ ？ ． was dropped as "no sentence-final punctuation" (on the real ACL Anthology file all
    670 such cuts that the default's bases propose, in 403 Chinese abstracts: 399 of them came out as one sentence)."""
    pieces = _cut_before(text, *heads).split(text)
    assert len(pieces) == len(heads) + 1
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")


def test_default_splitter_splits_a_chinese_abstract_where_pysbd_does():
    text = "我们提出一种方法。它效果很好。"
    assert get_splitter("pysbd").split(text) == ["我们提出一种方法。", "它效果很好。"]
    assert get_splitter(DEFAULT_SPLITTER).split(text) == ["我们提出一种方法。", "它效果很好。"]


@pytest.mark.parametrize(
    "gap",
    [" " * 64, "\n" * 100, " \n" * 40, "\u00a0" * 70],
    ids=["64 spaces", "100 newlines", "40 space-newlines", "70 nbsp"],
)
def test_guard_reads_the_sentence_end_past_a_long_whitespace_run(gap):
    """The rules read a fixed 64-character window before the cut, stripped: 64 or more whitespace characters left it
    empty, and the cut was dropped as if "method." were not sentence-final."""
    text = "We propose a method." + gap + "It works well."
    assert _cut_before(text, "It ").split(text) == ["We propose a method.", "It works well."]
    assert GuardedSplitter.keep_cut(text, text.index("It "))
    # the abbreviation rules still see through the run
    text = "We compare A vs." + gap + "B on ten tasks."
    assert _cut_before(text, "B on").split(text) == [text]
    text = "As shown by Wu et al." + gap + "(2019) it holds."
    assert _cut_before(text, "(2019)").split(text) == [text]


def test_pysbd_guarded_keeps_the_cut_after_a_long_whitespace_run():
    text = "We propose a method." + " " * 64 + "It works well."
    assert get_splitter("pysbd_guarded").split(text) == ["We propose a method.", "It works well."]


def test_guard_window_start_is_not_taken_for_a_word_start():
    """With 61 spaces after "Tvs.", the window started at "vs." and its `^` took it for the abbreviation "vs."."""
    text = "It beats Tvs." + " " * 61 + "It works well."
    assert _cut_before(text, "It w").split(text) == ["It beats Tvs.", "It works well."]
    assert get_splitter("pysbd_guarded").split(text) == ["It beats Tvs.", "It works well."]
    # the real start of the text still counts as a word start
    text = "Vs. Then more."
    assert _cut_before(text, "Then").split(text) == [text]
    text = "e.g." + " " * 70 + "Then more."
    assert _cut_before(text, "Then").split(text) == [text]


@pytest.mark.slow
def test_default_keeps_the_ideographic_cuts_of_its_bases_on_real_acl_abstracts(shared_data):
    """The first 30 ACL Anthology abstracts with 。: no cut that a base proposes after 。 is dropped."""
    splitter = get_splitter(DEFAULT_SPLITTER)
    seen = proposed = kept = 0
    with gzip.open(shared_data / "acl-anthology" / "papers.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["abstract"]
            if "。" not in text:
                continue
            cuts = {i for b in splitter.bases for i in b.starts(text) if 0 < i < len(text)}
            after = [i for i in cuts if text[:i].rstrip().endswith("。")]
            proposed += len(after)
            kept += sum(splitter.keep_cut(text, i) for i in after)
            seen += 1
            if seen == 30:
                break
    assert seen == 30 and proposed > 0
    assert kept == proposed
