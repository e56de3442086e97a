"""Nearest-neighbour negatives by cosine of paper vectors, behind the false-negative guards.

For an anchor, every other paper with a non-zero vector is a candidate, ranked by cosine
similarity. The guards drop candidates that are likely unlabelled positives:
- `partner`: a co-citation partner of the anchor (it shares a co-cited set with it) is never its
  negative;
- `citation` (when `linked` is given): a paper citing the anchor or cited by it (its citation neighbour,
  `aspire.data.negatives.graph.citation_links`) is never its negative either; unlike a partner, it is no reference
  of the margin guard. On the real ACL co-citation examples the `svd` method's first negative was one for 48 of
  its 550 anchors, `nearest`'s (minilm, margin 0.05) for 23 of 602;
- `margin` (when `margin` is set): a candidate whose similarity to the anchor is above
  `reference - margin`, where `reference` is the anchor's similarity to its least (`min`) or most
  (`max`) similar partner. An anchor without a partner that has a non-zero vector has no reference and is
  not margin-guarded.
Then the `skip` nearest survivors are left out and the next `k` kept, nearest first. `dropped`
counts, per guard, the candidates it removed from above the last negative kept (all of them when
fewer than `k` are kept): the papers that would have been negatives but for the guard.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from aspire.config import is_whole


@dataclass
class Mined:
    """What a miner found: `negatives` {paper_id: negatives, best first}, `dropped` {guard: candidates
    it removed}, `notes` method details for the report."""

    negatives: dict[str, list[str]]
    dropped: dict[str, int] = field(default_factory=dict)
    notes: dict = field(default_factory=dict)


def as_matrix(vectors) -> np.ndarray:
    """(N, D) float32 numpy array of `vectors` (numpy, or a torch tensor on any device)."""
    if hasattr(vectors, "detach"):
        vectors = vectors.detach().float().cpu().numpy()
    return np.asarray(vectors, dtype=np.float32)


def check_k(k, name: str = "k (negatives per paper)") -> None:
    """ValueError unless `k` (negatives per paper) is a whole number >= 0 (a negative one was never reached: every
    candidate drawn, or all but the last, was kept)."""
    if not is_whole(k, 0):
        raise ValueError(f"{name} must be a whole number >= 0, got {k!r}")


def check_seed(seed) -> None:
    """ValueError unless `seed` is a whole number >= 0 (scikit-learn took -1 as 2**32 - 1, unsaid)."""
    check_k(seed, "seed")


def check_paper_ids(paper_ids: list[str]) -> None:
    """ValueError naming the ids that `paper_ids` lists more than once: a paper is one row and one anchor (a repeated
    id made a paper its own negative, listed one negative twice and left the last row's negatives under the id)."""
    repeated = [pid for pid, n in Counter(paper_ids).items() if n > 1]
    if repeated:
        raise ValueError(f"paper_ids lists {len(repeated)} paper id(s) more than once: {repeated[:10]}")


def check_vectors(vectors: np.ndarray, paper_ids: list[str]) -> None:
    """ValueError unless `vectors` is (N, D) with N = len(paper_ids) and every entry finite (the error
    names the papers whose vectors hold NaN or infinity: an encoder fault, never a paper to pass over)."""
    if vectors.ndim != 2 or len(vectors) != len(paper_ids):
        raise ValueError(f"vectors must be (N, D) with N = {len(paper_ids)} papers, got shape {vectors.shape}")
    bad = [pid for pid, ok in zip(paper_ids, np.isfinite(vectors).all(axis=1)) if not ok]
    if bad:
        raise ValueError(f"{len(bad)} paper vector(s) hold NaN or infinity: {bad[:10]}")


def partner_mask(partners: dict[str, set[str]], paper_ids: list[str], rows: range) -> np.ndarray:
    """(len(rows), N) bool: column j is a partner (or the paper itself) of the paper of each row."""
    index = {pid: i for i, pid in enumerate(paper_ids)}
    mask = np.zeros((len(rows), len(paper_ids)), dtype=bool)
    for r, i in enumerate(rows):
        mask[r, [index[p] for p in partners.get(paper_ids[i], ()) if p in index]] = True
        mask[r, i] = True
    return mask


def nearest_negatives(vectors, partners: dict[str, set[str]], paper_ids: list[str], k: int, skip: int = 0,
                      margin: float | None = None, reference: Literal["min", "max"] = "max",
                      chunk: int = 1024, linked: dict[str, set[str]] | None = None) -> Mined:
    """Nearest guarded candidates by cosine of `vectors` (N, D) (numpy or torch, rows in `paper_ids`
    order; norms do not matter); exact ties go to the earlier paper of `paper_ids`, and papers with one vector
    (a duplicated abstract) tie exactly, whatever `chunk`. A paper whose vector is zero has no neighbours and is
    no one's; `notes["papers_without_vector"]` lists them. A vector holding NaN or infinity raises ValueError
    naming its paper; so does an id listed twice in `paper_ids`. `linked` ({paper: its citation neighbours}, or None:
    no such guard) adds the `citation` guard and its count, `dropped["citation"]`. A NaN `margin` raises ValueError (every comparison with
    it is false: the guard was off, unsaid), as do a `reference` other than "min" or "max" (once read as "max") and a
    `chunk` (anchors scored at a time) below 1 (a negative one once mined no anchor, returning no negatives)."""
    check_paper_ids(paper_ids)
    check_k(k)
    check_k(skip, "skip (nearest survivors left out)")
    if reference not in ("min", "max"):
        raise ValueError(f"unknown margin reference {reference!r}; valid: ['max', 'min']")
    if not is_whole(chunk, 1):
        raise ValueError(f"chunk (anchors scored at a time) must be a whole number >= 1, got {chunk!r}")
    if margin is not None and margin != margin:
        raise ValueError(f"margin must be a number or None, got {margin!r}")
    vecs = as_matrix(vectors)
    check_vectors(vecs, paper_ids)
    norms = np.linalg.norm(vecs, axis=1)
    has_vec = norms > 0
    vecs = vecs / np.where(has_vec, norms, 1.0)[:, None]
    # Scored against the distinct vectors only: the kernel a product takes (and so its last bits) depends on the
    # chunk's shape, which once let two papers with one vector (a duplicated abstract) score apart, so their order,
    # the margin guard and `dropped` changed with `chunk`. Now each column of a row is one product, equal for equals.
    distinct, column_of = np.unique(vecs, axis=0, return_inverse=True)
    columns = vecs if len(distinct) == len(vecs) else distinct  # all distinct: no copy of (R, N) needed
    out: dict[str, list[str]] = {}
    dropped = {"partner": 0, "citation": 0, "margin": 0}
    guarded = 0
    for lo in range(0, len(paper_ids), chunk):
        rows = range(lo, min(lo + chunk, len(paper_ids)))
        sims = vecs[rows.start : rows.stop] @ columns.T  # (R, N), or (R, distinct) ...
        if columns is distinct:
            sims = sims[:, column_of.reshape(-1)]  # ... spread to (R, N)
        is_partner = partner_mask(partners, paper_ids, rows)
        self_ = np.zeros_like(is_partner)
        self_[np.arange(len(rows)), np.arange(rows.start, rows.stop)] = True
        anchor_has_vec = has_vec[rows.start : rows.stop, None]  # (R, 1): an anchor without one has no neighbour
        others = is_partner & ~self_ & has_vec[None, :] & anchor_has_vec  # the partners proper (none guarded then)
        neighbour = np.zeros_like(is_partner)  # citation neighbours that are no partner: never candidates
        if linked is not None:
            neighbour = partner_mask(linked, paper_ids, rows) & ~is_partner & has_vec[None, :] & anchor_has_vec
        candidate = ~is_partner & ~neighbour & has_vec[None, :] & anchor_has_vec
        too_close = np.zeros_like(candidate)
        if margin is not None:
            pick = np.min if reference == "min" else np.max
            with_ref = others.any(axis=1)
            fill = np.inf if reference == "min" else -np.inf
            ref = pick(np.where(others, sims, fill), axis=1)  # (R,), ±inf where no partner
            too_close = candidate & with_ref[:, None] & (sims > (ref - margin)[:, None])
            guarded += int(with_ref.sum())
        scores = np.where(candidate & ~too_close, sims, -np.inf)
        order = np.argsort(-scores, axis=1, kind="stable")[:, : skip + k]
        for r, i in enumerate(rows):
            kept = [j for j in order[r] if np.isfinite(scores[r, j])][skip:]
            out[paper_ids[i]] = [paper_ids[j] for j in kept]
            # a partner nearer than the last negative kept was passed over; with k = 0 none was (kept[-1] raised)
            floor = np.inf if k == 0 else scores[r, kept[-1]] if len(kept) == k else -np.inf
            dropped["partner"] += int((others[r] & (sims[r] > floor)).sum())
            dropped["citation"] += int((neighbour[r] & (sims[r] > floor)).sum())
            dropped["margin"] += int((too_close[r] & (sims[r] > floor)).sum())  # with k = 0, none either
    notes = {"papers_without_vector": [pid for pid, ok in zip(paper_ids, has_vec) if not ok]}
    if margin is not None:
        notes["margin_guarded_anchors"] = guarded
    else:
        del dropped["margin"]
    if linked is None:
        del dropped["citation"]
    return Mined(out, dropped, notes)
