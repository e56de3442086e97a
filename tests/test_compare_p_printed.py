"""`evaluate compare` prints a p-value as it writes it: never 0, as the permutation test's p is at least
1 / (permutations + 1)."""

from __future__ import annotations

import pytest

from aspire.evaluate.compare import format_comparison, format_p


def _row(p_value: float) -> dict:
    return {"MRR": {"a": 0.3197, "b": 0.2698, "delta": 0.0499, "ci95": [0.0337, 0.0665], "p_value": p_value}}


@pytest.mark.parametrize("n_perm", [20000, 100000])
def test_a_smallest_p_value_is_not_printed_as_zero(n_perm):
    """`compare --permutations 20000` of two clearly different context2doc runs wrote p = 1/20001 and printed
    0.0000."""
    p = 1 / (n_perm + 1)
    printed = format_comparison(_row(p))[1].split()[-1]
    assert float(printed) > 0
    assert float(printed) == pytest.approx(p, rel=0.05)


def test_p_values_of_four_decimals_print_as_before():
    assert format_comparison(_row(0.0205))[1].endswith("  0.0205")
    assert [format_p(p) for p in (1.0, 0.5, 1e-4, float("nan"))] == ["1.0000", "0.5000", "0.0001", "nan"]
