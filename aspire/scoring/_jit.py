"""The decorator of every compiled CPU kernel (`_sinkhorn_cpu`, `_newton_cpu`, `_distance_cpu`), stated once.

numba's on-disk cache, and its `error_model="numpy"`: a float division by zero gives inf or NaN, as in numpy and
torch, which the kernels assume (numba's default, "python", raises ZeroDivisionError instead).
"""

from __future__ import annotations

import functools

import numba

njit = functools.partial(numba.njit, cache=True, error_model="numpy")
