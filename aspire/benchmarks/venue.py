"""Venue classification (SciRepEval's FoS / MeSH stand-in) on the ACL Anthology: the venue family of a paper from
its title and abstract, scored by macro-F1 of a linear probe over frozen embeddings (the probe is the runner's,
`aspire.evaluate.probes`).

Classes are communities or topics (`CLASSES`: Anthology venue ids -> class). Labelling rule for a paper's
`venues` list: the generic tags `ws` (workshop) and `ijcnlp` (co-located) are ignored; the remaining venues are
mapped to classes; a paper whose venues give exactly one class gets it; one whose venues give `main` and one
other class gets the other (e.g. LREC-COLING 2024 papers, `lrec` + `coling`, are `lrec`: the specific community
wins over the main conference); two or more non-main classes, or any venue outside `CLASSES`, leave the paper
unlabelled (not in the task). Splits: `aspire.benchmarks.acl_formats`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from aspire.benchmarks.acl_formats import SPLIT_FILE, venue_year_labels

MAIN = "main"
CLASSES: dict[str, str] = {
    **{v: MAIN for v in ("acl", "emnlp", "naacl", "eacl", "coling", "findings", "aacl")},
    "tacl": "journal", "cl": "journal",
    "lrec": "lrec", "semeval": "semeval", "wmt": "wmt", "iwslt": "iwslt", "sigdial": "sigdial",
    "conll": "conll", "bea": "bea", "bionlp": "bionlp", "clinicalnlp": "bionlp", "inlg": "inlg",
}
IGNORED = frozenset({"ws", "ijcnlp"})
RULE = ("venues minus ws/ijcnlp mapped by CLASSES; one class -> it; main + one other -> the other; "
        "two non-main classes or an unmapped venue -> unlabelled")


def venue_class(venues: Sequence[str] | None) -> str | None:
    """The class of a paper's `venues` by the rule of the module docstring, or None (unlabelled)."""
    names = [v for v in venues or () if v not in IGNORED]
    if not names or any(v not in CLASSES for v in names):
        return None
    classes = {CLASSES[v] for v in names}
    others = classes - {MAIN}
    if len(others) > 1:
        return None
    return next(iter(others)) if others else MAIN


def macro_f1(y: np.ndarray, pred: np.ndarray) -> float:
    """Macro-averaged F1 over the classes present in `y` or `pred` (a class never predicted has F1 0); `y` and
    `pred` (N,) one per paper, N >= 1, arrays or lists (ValueError otherwise)."""
    y, pred = np.asarray(y), np.asarray(pred)  # a list compared with a class is one False: every F1 was 0
    if len(y) != len(pred):
        raise ValueError(f"macro-F1 needs one prediction per paper: {len(y)} labels, {len(pred)} predictions")
    if len(y) == 0:  # the mean over no class was NaN (numpy's "Mean of empty slice" warning its only sign)
        raise ValueError("macro-F1 needs at least one paper, got none")
    classes = np.unique(np.concatenate([y, pred]))
    f1 = []
    for c in classes:
        tp = np.sum((pred == c) & (y == c))
        fp, fn = np.sum((pred == c) & (y != c)), np.sum((pred != c) & (y == c))
        f1.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return float(np.mean(f1))


def load_venue_task(records: Mapping[str, dict], split_file: str | Path = SPLIT_FILE,
                    label_file: str | Path | None = None) -> tuple[dict[str, list[str]], dict[str, str]]:
    """({split: [paper id]}, {paper id: class}) of the committed split; the classes from each paper's venues
    (`venue_class`), or from a user's `label_file` (`read_label_file`) over the same papers."""
    return venue_year_labels(records, split_file, label_file, "venue", "class", _venue_label)  # type: ignore[return-value]


def _venue_label(rec: dict) -> str | None:
    venues = rec.get("venues")
    if venues is not None and (not isinstance(venues, list) or not all(isinstance(v, str) for v in venues)):
        raise ValueError(f"ACL paper {rec['paper_id']}: 'venues' is {venues!r}, not a list of venue ids")
    return venue_class(venues)
