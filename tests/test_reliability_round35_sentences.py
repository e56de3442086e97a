"""Round 35: the guard of `GuardedSplitter` on sentence ends other than . ! ? and the CJK forms (the danda, the Arabic
question mark, the Armenian and Ethiopic full stops, ‼ ...), which spaCy's `sentencizer` base cuts after."""

from __future__ import annotations

import pytest

from aspire.data.sentences import _TERMINAL, DEFAULT_SPLITTER, GuardedSplitter, get_splitter
from tests.test_sentences import _FixedStarts as _Fixed
from tests.test_sentences import assert_lossless


def _cut_before(text: str, *heads: str) -> GuardedSplitter:
    """A guarded splitter whose only base proposes a cut where each of `heads` starts in `text`."""
    return GuardedSplitter("guarded", _Fixed([text.index(h) for h in heads]))


@pytest.mark.parametrize(
    "text, heads",
    [
        ("यह एक वाक्य है। यह दूसरा है॥ तीसरा।", ["यह दू", "तीसरा"]),
        ("هل هذا سؤال؟ نعم هو كذلك.", ["نعم"]),
        ("یہ پہلا جملہ ہے۔ یہ دوسرا ہے۔", ["یہ دو"]),
        ("Սա առաջինն է։ Սա երկրորդն է։", ["Սա եր"]),
        ("ይህ የመጀመሪያው ነው። ይህ ሁለተኛው ነው።", ["ይህ ሁ"]),
        ("It works‼ Really⁉ Yes﹒ Fine.", ["Really", "Yes", "Fine"]),
    ],
    ids=["devanagari", "arabic", "urdu", "armenian", "ethiopic", "double-marks-small-forms"],
)
def test_guard_keeps_cuts_after_other_sentence_terminals(text, heads):
    """Only . ! ? … and 。 ｡ ． ！ ？ counted as sentence-final: a cut after । ؟ ۔ ։ ። ‼ ⁉ ﹒ was dropped, so every
    sentence of a Hindi or Arabic abstract came out as one."""
    pieces = _cut_before(text, *heads).split(text)
    assert len(pieces) == len(heads) + 1
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("यह एक वाक्य है। यह दूसरा है।", ["यह एक वाक्य है।", "यह दूसरा है।"]),
        ("هل هذا سؤال؟ نعم هو كذلك.", ["هل هذا سؤال؟", "نعم هو كذلك."]),
    ],
    ids=["devanagari", "arabic"],
)
def test_default_splitter_keeps_the_cuts_its_spacy_base_makes(text, expected):
    """The `scispacy_rule` base cuts here; the default dropped its cut and returned one sentence."""
    assert get_splitter("scispacy_rule").split(text) == expected
    spans = get_splitter(DEFAULT_SPLITTER).spans(text)
    assert_lossless(text, spans)
    assert [text[a:b] for a, b in spans] == expected


def test_every_sentencizer_end_counts_as_sentence_final():
    """The guard must not drop a cut for lack of a sentence end where its spaCy base saw one; and what it counts
    as one is Unicode's Sentence_Terminal set (plus the ellipsis), nothing more (no comma, colon or semicolon)."""
    from spacy.pipeline import Sentencizer

    missing = [c for c in Sentencizer.default_punct_chars if not _TERMINAL.search("x" + c)]
    assert missing == []
    for c in ",;:·、，；：":
        assert _TERMINAL.search("x" + c) is None, c
    regex = pytest.importorskip("regex")
    sterm = regex.compile(r"\p{Sentence_Terminal}")
    accepted = [chr(i) for i in range(0x110000) if _TERMINAL.match(chr(i))]
    assert [c for c in accepted if c != "…" and not sterm.match(c)] == []
    assert len(accepted) >= 170


def test_english_abbreviation_rules_unchanged_by_the_wider_set():
    text = "We compare A vs. B here. See Fig. 2 now. Done."
    guarded = _cut_before(text, "B here", "See", "2 now", "Done")
    assert guarded.split(text) == ["We compare A vs. B here.", "See Fig. 2 now.", "Done."]
