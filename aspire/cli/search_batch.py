"""A batch of queries on stderr (`aspire search --queries FILE`, or a `--query-file` of several papers): its
progress, and the lines that sum up its end, one each for its searches that found fewer than k papers
(`shortfall_summary`) and for those answered with a note (`note_summary`), in place of a warning a query."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence


class Progress:
    """`VERB i/n UNIT, R UNIT/s, ETA T s` lines on stderr (a batch's progress), at most one every `every`
    seconds, and a last one with the time taken; nothing when not `enabled`. The rate is that of the items
    after the first, which carries the one-time loading (the model, on the first query to encode)."""

    def __init__(self, verb: str, unit: str, total: int, enabled: bool = True, every: float = 2.0,
                 stream=None) -> None:
        self.verb, self.unit, self.total, self.enabled, self.every = verb, unit, total, enabled, every
        self.stream = stream
        self.done, self.start = 0, time.monotonic()
        self.first = self.last = self.start

    def step(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.done == 1:
            self.first = now  # the rate counts from here
        if not self.enabled:
            return
        if self.done >= self.total:
            elapsed = max(now - self.start, 1e-9)
            line = (f"{self.verb} {self.done}/{self.total} {self.unit} in {elapsed:.1f} s "
                    f"({self.done / elapsed:.1f} {self.unit}/s)")
        elif self.done > 1 and now - self.last >= self.every:
            rate = (self.done - 1) / max(now - self.first, 1e-9)
            eta = (self.total - self.done) / rate
            line = f"{self.verb} {self.done}/{self.total} {self.unit}, {rate:.1f} {self.unit}/s, ETA {eta:.0f} s"
        else:
            return
        self.last = now
        print(line, file=self.stream or sys.stderr, flush=True)


def shortfall_summary(shortfalls: Sequence[tuple[int, int, str]], n_queries: int) -> list[str]:
    """One line per reason for a batch's searches that found fewer than k papers (`Searcher.short_of_k`)."""
    by_reason: dict[str, list[tuple[int, int]]] = {}
    for found, k, reason in shortfalls:
        by_reason.setdefault(reason, []).append((found, k))
    lines = []
    for reason, cases in by_reason.items():
        found = [f for f, _ in cases]
        ks = sorted({k for _, k in cases})
        lines.append(f"{len(cases)} of {n_queries} queries found fewer papers than asked (k={'/'.join(map(str, ks))}; "
                     f"found {min(found)} to {max(found)}): {reason}")
    return lines


def note_summary(noted: Sequence[tuple[str, str]], n_queries: int, shown: int = 5) -> list[str]:
    """One line for a batch's searches answered with a note (`Searcher.say`; e.g. a BM25 stage whose selection shares
    no word with any paper), `noted` their `(query id, note)`, one a query: how many, the first `shown` ids and the
    first note (a warning a query once flooded stderr on a large batch)."""
    if not noted:
        return []
    ids = list(dict.fromkeys(qid for qid, _ in noted))  # an id once (two selections of one paper may share it)
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return [f"{len(noted)} of {n_queries} queries' answers come with a note (queries "
            f"{', '.join(map(repr, ids[:shown]))}{more}; --log-level DEBUG says each), the first: {noted[0][1]}"]
