"""Year of publication (SciRepEval's year regression) on the ACL Anthology: Kendall's τ and RMSE (years) of a
ridge probe over frozen embeddings (the probe is the runner's, `aspire.evaluate.probes`). The papers are the
venue task's (`aspire.benchmarks.acl_formats`), so one encoding serves both; their years follow that
class-balanced draw (mostly 2016 on, as the corpus).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from aspire.benchmarks.acl_formats import SPLIT_FILE, venue_year_labels
from aspire.benchmarks.stats import finite_number  # public here too: a year or prediction is one


def kendall_tau(y: np.ndarray, pred: np.ndarray) -> float:
    """Kendall's τ-b between the true and predicted years (ties counted as scipy's `kendalltau` does); NaN, as
    undefined, when either side is constant (`paired_papers_test` then gives no p-value); ValueError unless one
    finite prediction per paper and at least one paper."""
    from scipy.stats import kendalltau

    _one_each(y, pred)
    return float(kendalltau(y, pred).statistic)


def rmse(y: np.ndarray, pred: np.ndarray) -> float:
    """Root mean squared error (years) of one finite prediction per paper, at least one paper (ValueError
    otherwise)."""
    _one_each(y, pred)
    return float(np.sqrt(np.mean((np.asarray(y, float) - np.asarray(pred, float)) ** 2)))


def load_year_task(records: Mapping[str, dict], split_file: str | Path = SPLIT_FILE,
                   label_file: str | Path | None = None) -> tuple[dict[str, list[str]], dict[str, float]]:
    """({split: [paper id]}, {paper id: year}) of the committed split; years from the records or from a user's
    `label_file` of numbers (`read_label_file`)."""
    return venue_year_labels(records, split_file, label_file, "year", "number", _year_label)  # type: ignore[return-value]


def _year_label(rec: dict) -> float:
    year = rec.get("year")
    # isdecimal, not isdigit: "²" is a digit that float() does not read (a bare ValueError naming no paper)
    if isinstance(year, bool) or not (isinstance(year, int) or isinstance(year, str) and year.isdecimal()):
        raise ValueError(f"ACL paper {rec['paper_id']}: year {year!r} is not a whole number")
    try:  # 400 digits were read as inf (a string) or an OverflowError naming no paper (an int)
        value = float(year)
    except OverflowError:
        value = float("inf")
    if not np.isfinite(value):
        raise ValueError(f"ACL paper {rec['paper_id']}: year {year!r:.60} is too large for a number")
    return value


def _one_each(y: np.ndarray, pred: np.ndarray) -> None:
    """ValueError unless `y` and `pred` are (N,) with one prediction per paper and at least one paper (over none,
    RMSE and τ were NaN with only numpy's and scipy's warnings to show it; (N, 1) predictions against (N,) years
    were broadcast to (N, N) differences, a silently wrong RMSE), each a finite number (`finite_number`: a NaN or
    None, as null in a results file, made RMSE NaN and τ the NaN of a constant side without a word; true and "2000"
    were read as the years 1 and 2000), naming the first paper's index."""
    shapes = (np.shape(y), np.shape(pred))
    if any(len(s) != 1 for s in shapes):
        raise ValueError(f"a year metric needs (N,) years and predictions, one per paper: got shapes {shapes[0]} "
                         f"and {shapes[1]}")
    if len(y) != len(pred):
        raise ValueError(f"a year metric needs one prediction per paper: {len(y)} years, {len(pred)} predictions")
    if len(y) == 0:
        raise ValueError("a year metric needs at least one paper, got none")
    for what, values in (("year", y), ("prediction", pred)):
        if isinstance(values, np.ndarray) and values.dtype.kind in "iuf":  # real numbers: checked at once
            finite = np.isfinite(values)
        else:  # a list or an array of bools, strings or objects: numpy read True as 1.0 and "2000" as 2000.0
            finite = np.array([finite_number(v) for v in values])
        if not finite.all():
            i = int(np.argmin(finite))
            raise ValueError(f"a year metric needs finite numbers: the {what} of paper {i} (of {len(y)}) is "
                             f"{values[i]!r:.40}")

