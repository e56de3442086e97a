"""The one fusion of ranked lists, for search's stages and every benchmark's runs and ensembles alike:
normalised weighted sums and reciprocal-rank fusion.

A ranked list is `{doc: score}` (higher is better). Per list, scores are normalised (`z`: zero mean,
unit variance over the list, the population standard deviation as ranx's `zmuv`; `minmax`: onto [0, 1]; a
constant list: 0 for each of its documents, either way) and summed with weights; a document a list does not
hold adds nothing from it (ranx's `wsum` convention). `rrf` sums 1 / (k + rank), rank from 1, and
ignores the weights' scale except as multipliers. `parse_fusion("z:0.8")` reads the command-line form:
`z:ALPHA` / `minmax:ALPHA` put weight ALPHA on the first list and 1 - ALPHA on the second; `rrf[:K]`.

What is fused is the caller's protocol: search fuses each stage's own top list (a paper one stage did not
return adds nothing from it); a benchmark scoring fixed candidates fuses every candidate's score (the
context2doc fusion z-scores over all 768 candidates). The vocabulary is `METHODS`; `zmuv` and `min-max`,
the names ranx gives the same normalisations (and that results written before this module was the only
fusion record), are read as `z` and `minmax` by `fusion_method`. Equal to ranx's `fuse(norm=zmuv|min-max,
method=wsum)` and `rrf` (tests/test_fuse.py checks it), the fused list the union of the lists' documents as
ranx's, but for two edges: ranx divides by a spread of at least 1e-9 (a list whose scores differ by less is
scaled here to unit spread all the same), and its rrf ranks tied documents in its own sort's order.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

METHODS = ("z", "minmax", "rrf")
OLD_NAMES = {"zmuv": "z", "min-max": "minmax"}  # ranx's names for the same normalisations


def fusion_method(name: str) -> str:
    """The fusion method `name` in this module's vocabulary (`zmuv` -> `z`, `min-max` -> `minmax`);
    ValueError listing the valid names."""
    name = OLD_NAMES.get(name, name)
    if name not in METHODS:
        raise ValueError(f"unknown fusion {name!r}; valid: {', '.join(METHODS)}")
    return name


def parse_fusion(spec: str) -> tuple[str, float]:
    """`z:0.815` -> ("z", 0.815); `minmax:0.5`; `rrf` -> ("rrf", 60); `rrf:20` -> ("rrf", 20). A `z` / `minmax` weight
    that is missing (`z`), no number or outside [0, 1] is a ValueError saying which, as is an rrf K that is no number
    > 0."""
    method, _, value = spec.partition(":")
    if method not in METHODS:
        raise ValueError(f"unknown fusion {spec!r}; valid: z:ALPHA, minmax:ALPHA (0 <= ALPHA <= 1), rrf[:K]")
    try:
        number = float(value) if value else (60.0 if method == "rrf" else float("nan"))
    except ValueError:
        number = float("nan")
    if method == "rrf" and not (np.isfinite(number) and number > 0):  # an infinite K scores every document 0
        raise ValueError(f"rrf's K must be a finite number > 0, got {value!r}")
    if method != "rrf" and not 0.0 <= number <= 1.0:  # `z` alone was told its weight was out of range, as `z:2` is
        given = f"got {value!r}" if value else "none given"
        raise ValueError(f"fusion {spec!r}: the weight on the first list must be in [0, 1] ({method}:ALPHA), {given}")
    return method, number


def normalise(values: np.ndarray, method: str) -> np.ndarray:
    """`z`: zero mean, unit (population) variance; `minmax`: onto [0, 1]; constant values: all 0 for either.

    Constant means equal values: their computed spread can be rounding alone (three 0.1s: 1.4e-17), which once
    z-scored each to -1 (a constant list then moved its documents below the ones it does not hold). Any other
    `method` is a ValueError naming the two.

    Both are computed on the values scaled by a power of two onto [-1, 1] (neither changes with the scale, and
    scaling by a power of two is exact, so a result already in range is bit for bit the same): finite scores whose
    spread or squares pass the float range (1e308 and -1e308, or 1e200 and -1e200) once z-scored to 0 and 0 or
    min-max-ed to NaN, and subnormal ones (1e-320, 3e-320) z-scored to 0s.

    The result does not hang on the values' order: `z` takes the mean and spread of the values sorted (summed in
    the order given, 0.1, 0.2, 0.3 and 0.3, 0.2, 0.1 have means a last bit apart, and two documents whose fused
    scores are equal were ranked by the lists' document order, not by id)."""
    if method not in ("z", "minmax"):  # anything else was min-max, unsaid
        raise ValueError(f"unknown normalisation {method!r}; valid: z, minmax")
    if not values.size or not values.max() > values.min():
        return np.zeros_like(values)
    values = np.ldexp(values, -np.frexp(np.abs(values).max())[1])  # exact: |values| < 1, the largest >= 0.5
    if method == "z":  # mean and spread of the values sorted: of the values, whatever their order
        ordered = np.sort(values)
        sd = ordered.std()
        return (values - ordered.mean()) / sd if sd > 0 else np.zeros_like(values)
    lo, hi = values.min(), values.max()
    return (values - lo) / (hi - lo)


def check_weights(weights: Sequence[float], n: int) -> list[float]:
    """`weights` as floats when there is one for each of `n` lists, each finite and >= 0, with a positive sum;
    else ValueError (all-zero weights would rank by document id, a negative one would reverse a list)."""
    weights = [float(w) for w in weights]
    if len(weights) != n:
        raise ValueError(f"{len(weights)} fusion weights for {n} lists")
    bad = [w for w in weights if not (np.isfinite(w) and w >= 0)]
    if bad or not sum(weights) > 0:
        raise ValueError(f"fusion weights must be finite, >= 0 and sum to more than 0, got "
                         f"{', '.join(f'{w:g}' for w in weights)}")
    return weights


def fuse_ranked(lists: Sequence[Mapping[str, float]], weights: Sequence[float] | None = None,
                method: str = "z", rrf_k: float = 60.0) -> list[tuple[str, float]]:
    """One fused list `[(doc, score), ...]` best first (ties by document id): every document any list holds (the
    union, uncut, as ranx's `fuse` keeps it: a caller wanting a top k cuts it); `weights` (default equal) as
    `check_weights` allows. With `rrf`, a list's rank of documents with equal scores is the list's own order
    (ranx ranks tied documents in its sort's order, so with ties the two can differ), and `rrf_k` must be finite
    and > 0. A score that is not a finite number (a string or bool too) is a ValueError naming the list and
    document; no list at all is a ValueError (it was once blamed on the weights, given or not). Each document's
    weighted contributions are summed exactly (`math.fsum`) and each list normalised whatever the order of its
    documents (`normalise`), so equal sums tie whatever the order of the lists or of their documents. Weights so large
    (1e308) that a weighted score or a document's sum passes the float range are a ValueError naming the weight and
    document (a fused score was inf, unsaid, or fsum raised bare); they are not rescaled, so a fused score is always
    the weighted sum itself."""
    method = fusion_method(method)
    if not len(lists):
        raise ValueError("fusion needs at least one ranked list, got none")
    weights = check_weights([1.0] * len(lists) if weights is None else weights, len(lists))
    if method == "rrf" and not (np.isfinite(rrf_k) and rrf_k > 0):  # K <= 0 divides by zero, an infinite K zeroes all
        raise ValueError(f"rrf's K must be a finite number > 0, got {rrf_k!r}")
    parts: dict[str, list[float]] = {}  # summed by math.fsum: exact, so equal sums tie whatever the lists' order
    for i, (scores, w) in enumerate(zip(lists, weights)):
        if not scores:
            continue
        docs = list(scores)
        for d in docs:  # else np.array read "0.5" as 0.5 and True as 1.0, unsaid
            if isinstance(scores[d], (str, bytes, bool, np.bool_)):
                raise ValueError(f"fusion needs numeric scores: list {i} scores document {d!r} {scores[d]!r}")
        values = np.array([scores[d] for d in docs], dtype=np.float64)
        if not np.isfinite(values).all():
            bad = int(np.flatnonzero(~np.isfinite(values))[0])
            raise ValueError(f"fusion needs finite scores: list {i} scores document {docs[bad]!r} {values[bad]}")
        if method == "rrf":
            order = np.argsort(-values, kind="stable")
            contrib = np.empty_like(values)
            contrib[order] = 1.0 / (rrf_k + np.arange(1, len(values) + 1))
        else:
            contrib = normalise(values, method)
        for d, c in zip(docs, contrib.tolist()):
            if not math.isfinite(w * c):  # else an inf fused score, unsaid (fsum of inf and -inf: a bare error)
                raise ValueError(f"fusion weight {w:g} of list {i} overflows: times the normalised score {c:g} of "
                                 f"document {d!r} it passes the float range")
            parts.setdefault(d, []).append(w * c)
    # a running sum rounded by order: rrf ranks (1, 7, 2) and (2, 1, 7) over three lists, K 60, summed to
    # 0.04744784801534369 and 0.0474478480153437, and a tie was not broken by document id
    fused = {}
    for d, p in parts.items():
        try:
            fused[d] = math.fsum(p)
        except OverflowError:  # once raised bare: "intermediate overflow in fsum"
            raise ValueError(f"fusion weights {', '.join(f'{w:g}' for w in weights)} overflow: the weighted scores "
                             f"{', '.join(f'{x:g}' for x in p)} of document {d!r} sum past the float range") from None
    return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))


def fusion_weights(method: str, value: float, n: int) -> list[float]:
    """Weights for `n` lists: ALPHA and 1 - ALPHA for two lists with z / minmax, else equal."""
    if method != "rrf" and n == 2:
        return [value, 1.0 - value]
    return [1.0] * n
