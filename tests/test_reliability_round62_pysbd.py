"""Round 62: pySBD's list-item pass (the `pysbd` splitter's, so the default's) rewrote the whole text once for each
list item ("(1)", "2.", "b)") next to the item before or after it in its list, and tested whether the list was already
broken into lines with a regex that backtracks over the rest of the line from every item: costs that grew with the
text's length times its list items (a real table of contents repeated to 128,000 characters: 83 s, now 0.37 s). It
now rewrites the text once for each kind of list and tests for a break in one pass, with the same text after the
pass as pySBD's own, so the same sentences."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest
from pysbd.lists_item_replacer import ListItemReplacer

from aspire.data import sentences
from aspire.data.sentences import PysbdSplitter
from tests.test_reliability_round61_sweep_sentences import _ours, _plain_pysbd

# Numbered items with a period or a bracket (one and two digits, after "-" and "⁃", a "for 2." that stops the line
# breaks), letters with a period or a bracket, bare ("b)", rewritten by pySBD once per neighbour, so "\r" piles up)
# or opened ("(b)", rewritten once), roman numerals, upper-case letters (never items) and numbers that repeat.
LISTS = [
    "We (1) train, (2) test and (3) ship. Then (1) again, (2) again. Finally 1) one 2) two 3) three.",
    "Steps: 1. load 2. clean 3. split. Later 1. load 2. clean. Also -1. minus -2. minus and ⁃1. dash ⁃2. dash.",
    "It has a) one, b) two and c) three parts. Again a) one b) two c) three a) four b) five. Ends a) here.",
    "Choose (a) this (b) that (c) more, or (a) none (b) all. Use a. first b. second c. third. A) Not B) items.",
    "Roman (i) one (ii) two (iii) three; bare i) one ii) two iii) three iv) four. Then (iv) four (v) five. Done.",
    "Numbers 9. nine 10. ten 11. eleven 12. twelve, 09. and 010. too. The for 2. a case. Then 2. b 3. c here.",
    "a) starts the text b) goes on. 1. x 2. y\n3. z\n(a) new (b) line\ni) more ii) here. Fig. 1) and Fig. 2) too.",
]


def _our_list_items() -> type:
    """The `pysbd` splitter's list-item pass (pySBD 0.3.4's, rewriting the text once per kind of list)."""
    return sentences._english_once_per_spelling().ListItemReplacer


def _list_pass(replacer: type, text: str) -> str:
    """The text after a list-item pass, as pySBD's `Processor.process` runs it."""
    return replacer(text.replace("\n", "\r")).add_line_break()


def test_list_pass_rewrites_the_text_once_per_kind_of_list_not_once_per_item(monkeypatch):
    """A text of 60 repeats costs as many whole-text rewrites as one of 2 repeats (pySBD ran the substitution over
    the whole text again for each "(1)", "2.", "b)" or "(ii)" of each repeat: 30 times as many)."""
    unit = "We (1) train, (2) test and (3) ship. It has a) one, b) two and c) three parts. Use (i) this (ii) that. "
    sub, counts = re.sub, []
    length = {"min": 0, "n": 0}

    def counted(pattern, repl, string, *args, **kwargs):
        if len(string) >= length["min"]:  # a pass over the whole text, not over a sentence of it
            length["n"] += 1
        return sub(pattern, repl, string, *args, **kwargs)

    monkeypatch.setattr(re, "sub", counted)
    splitter = PysbdSplitter()
    for repeats in (2, 60):
        text = unit * repeats
        length["min"], length["n"] = len(text) // 2, 0
        starts = splitter.starts(text)
        counts.append(length["n"])
        assert len(starts) == 8 * repeats  # pySBD cuts before "a)", "b)", "(i)"...: the list rules still ran
    assert counts[0] > 0
    assert counts[1] == counts[0], f"whole-text rewrites for 2 and 60 repeats: {counts}"


@pytest.mark.parametrize("text", LISTS + [" ".join(LISTS) * 4, "\n".join(LISTS * 2)])
def test_same_text_after_the_list_pass_as_pysbd_itself(text):
    ours = _our_list_items()
    assert ours is not ListItemReplacer
    assert _list_pass(ours, text) == _list_pass(ListItemReplacer, text), text[:80]


@pytest.mark.parametrize("text", LISTS + [" ".join(LISTS) * 4, "\n".join(LISTS * 2)])
def test_same_sentences_as_pysbd_itself(text):
    assert _ours(text) == _plain_pysbd(text), text[:80]


def test_bare_letter_items_keep_every_line_break_pysbd_gives_them():
    """pySBD rewrites a bare "b)" once for each "b)" next to its neighbours, one more "\\r" each time; "(b)" once."""
    ours = _our_list_items()
    text = "x a) one b) two a) three b) four (a) five (b) six"
    assert _list_pass(ListItemReplacer, text).count("\r\r") > 0  # the case this test is about
    assert _list_pass(ours, text) == _list_pass(ListItemReplacer, text)


def test_list_pass_never_runs_pysbds_backtracking_test_of_a_break(monkeypatch):
    """A long line of numbered items and no break ("1. Basic Concepts 2. Innate Immunity ...", a real CSFCube
    abstract) made pySBD's `re.search("♨.+(\\n|\\r).+♨")` start at every item and scan to the line's end."""
    unit = "Part I Basics 1. Basic Concepts 2. Innate Immunity (1) one (2) two 3) three 4) four Part II 3. Antigens "
    search, patterns = re.search, []

    def recorded(pattern, string, *args, **kwargs):
        patterns.append(pattern)
        return search(pattern, string, *args, **kwargs)

    text = unit * 20
    assert _ours(text) == _plain_pysbd(text)
    monkeypatch.setattr(re, "search", recorded)
    assert len(PysbdSplitter().starts(text)) > 20
    assert patterns  # pySBD's other tests still ran
    assert [p for p in patterns if isinstance(p, str) and p.startswith(("♨.+", "☝.+"))] == []


@pytest.mark.parametrize("mark, pattern", [("♨", "♨.+(\n|\r).+♨"), ("☝", "☝.+\n.+☝|☝.+\r.+☝")])
def test_break_test_answers_as_pysbds_regex(mark, pattern):
    """Every short text over the characters that matter, and random longer ones."""
    chars = [mark, "\n", "\r", "x"]
    texts = ["".join(t) for n in range(8) for t in itertools.product(chars, repeat=n)]
    rng = random.Random(0)
    texts += ["".join(rng.choice(chars + [" ", mark]) for _ in range(rng.randint(7, 40))) for _ in range(3000)]
    wrong = [t for t in texts if sentences._marks_across_a_break(t, mark) != (re.search(pattern, t) is not None)]
    assert wrong == [], f"{len(wrong)} texts answered unlike pySBD's regex, e.g. {wrong[:3]!r}"


@pytest.mark.slow
def test_same_list_pass_on_real_abstracts_and_a_long_real_line(shared_data):
    """Every CSFCube abstract, and the first 64,000 characters of them all joined on one line."""
    ours = _our_list_items()
    with open(shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8") as f:
        abstracts = [(json.loads(line)["paper_id"], " ".join(json.loads(line)["abstract"])) for line in f]
    for paper_id, text in abstracts:
        assert _list_pass(ours, text) == _list_pass(ListItemReplacer, text), f"paper {paper_id}"
    long_line = " ".join(text for _, text in abstracts)[:64000]
    assert _list_pass(ours, long_line) == _list_pass(ListItemReplacer, long_line)
