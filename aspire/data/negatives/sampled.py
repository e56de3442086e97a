"""Sampled negatives: uniform over the corpus (`random`) or spread over it (`coverage`, one a cluster
of a k-means over whole-abstract vectors). Both are seeded: one `numpy` generator walks the anchors
in the order given, so the same papers, seed and settings give the same file. An anchor's
co-citation partners are never its negatives; `dropped["partner"]` counts the partners drawn (and
redrawn) before its `k` negatives were found."""

from __future__ import annotations

from collections import Counter

import numpy as np

from aspire.data.negatives.rank import Mined, as_matrix, check_paper_ids

NO_VECTOR = -1  # the cluster of a paper whose vector is zero (`kmeans_clusters`): no one's negative


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
    initialisations. A row that is zero is a paper without a vector (as for `nearest_negatives`): it is left out of
    the k-means and gets the cluster -1 (`NO_VECTOR`), so `coverage_negatives` makes it no one's negative; the other
    rows are clustered exactly as they would be without it. ValueError unless 2 <= `n_clusters` <= the rows with a
    vector."""
    from sklearn.cluster import KMeans

    vecs = as_matrix(vectors)
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
    a uniform non-partner member of each; a cluster holding only partners is passed over.
    `clusters` (N,) is the cluster of each paper of `paper_ids` (see `kmeans_clusters`); an id listed twice in
    `paper_ids` raises ValueError naming it. A paper of cluster -1 (`NO_VECTOR`: its vector was zero) is, as in
    `nearest_negatives`, no one's negative and gets none; `notes["papers_without_vector"]` lists them (only when
    there are some), and `notes["clusters"]` and `notes["cluster_sizes"]` count the other papers."""
    check_paper_ids(paper_ids)
    clusters = np.asarray(clusters)
    if clusters.shape != (len(paper_ids),):
        raise ValueError(f"clusters must be (N,) with N = {len(paper_ids)} papers, got shape {clusters.shape}")
    labels = sorted(set(clusters.tolist()) - {NO_VECTOR})
    members = {c: np.flatnonzero(clusters == c) for c in labels}
    rng = np.random.default_rng(seed)
    out, dropped = {}, 0
    for i, pid in enumerate(paper_ids):
        mine = partners.get(pid, set())
        out[pid] = []
        if clusters[i] == NO_VECTOR:  # no vector, no cluster to stand apart from: no negatives (and no draws)
            continue
        for c in rng.permutation([c for c in labels if c != clusters[i]]):
            if len(out[pid]) == k:
                break
            found, met = _first_non_partners(rng.permutation(members[c]), paper_ids, pid, mine, 1)
            out[pid] += found
            dropped += met
    sizes = Counter(clusters.tolist())
    notes = {"clusters": len(labels), "cluster_sizes": [sizes[c] for c in labels]}
    without = [pid for pid, c in zip(paper_ids, clusters.tolist()) if c == NO_VECTOR]
    if without:
        notes["papers_without_vector"] = without
    return Mined(out, {"partner": dropped}, notes)
