"""Text cut for display (error messages, figure labels) without parting a letter from its combining marks.

Imports nothing but the standard library, so that the page server's request checks (`aspire.serve.requests`) and the
figures (`aspire.viz`, which loads torch) share it.
"""

from __future__ import annotations

import unicodedata


def cut_whole(text: str, n: int) -> str:
    """`text[:n]`, shorter where `text[n]` is a combining mark (`unicodedata.combining`): the letter it sits on goes
    with it ("e" + U+0301 is kept or dropped whole, never cut to a bare "e" or a dangling accent)."""
    while 0 < n < len(text) and unicodedata.combining(text[n]):
        n -= 1
    return text[:n]
