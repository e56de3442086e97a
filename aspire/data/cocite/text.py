"""Text helpers of the co-citation pipeline: named tokenizers (for the length filters) and
best-effort removal of citation markers (the patterns and their limits are in `aspire.data.cocite`).
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Callable


def _regex_tokens(text: str) -> list[str]:
    """Words, whole numbers, hyphen/apostrophe compounds and "[TAG]"s are one token each, any other non-space
    character one: "95.2%" is four tokens ("95", ".", "2", "%")."""
    return re.findall(r"\[[A-Z]+\]|\w+(?:['’-]\w+)*|[^\w\s]", text)


@functools.lru_cache(maxsize=1)
def _spacy_blank():
    import spacy

    return spacy.blank("en").tokenizer


TOKENIZERS: dict[str, Callable[[str], list[str]]] = {
    "regex": _regex_tokens,
    "whitespace": str.split,
    "spacy_blank": lambda text: [t.text for t in _spacy_blank()(text) if not t.is_space],
}


def get_tokenizer(name: str) -> Callable[[str], list[str]]:
    """A tokenizer by name: text -> list of token strings."""
    if name not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {name!r}; valid: {sorted(TOKENIZERS)}")
    return TOKENIZERS[name]


_YEAR = r"(?:1[89]|20)\d\d[a-z]?"
# Any upper- or title-case letter of the Basic Multilingual Plane starts a name ("Øvrelid", "Çetinoğlu", "Łukasz").
_UPPER = "".join(re.escape(c) for c in map(chr, range(0x10000)) if c.isupper() or c.istitle())
_PARTICLES = ("van", "von", "de", "der", "del", "di", "la", "le", "du", "dos", "da")
# a particle lower- or title-case: "De Felice and Pulman (2008)" went as "De [CIT]" (not "LE", a word of a table)
_NAME = rf"(?:(?:{'|'.join(_PARTICLES + tuple(p.title() for p in _PARTICLES))})\s+)*[{_UPPER}][\w'’`.-]*"
_AUTHORS = rf"{_NAME}(?:\s+(?:et\.?\s+al\.?|(?:and|&)\s+{_NAME}))?"  # "et. al" as real contexts write it
_CITATION_PATTERNS = [  # narrative first, so "Petrov et al (2012)" goes whole
    re.compile(rf"\b{_AUTHORS},?\s*(?:\[|\()\s*{_YEAR}(?:\s*[,;]\s*(?:{_YEAR}|[a-z]\b))*\s*(?:\]|\))"),  # Petrov et al (2012) · Collins (2002a,b)
    re.compile(rf"\((?=[^()]*\b{_YEAR}\b)[^()]*\)"),  # (Brants, 2000) · (Lin, 1998; Lin and Pantel, 2002)
    re.compile(rf"\[(?=[^\[\]]*\b{_YEAR}\b)[^\[\]]*\]"),  # [Ganchev et al, 2009]
    re.compile(r"\[\s*\d{1,3}(?:\s*[,;–-]\s*\d{1,3})*\s*\]"),  # [12] · [3, 4] · [5-7]
]


MARK = "\0"  # stands for one citation marker while cleaning (`free_mark`: another one when the text holds it)


def free_mark(text: str) -> str:
    """`MARK`, or when `text` already holds it, the first private-use character `text` does not hold: a character
    of the text itself is never taken for a citation marker."""
    if MARK not in text:
        return MARK
    private_use = itertools.chain(range(0xE000, 0xF900), range(0xF0000, 0x10FFFE))
    return next(c for c in map(chr, private_use) if c not in text)


def clean_citations(text: str, placeholder: str = "[CIT]", *, comma_and: bool = True) -> str:
    """Replace citation markers by `placeholder` (best-effort regexes; see the module docstring).

    Runs of markers joined by commas, semicolons, "and" or "&" (or, with `comma_and`, a comma or semicolon and one
    of them: "X (2002), and Y (2003)") collapse into one placeholder. Every other character is kept (whitespace runs
    become one space). `comma_and=False` is the cleaning context2doc's query texts were fixed with
    (`aspire.benchmarks.context2doc.query_text`).
    """
    mark = free_mark(text)
    out = text
    for _ in range(3):  # nested markers: "(e.g., (Lin, 1998))" needs the inner one first
        before = out
        for pattern in _CITATION_PATTERNS:
            out = pattern.sub(mark, out)
        if out == before:
            break
    return finish_marks(out, placeholder, mark, comma_and=comma_and)


def finish_marks(text: str, placeholder: str, mark: str = MARK, *, comma_and: bool = True) -> str:
    """Collapse runs of `mark` joined by ",", ";", "and", "&" or, with `comma_and`, ", and", "; and", ", &" or "; &"
    (and a bracket around one), squeeze spaces, write `placeholder` for each `mark` left. `mark` stands for one
    citation marker in `text`, so `text` must hold it nowhere else."""
    m = re.escape(mark)
    joiner = r"[,;]\s*(?:and|&)?|and|&" if comma_and else r"[,;]|and|&"  # ", and": 68 real contexts kept two markers
    out = re.sub(rf"{m}(?:\s*(?:{joiner})?\s*{m})+", mark, text)
    out = re.sub(rf"\(\s*{m}\s*\)|\[\s*{m}\s*\]", mark, out)
    out = re.sub(r"\s+", " ", out).strip()
    return out.replace(mark, placeholder)
