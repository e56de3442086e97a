"""Text helpers of the co-citation pipeline: named tokenizers (for the length filters) and
best-effort removal of citation markers (the patterns and their limits are in `aspire.data.cocite`).
"""

from __future__ import annotations

import functools
import re
from typing import Callable


def _regex_tokens(text: str) -> list[str]:
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
_NAME = r"(?:(?:van|von|de|der|del|di|la|le|du|dos|da)\s+)*[A-Z][\w'’`.-]*"
_AUTHORS = rf"{_NAME}(?:\s+(?:et\s+al\.?|(?:and|&)\s+{_NAME}))?"
_CITATION_PATTERNS = [  # narrative first, so "Petrov et al (2012)" goes whole
    re.compile(rf"\b{_AUTHORS},?\s*(?:\[|\()\s*{_YEAR}(?:\s*[,;]\s*{_YEAR})*\s*(?:\]|\))"),  # Petrov et al (2012)
    re.compile(rf"\((?=[^()]*\b{_YEAR}\b)[^()]*\)"),  # (Brants, 2000) · (Lin, 1998; Lin and Pantel, 2002)
    re.compile(rf"\[(?=[^\[\]]*\b{_YEAR}\b)[^\[\]]*\]"),  # [Ganchev et al, 2009]
    re.compile(r"\[\s*\d{1,3}(?:\s*[,;–-]\s*\d{1,3})*\s*\]"),  # [12] · [3, 4] · [5-7]
]


MARK = "\0"  # stands for one citation marker while cleaning


def clean_citations(text: str, placeholder: str = "[CIT]") -> str:
    """Replace citation markers by `placeholder` (best-effort regexes; see the module docstring).

    Runs of markers joined by commas, semicolons or "and" collapse into one placeholder.
    """
    out = text
    for _ in range(3):  # nested markers: "(e.g., (Lin, 1998))" needs the inner one first
        before = out
        for pattern in _CITATION_PATTERNS:
            out = pattern.sub(MARK, out)
        if out == before:
            break
    return finish_marks(out, placeholder)


def finish_marks(text: str, placeholder: str) -> str:
    """Collapse runs of `MARK` (and a bracket around one), squeeze spaces, write `placeholder`."""
    out = re.sub(rf"{MARK}(?:\s*(?:[,;]|and|&)?\s*{MARK})+", MARK, text)
    out = re.sub(rf"\(\s*{MARK}\s*\)|\[\s*{MARK}\s*\]", MARK, out)
    out = re.sub(r"\s+", " ", out).strip()
    return out.replace(MARK, placeholder)
