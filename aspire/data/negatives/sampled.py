"""Sampled negatives: uniform over the corpus (`random`) or spread over it (`coverage`, one a cluster
of a k-means over whole-abstract vectors). Both are seeded: one `numpy` generator walks the anchors
in the order given, so the same papers, seed and settings give the same file. An anchor's
co-citation partners are never its negatives; `dropped["partner"]` counts the partners drawn (and
redrawn) before its `k` negatives were found. `k` must be a whole number >= 0 (ValueError otherwise: a negative `k`
was never met, so every candidate drawn was kept)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from aspire.data.negatives.rank import Mined, as_matrix, check_k, check_paper_ids, check_seed

NO_VECTOR = -1  # the cluster of a paper whose vector is zero (`kmeans_clusters`): no one's negative
_TWO53 = 2**53  # `Generator.random` gives j / 2**53 for a uniform whole j in [0, 2**53)


class _Draws:
    """Exactly uniform whole numbers below a bound, read from one seeded generator in blocks of `Generator.random`
    (one numpy call per block, not per draw): j = u * 2**53 is uniform on [0, 2**53); j % n is kept when j falls
    below the largest multiple of n (rejection), so every residue is equally likely."""

    def __init__(self, rng: np.random.Generator, block: int = 512):
        self.rng, self.block, self.buf, self.pos = rng, block, [], 0

    def below(self, n: int) -> int:
        limit = _TWO53 - _TWO53 % n
        while True:
            if self.pos == len(self.buf):
                self.buf = (self.rng.random(self.block) * _TWO53).astype(np.int64).tolist()
                self.pos = 0
            j = self.buf[self.pos]
            self.pos += 1
            if j < limit:
                return j % n


def _uniform_order(draws: _Draws, n: int):
    """0 .. n-1, each once, in a uniformly random order, drawn lazily: uniform draws with repeats skipped while
    fewer than half are out (each new one is uniform over those not yet out, two draws each on average), then a
    uniform permutation of the rest. Any prefix is distributed as that of `rng.permutation(n)`, at a cost in the
    length of the prefix taken (not in n) until half of them are out."""
    seen: set[int] = set()
    while 2 * len(seen) < n:
        j = draws.below(n)
        if j not in seen:
            seen.add(j)
            yield j
    rest = [j for j in range(n) if j not in seen]
    for t in range(len(rest) - 1, 0, -1):  # Fisher-Yates
        u = draws.below(t + 1)
        rest[t], rest[u] = rest[u], rest[t]
    yield from rest


def _first_non_partners(draws, paper_ids: list[str], anchor: str, partners: set[str],
                        want: int) -> tuple[list[str], int]:
    """The first `want` of `draws` (row numbers) that are neither `anchor` nor in `partners`, and how
    many partners came before them."""
    kept, met = [], 0
    for j in draws:
        if len(kept) == want:
            break
        if paper_ids[j] in partners:
            met += paper_ids[j] != anchor
        elif paper_ids[j] != anchor:
            kept.append(paper_ids[j])
    return kept, met


def random_negatives(partners: dict[str, set[str]], paper_ids: list[str], k: int, seed: int) -> Mined:
    """`k` papers drawn uniformly without replacement from the non-partners of each anchor. An id listed twice in
    `paper_ids` raises ValueError naming it."""
    check_paper_ids(paper_ids)
    check_k(k)
    rng = np.random.default_rng(seed)
    out, dropped = {}, 0
    for pid in paper_ids:
        mine = partners.get(pid, set())
        draws = rng.choice(len(paper_ids), size=min(len(paper_ids), k + len(mine | {pid})), replace=False)
        out[pid], met = _first_non_partners(draws, paper_ids, pid, mine, k)
        dropped += met
    return Mined(out, {"partner": dropped})


def kmeans_clusters(vectors, n_clusters: int, seed: int) -> np.ndarray:
    """(N,) cluster of each row of `vectors` (N, D), by scikit-learn `KMeans` on the unit-normalised
    vectors (cosine geometry), seeded (any `seed` >= 0, a ValueError otherwise: scikit-learn takes it mod 2**32, unchanged below it), 10
    initialisations. A row that is zero is a paper without a vector (as for `nearest_negatives`): it is left out of
    the k-means and gets the cluster -1 (`NO_VECTOR`), so `coverage_negatives` makes it no one's negative; the other
    rows are clustered exactly as they would be without it. ValueError unless 2 <= `n_clusters` <= the rows with a
    vector, and for a row holding NaN or infinity (naming the rows). Rows with fewer distinct vectors than
    `n_clusters` leave some labels unused (scikit-learn warns): `coverage_negatives` counts the clusters present."""
    check_seed(seed)
    from sklearn.cluster import KMeans

    vecs = as_matrix(vectors)
    bad = np.flatnonzero(~np.isfinite(vecs).all(axis=1)) if vecs.ndim == 2 else []
    if len(bad):  # a NaN row's norm is NaN, not > 0: it was taken for a paper without a vector, unsaid
        raise ValueError(f"{len(bad)} row(s) of vectors hold NaN or infinity: rows {bad[:10].tolist()}")
    norms = np.linalg.norm(vecs, axis=1)
    has_vec = norms > 0
    n = int(has_vec.sum())
    if not 2 <= n_clusters <= n:
        count = f"{n} with a vector, {len(vecs) - n} without" if n < len(vecs) else f"{n}"
        raise ValueError(f"coverage needs 2 <= clusters <= papers ({count}), got clusters={n_clusters}")
    vecs = vecs / np.maximum(norms[:, None], 1e-12)
    if n == len(vecs):  # every row has a vector: the k-means of all of them, as it always was
        return KMeans(n_clusters=n_clusters, n_init=10, random_state=seed % 2**32).fit_predict(vecs)
    labels = np.full(len(vecs), NO_VECTOR, dtype=np.int32)
    labels[has_vec] = KMeans(n_clusters=n_clusters, n_init=10, random_state=seed % 2**32).fit_predict(vecs[has_vec])
    return labels


def coverage_negatives(clusters: np.ndarray, partners: dict[str, set[str]], paper_ids: list[str], k: int,
                       seed: int) -> Mined:
    """One negative from each of `k` clusters other than the anchor's, clusters in a random order,
    a uniform non-partner member of each; a cluster holding only partners is passed over (its partners counted in
    `dropped["partner"]`, as are the partners met before the member taken: each member is drawn uniformly among
    those of the cluster not drawn yet). An anchor with fewer than `k` such clusters gets one negative from each.
    `clusters` (N,) is the cluster of each paper of `paper_ids` (see `kmeans_clusters`); an id listed twice in
    `paper_ids` raises ValueError naming it. A paper of cluster -1 (`NO_VECTOR`: its vector was zero) is, as in
    `nearest_negatives`, no one's negative and gets none; `notes["papers_without_vector"]` lists them (only when
    there are some), and `notes["clusters"]` and `notes["cluster_sizes"]` count the other papers.

    Near-linear: clusters and members are drawn lazily, uniform draws with repeats skipped (a full shuffle only of
    what is left once half of the clusters, or of a cluster, has been drawn), so an anchor costs about its `k`
    draws and its partners, not the sizes of the clusters (each was shuffled whole for every anchor: ~44 s on
    59k papers). The distribution is that of shuffling every cluster whole; the draws a seed gives changed in
    round 29 (a seed still gives the same negatives every time)."""
    check_paper_ids(paper_ids)
    check_k(k)
    clusters = np.asarray(clusters)
    if clusters.shape != (len(paper_ids),):
        raise ValueError(f"clusters must be (N,) with N = {len(paper_ids)} papers, got shape {clusters.shape}")
    values = clusters.tolist()
    rows = np.argsort(clusters, kind="stable")  # the rows of each cluster together, ascending within it
    found, starts, counts = np.unique(clusters[rows], return_index=True, return_counts=True)
    members = {c: rows[a : a + n].tolist() for c, a, n in zip(found.tolist(), starts.tolist(), counts.tolist())
               if c != NO_VECTOR}
    labels = sorted(members)
    place = {c: t for t, c in enumerate(labels)}
    draws = _Draws(np.random.default_rng(seed))
    out, dropped = {}, 0
    for i, pid in enumerate(paper_ids):
        mine = partners.get(pid, set())
        negs: list[str] = []
        out[pid] = negs
        if values[i] == NO_VECTOR:  # no vector, no cluster to stand apart from: no negatives (and no draws)
            continue
        own = place[values[i]]
        others = _uniform_order(draws, len(labels) - 1)  # positions among the labels other than the anchor's
        while len(negs) < k:
            t = next(others, None)
            if t is None:
                break
            group = members[labels[t + (t >= own)]]
            for j in _uniform_order(draws, len(group)):
                cand = paper_ids[group[j]]
                if cand in mine:
                    dropped += cand != pid
                elif cand != pid:
                    negs.append(cand)
                    break
    sizes = Counter(values)
    notes = {"clusters": len(labels), "cluster_sizes": [sizes[c] for c in labels]}
    without = [pid for pid, c in zip(paper_ids, values) if c == NO_VECTOR]
    if without:
        notes["papers_without_vector"] = without
    return Mined(out, {"partner": dropped}, notes)
