"""Guards of the papers reader (`aspire.data.papers`): lines read with bounded memory, text that no
encoder can see, and the paper id of a line too long to parse."""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Iterator

DEFAULT_MAX_LINE_BYTES = 1 << 20  # 1 MiB: a thousand times a long abstract
SURROGATE = re.compile("[\ud800-\udfff]")
# an integer id is whole only where a delimiter follows (not 12 of 12.5, of 1e5, or of a longer number or one the head cuts)
_ID_IN_HEAD = re.compile(rb'"paper_id"\s*:\s*("(?:[^"\\]|\\.){1,200}"|-?\d{1,30}(?=\s*[,}]))')


def bounded_lines(f, max_bytes: int | None) -> Iterator[tuple[bytes, int]]:
    """(line, 0) for each line of a binary file, or (its first bytes, its length) for a line longer
    than `max_bytes`: such a line is skipped 1 MiB at a time, never held whole."""
    while True:
        line = f.readline() if max_bytes is None else f.readline(max_bytes + 1)
        if not line:
            return
        if max_bytes is None or len(line) <= max_bytes or line.endswith(b"\n"):
            yield line, 0
            continue
        head, total = line[:4096], len(line)
        while not line.endswith(b"\n"):
            line = f.readline(1 << 20)
            if not line:
                break
            total += len(line)
        yield head, total


def invisible_text_reason(text: str) -> str | None:
    """Why no encoder could see `text` (a lone surrogate; no letter, digit, punctuation or symbol
    other than U+FFFD), or None when it has a visible character."""
    bad = SURROGATE.search(text)
    if bad:
        return f"holds a lone surrogate U+{ord(bad.group()):04X} at character {bad.start()} (not Unicode text)"
    if not has_visible(text):
        return f"has no visible character ({text[:24]!r})"
    return None


def has_visible(text: str) -> bool:
    """Whether `text` has a letter, digit, punctuation or symbol other than U+FFFD (what an encoder can see)."""
    return any(unicodedata.category(c)[0] in "LNPS" and c != "\ufffd" for c in text)


def id_in_head(head: bytes) -> str | None:
    """The paper id found in the first bytes of a line too long to parse, if any."""
    found = _ID_IN_HEAD.search(head)
    try:
        pid = None if found is None else str(json.loads(found.group(1)))
    except ValueError:  # a broken escape (JSONDecodeError) or bad bytes (UnicodeDecodeError)
        return None
    return None if pid is None or SURROGATE.search(pid) else pid
