"""The co-citation graph of an examples directory: its co-cited sets, each paper's partners, the
SPECTER-style citation negatives and the truncated-SVD paper vectors of the co-citation matrix."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from aspire.data.cocite.config import SPLITS
from aspire.data.cocite.sets import cocited_partners
from aspire.data.negatives.rank import Mined, check_k, check_paper_ids, check_seed
from aspire.io import DataError, iter_jsonl, require


def read_groups(examples_dir: str | Path) -> list[dict]:
    """The co-cited sets of both splits (`groups.train.jsonl`, `groups.dev.jsonl` where present).

    A set whose `paper_ids` or `context_ids` is not a list of strings raises `DataError("FILE:LINE: ...")`.
    """
    groups = []
    for split in SPLITS:
        path = Path(examples_dir) / f"groups.{split}.jsonl"
        if path.is_file():
            for lineno, obj in iter_jsonl(path):
                require(obj, ("set_id", "paper_ids", "context_ids"), path, lineno)
                for key in ("paper_ids", "context_ids"):
                    value = obj[key]
                    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                        raise DataError(f"{path}:{lineno}: co-cited set {obj['set_id']!r}: {key} must be a list of "
                                        f"strings, got {value!r:.80}")
                groups.append(obj)
    if not groups:  # absent files, or files without a set (said as "no file" once, though both were there)
        found = [f"groups.{split}.jsonl" for split in SPLITS if (Path(examples_dir) / f"groups.{split}.jsonl").is_file()]
        raise ValueError(f"{examples_dir}: no groups.train.jsonl or groups.dev.jsonl"
                         + (f" holds a co-cited set ({', '.join(found)}: empty)" if found else ""))
    return groups


def cocitation_partners(groups: list[dict], same_work: Iterable[Iterable[str]] = ()) -> dict[str, set[str]]:
    """`{paper: every paper sharing a co-cited set with it, itself included}` (`cocited_partners` of the groups).
    `same_work`: disjoint groups of ids of one work (`aspire.data.acl.same_work_groups`), each read as one
    paper: its members are partners, and a set holding one member holds them all."""
    return cocited_partners((g["paper_ids"] for g in groups), same_work)


def _citing_graph(groups: list[dict]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """({paper: the papers citing it}, {citing paper: the papers it cites}) of the co-cited sets' contexts: the citing
    paper of a context is the part of its id before the last '#' (`W03-0407#L271`, `doc#7#p0s2`: the stages add one
    '#' to the citing paper's id). A context id without one raises ValueError naming its set."""
    citing_of: dict[str, set[str]] = defaultdict(set)
    cited_by: dict[str, set[str]] = defaultdict(set)
    for g in groups:
        for ctx in g["context_ids"]:
            citing, sep, _ = str(ctx).rpartition("#")  # the last '#': a citing paper's own id may hold one
            if not sep or not citing:
                raise ValueError(f"co-cited set {g['set_id']}: context id {ctx!r} does not name its citing paper "
                                 "(CITING_ID#...)")
            cited_by[citing].update(g["paper_ids"])
            for pid in g["paper_ids"]:
                citing_of[pid].add(citing)
    return citing_of, cited_by


def citation_links(groups: list[dict], same_work: Iterable[Iterable[str]] = ()) -> dict[str, set[str]]:
    """`{paper: the papers it cites or that cite it}`, read off the citing paper of each context of `groups`
    (`_citing_graph`), each paper as any of its `same_work` versions (a link to one version links them all). A
    citing paper can be a cited paper too (207 of the 602 papers of the real ACL co-citation examples are): one
    citing the anchor is its citation neighbour, SPECTER's positive, never its negative."""
    citing_of, cited_by = _citing_graph(groups)
    version = {pid: ids for ids in (list(ids) for ids in same_work) for pid in ids}
    direct: dict[str, set[str]] = defaultdict(set)
    for citing, cited in cited_by.items():
        for pid in cited:
            direct[citing].add(pid)
            direct[pid].add(citing)
    links: dict[str, set[str]] = {}
    for pid in direct.keys() | version.keys():
        links[pid] = {v for p in version.get(pid, [pid]) for x in direct.get(p, ()) for v in version.get(x, [x])}
    return links


def citation_negatives(groups: list[dict], paper_ids: list[str], k: int,
                       same_work: Iterable[Iterable[str]] = ()) -> Mined:
    """Citation-graph negatives of each paper of `paper_ids`: papers of `paper_ids` cited by a paper that cites it,
    never co-cited with it (a `same_work` group read as one paper: `cocitation_partners`) and never citing it or cited
    by it (`citation_links`: on the real examples 118 of the 1,813 negatives were), most shared citing papers first
    (ties by paper id). As for the other miners, a negative is always one of `paper_ids` (a paper the trainer has an
    abstract of): a paper of `groups` outside `paper_ids` is no one's negative. The citing paper of a context is the
    part of its id before the last '#' (`_citing_graph`). `dropped["partner"]` counts the partners (of `paper_ids`)
    so left out, `dropped["citation"]` the other papers left out as citation neighbours. An id listed twice in
    `paper_ids` raises ValueError naming it; so does a `k` that is not a whole number >= 0 (a negative one cut the
    last negatives off)."""
    check_paper_ids(paper_ids)
    check_k(k)
    known = set(paper_ids)
    same_work = [list(ids) for ids in same_work]
    partners = cocitation_partners(groups, same_work)
    citing_of, cited_by = _citing_graph(groups)
    links = citation_links(groups, same_work)
    out, dropped = {}, {"partner": 0, "citation": 0}
    for pid in paper_ids:
        cited = {n for c in citing_of[pid] for n in cited_by[c]} & known
        linked = links.get(pid, set())
        dropped["partner"] += len(cited & partners[pid] - {pid})
        dropped["citation"] += len(cited & linked - partners[pid])
        shared = Counter(n for c in citing_of[pid] for n in cited_by[c]
                         if n in known and n not in partners[pid] and n not in linked)
        out[pid] = [n for n, _ in sorted(shared.items(), key=lambda kv: (-kv[1], kv[0]))][:k]
    return Mined(out, dropped)


def cocitation_matrix(groups: list[dict], paper_ids: list[str]):
    """(N, N) symmetric `scipy.sparse.csr_matrix`, rows and columns in `paper_ids` order: entry (i, j),
    i != j, is the number of co-cited sets holding both papers. A paper of a set that is not in
    `paper_ids` raises ValueError naming the set; an id listed twice in `paper_ids` raises ValueError naming it."""
    check_paper_ids(paper_ids)
    from scipy import sparse

    index = {pid: i for i, pid in enumerate(paper_ids)}
    rows, cols = [], []
    for g in groups:
        missing = [pid for pid in g["paper_ids"] if pid not in index]
        if missing:
            raise ValueError(f"co-cited set {g['set_id']}: papers {missing} are not among the papers")
        members = sorted({index[pid] for pid in g["paper_ids"]})
        for i in members:
            for j in members:
                if i != j:
                    rows.append(i)
                    cols.append(j)
    n = len(paper_ids)
    ones = np.ones(len(rows), dtype=np.float32)
    return sparse.coo_matrix((ones, (rows, cols)), shape=(n, n)).tocsr()  # duplicates are summed


def svd_vectors(matrix, dim: int, seed: int) -> tuple[np.ndarray, dict]:
    """(N, d) float32 paper vectors U·Σ of a truncated SVD of `matrix` (scikit-learn `TruncatedSVD`, randomized,
    seeded by any `seed` >= 0 (a ValueError otherwise), taken mod 2**32 as scikit-learn takes seeds, computed in float32), d = min(dim, N - 1);
    and a note of d and the variance share it explains.

    A paper with no link (an all-zero row), or whose row of U·Σ is numerically zero, gets the exact zero vector,
    so `nearest_negatives` lists it among the papers without a vector instead of ranking by noise. Numerically
    zero is norm <= σ_max · sqrt(max(N, N')) · float32 eps (the float32 rounding of a row of U·Σ, not numpy's
    `matrix_rank` σ_max · N · eps: at N = 5,040 that cut rows of norm 1, papers linked once, whose directions were
    kept). Such rows are papers none of whose co-citation component's singular directions is among the d kept: the
    exact SVD gives them zero, the randomized one leaves ~1e-8 of σ_max (54 of the 614 papers of the real ACL
    co-citation examples at d = 64)."""
    from sklearn.decomposition import TruncatedSVD

    check_seed(seed)

    n = matrix.shape[0]
    if n < 2:
        raise ValueError(f"a truncated SVD needs at least 2 papers, got {n}")
    d = min(dim, n - 1)
    matrix = matrix.astype(np.float32)  # co-citation counts are exact in float32; the tolerance below is float32's
    svd = TruncatedSVD(n_components=d, algorithm="randomized", n_iter=10, random_state=seed % 2**32)
    vectors = svd.fit_transform(matrix).astype(np.float32)
    linked = np.asarray(abs(matrix).sum(axis=1)).ravel() > 0  # (N,) a row with an entry
    tol = float(svd.singular_values_.max()) * max(matrix.shape) ** 0.5 * np.finfo(np.float32).eps
    noise = linked & (np.linalg.norm(vectors, axis=1) <= tol)
    vectors[~linked | noise] = 0.0
    return vectors, {"dim": d, "explained_variance_ratio": round(float(svd.explained_variance_ratio_.sum()), 4)}
