"""Year of publication (SciRepEval's year regression) on the ACL Anthology: Kendall's τ and RMSE (years) of a
ridge probe over frozen embeddings (the probe is the runner's, `aspire.evaluate.probes`). The papers are the
venue task's (`aspire.benchmarks.acl_formats`), so one encoding serves both; their years follow that
class-balanced draw (mostly 2016 on, as the corpus).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from aspire.benchmarks.acl_formats import SPLIT_FILE, labels_for, load_split, read_label_file


def kendall_tau(y: np.ndarray, pred: np.ndarray) -> float:
    """Kendall's τ-b between the true and predicted years (ties counted as scipy's `kendalltau` does)."""
    from scipy.stats import kendalltau

    return float(kendalltau(y, pred).statistic)


def rmse(y: np.ndarray, pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(y, float) - np.asarray(pred, float)) ** 2)))


def load_year_task(records: Mapping[str, dict], split_file: str | Path = SPLIT_FILE,
                   label_file: str | Path | None = None) -> tuple[dict[str, list[str]], dict[str, float]]:
    """({split: [paper id]}, {paper id: year}) of the committed split; years from the records or from a user's
    `label_file` of numbers (`read_label_file`)."""
    splits = {k: list(v) for k, v in load_split(split_file)["splits"]["venue_year"].items()}
    ids = [p for part in splits.values() for p in part]
    if label_file is not None:
        labels = read_label_file(label_file, "number", ids)
    else:
        labels = {p: float(records[p]["year"]) for p in ids if str(records[p].get("year") or "").isdigit()}
    labels_for(splits, labels, "number")
    return splits, labels  # type: ignore[return-value]
