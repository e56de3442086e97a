"""How sure a benchmark figure is: bootstrap intervals and paired tests over its units.

Every figure here is a mean over groups of a ratio of sums over units,

    value = mean_g ( sum_u num[g, u] / sum_u den[g, u] ),

which covers a plain mean over queries (one group, `den` = 1), CSFCube's two-fold figure (groups =
folds, `den` = 1 for the fold's queries, 0 elsewhere: the mean of the fold means) and the reviewer
loss (groups = draws, units = reviewers, loss over maximum loss). Resampling draws units (queries or
reviewers) with replacement and keeps each unit's numbers in every group, so the structure of the
figure is kept; a group left with no unit in a resample is left out of that resample's mean. Only units
that count in some group are drawn: a reviewer no prediction names is not a unit of the figure.
"""

from __future__ import annotations

import numbers
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np


def finite_number(value) -> bool:
    """Whether `value` is a finite real number: an int or float, numpy's included. A bool, a string ("2000"), a list
    ([1]), None, NaN, an infinity or an integer past float's range (10**400) is not: float() and `np.float64` read the
    first two as numbers, numpy read [1] as a finite array and raised OverflowError on 10**400, naming nothing."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy's bool is no numbers.Real
        return False
    try:
        return bool(np.isfinite(float(value)))
    except OverflowError:
        return False


@dataclass
class UnitScores:
    """`num`, `den`: (G, U) per group and unit; `units`: the U unit ids. A unit's `num` is 0 where its `den` is 0
    (ValueError naming the unit and group): a numerator with no denominator would count in the figure but not in a
    resample (a unit with no `den` is not drawn) or be dropped with its group, so the interval could miss the figure."""

    units: list[str]
    num: np.ndarray
    den: np.ndarray

    def __post_init__(self) -> None:
        self.num = np.atleast_2d(np.asarray(self.num, dtype=np.float64))
        self.den = np.atleast_2d(np.asarray(self.den, dtype=np.float64))
        if self.num.shape != self.den.shape or self.num.shape[1] != len(self.units):
            raise ValueError(f"num {self.num.shape} and den {self.den.shape} must be (G, {len(self.units)})")
        if not np.isfinite(self.num).all() or not np.isfinite(self.den).all() or (self.den < 0).any():
            raise ValueError("unit scores must be finite numbers and denominators non-negative")
        loose = np.argwhere((self.den == 0) & (self.num != 0))
        if loose.size:
            g, u = loose[0]
            raise ValueError(f"unit {self.units[u]!r} has numerator {float(self.num[g, u])!r} but denominator 0 in group {g}: a "
                             "unit's numerator must be 0 where its denominator is")

    @classmethod
    def means(cls, values: Mapping[str, float], groups: Mapping[str, Sequence[str]] | None = None) -> "UnitScores":
        """Per-unit values; with `groups` ({name: [unit, ...]}) the figure is the mean of group means. A unit named
        twice in one group (it would count once in the figure, twice in a plain mean of the list), a group naming no
        unit (it has no mean: the figure would be the other groups' mean unsaid) or a value that is not a finite
        number (`finite_number`: None for an undefined metric, NaN, a string) is a ValueError naming the group or unit."""
        units = sorted(values)
        if groups is None:
            groups = {"all": units}
        else:
            empty = [name for name, us in groups.items() if not us]
            if empty:
                raise ValueError(f"group {empty[0]!r} names no unit: a mean of group means needs a unit in every group")
        missing = sorted({u for us in groups.values() for u in us} - set(values))
        if missing:
            raise ValueError(f"no value for units {missing[:10]}")
        for name, us in groups.items():
            repeated = sorted(u for u, n in Counter(us).items() if n > 1)
            if repeated:
                raise ValueError(f"group {name!r} names units more than once: {repeated[:10]}")
        bad = [u for u in units if not finite_number(values[u])]
        if bad:
            raise ValueError(f"units {bad[:10]} have no finite value (e.g. {values[bad[0]]!r:.40}): unit scores must be "
                             "finite numbers (leave out the units where the metric is undefined)")
        col = {u: i for i, u in enumerate(units)}
        den = np.zeros((len(groups), len(units)))
        for g, us in enumerate(groups.values()):
            den[g, [col[u] for u in us]] = 1.0
        vals = np.array([values[u] for u in units], dtype=np.float64)
        return cls(units, den * vals, den)

    def value(self, weights: np.ndarray | None = None) -> float:
        """The figure; `weights` (U,) counts each unit that many times (a bootstrap resample)."""
        w = np.ones(len(self.units)) if weights is None else weights
        num, den = self.num @ w, self.den @ w
        keep = den > 0
        return float((num[keep] / den[keep]).mean()) if keep.any() else float("nan")

    def per_group(self) -> list[float]:
        """The ratio of each group (NaN for a group with no unit)."""
        den = self.den.sum(axis=1)
        return [float(n / d) if d > 0 else float("nan") for n, d in zip(self.num.sum(axis=1), den)]

    def _weights(self, n_boot: int, seed: int) -> np.ndarray:
        """(n_boot, U) resample counts over the units that count in some group (`den` > 0): a unit with nothing in
        any group (a reviewer a prediction leaves out) is not drawn, or a resample would hold fewer real units than
        the figure and its interval would widen. When every unit counts, the draws are those of all units."""
        rng = np.random.default_rng(seed)
        active = np.flatnonzero(self.den.sum(axis=0) > 0)
        if active.size == 0:
            active = np.arange(len(self.units))
        n = active.size
        draws = rng.integers(0, n, size=(n_boot, n))
        weights = np.zeros((n_boot, len(self.units)))
        weights[:, active] = np.stack([np.bincount(d, minlength=n) for d in draws])
        return weights

    def bootstrap(self, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
        """Percentile bootstrap interval of the figure over units; `n_boot` must be >= 1, `level` in (0, 1) and some
        group hold a unit (ValueError)."""
        if n_boot < 1:
            raise ValueError(f"a bootstrap interval needs at least one bootstrap sample, got n_boot={n_boot}")
        check_level(level)
        if not (self.den.sum(axis=1) > 0).any():
            raise ValueError("a bootstrap interval needs at least one unit (query or reviewer) with a score; the "
                             "figure has none")
        stats = np.array([self.value(w) for w in self._weights(n_boot, seed)])
        alpha = (1 - level) / 2
        return float(np.nanquantile(stats, alpha)), float(np.nanquantile(stats, 1 - alpha))


def check_level(level: float) -> None:
    """ValueError unless 0 < `level` < 1 (a share, not a percent: 95 or a negative level once gave numpy's error or
    an interval with its ends swapped)."""
    if not 0 < level < 1:
        raise ValueError(f"the interval's level must be a share between 0 and 1 (0.95 for 95%), got level={level}")


def _aligned(a: UnitScores, b: UnitScores) -> None:
    """ValueError, naming the units, unless both runs hold the same units (in the same order), groups and
    denominators."""
    if a.units != b.units:
        only_a, only_b = (sorted(set(x.units) - set(y.units), key=str) for x, y in ((a, b), (b, a)))
        raise ValueError(f"paired comparison needs the same units in both runs: only in the first {only_a[:10]}, only in "
                         f"the second {only_b[:10]}" if only_a or only_b else
                         "paired comparison needs the same units in the same order in both runs")
    if a.num.shape != b.num.shape:
        raise ValueError(f"paired comparison needs the same groups in both runs, got {a.num.shape[0]} and "
                         f"{b.num.shape[0]}")
    differ = np.flatnonzero(~np.isclose(a.den, b.den).all(axis=0))
    if differ.size:
        raise ValueError("paired comparison needs the same denominators (same pairs or queries) in both runs; units "
                         f"{[a.units[u] for u in differ[:10]]} differ")


def paired_test(a: UnitScores, b: UnitScores, n_perm: int = 10000, n_boot: int = 2000, seed: int = 0,
                level: float = 0.95) -> dict:
    """Paired randomisation test and bootstrap interval of `a - b` over units.

    The test swaps the two runs' numbers unit by unit at random; the p-value is the share of
    swaps (the observed assignment counted in) whose |difference| reaches the observed one, so
    two identical runs give p = 1. `n_units` counts the units that count in some group (`den` > 0; a reviewer
    neither prediction names is none). `n_perm` and `n_boot` must be >= 1, `level` in (0, 1) and the runs hold at
    least one unit (ValueError).
    """
    if n_perm < 1 or n_boot < 1:
        raise ValueError(f"a paired test needs at least one permutation and one bootstrap sample, got n_perm={n_perm}, "
                         f"n_boot={n_boot}")
    check_level(level)
    _aligned(a, b)
    if not a.units or not (a.den.sum(axis=1) > 0).any():
        raise ValueError("paired comparison needs at least one unit (query or reviewer) with a score; the runs have none")
    observed = a.value() - b.value()
    rng = np.random.default_rng(seed)
    hits = 1
    for _ in range(n_perm):
        swap = rng.random(len(a.units)) < 0.5
        na, nb = np.where(swap, b.num, a.num), np.where(swap, a.num, b.num)
        delta = UnitScores(a.units, na, a.den).value() - UnitScores(a.units, nb, a.den).value()
        hits += abs(delta) >= abs(observed) - 1e-12
    deltas = np.array([a.value(w) - b.value(w) for w in a._weights(n_boot, seed)])
    alpha = (1 - level) / 2
    return {
        "a": a.value(),
        "b": b.value(),
        "delta": observed,
        "p_value": hits / (n_perm + 1),
        "ci95": [float(np.nanquantile(deltas, alpha)), float(np.nanquantile(deltas, 1 - alpha))],
        "n_units": int((a.den.sum(axis=0) > 0).sum()),  # units that count in the figure, as resampled
    }


def table_row(bench: str, metric: str, value: float, ci, n: int, note: str = "") -> dict:
    """One figure of a results table (the suite's): the benchmark's title, the metric, its value, its 95%
    interval, the number of units it is the mean of, and a note."""
    return {"benchmark": bench, "metric": metric, "value": value, "ci95": list(ci), "n": n, "note": note}
