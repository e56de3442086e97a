"""Sampled negatives: uniform over the corpus (`random`) or spread over it (`coverage`, one a cluster
of a k-means over whole-abstract vectors). Both are seeded: one `numpy` generator walks the anchors
in the order given, so the same papers, seed and settings give the same file. An anchor's
co-citation partners are never its negatives; `dropped["partner"]` counts the partners drawn (and
redrawn) before its `k` negatives were found."""

from __future__ import annotations

from collections import Counter

import numpy as np

from aspire.data.negatives.rank import Mined, as_matrix, check_paper_ids


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
    vectors (cosine geometry), seeded (any `seed` >= 0: scikit-learn takes it mod 2**32, unchanged below it), 10
    initialisations."""
    from sklearn.cluster import KMeans

    vecs = as_matrix(vectors)
    if not 2 <= n_clusters <= len(vecs):
        raise ValueError(f"coverage needs 2 <= clusters <= papers ({len(vecs)}), got clusters={n_clusters}")
    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    return KMeans(n_clusters=n_clusters, n_init=10, random_state=seed % 2**32).fit_predict(vecs)


def coverage_negatives(clusters: np.ndarray, partners: dict[str, set[str]], paper_ids: list[str], k: int,
                       seed: int) -> Mined:
    """One negative from each of `k` clusters other than the anchor's, clusters in a random order,
    a uniform non-partner member of each; a cluster holding only partners is passed over.
    `clusters` (N,) is the cluster of each paper of `paper_ids` (see `kmeans_clusters`); an id listed twice in
    `paper_ids` raises ValueError naming it."""
    check_paper_ids(paper_ids)
    clusters = np.asarray(clusters)
    if clusters.shape != (len(paper_ids),):
        raise ValueError(f"clusters must be (N,) with N = {len(paper_ids)} papers, got shape {clusters.shape}")
    labels = sorted(set(clusters.tolist()))
    members = {c: np.flatnonzero(clusters == c) for c in labels}
    rng = np.random.default_rng(seed)
    out, dropped = {}, 0
    for i, pid in enumerate(paper_ids):
        mine = partners.get(pid, set())
        out[pid] = []
        for c in rng.permutation([c for c in labels if c != clusters[i]]):
            if len(out[pid]) == k:
                break
            found, met = _first_non_partners(rng.permutation(members[c]), paper_ids, pid, mine, 1)
            out[pid] += found
            dropped += met
    sizes = Counter(clusters.tolist())
    return Mined(out, {"partner": dropped}, {"clusters": len(labels),
                                             "cluster_sizes": [sizes[c] for c in labels]})
