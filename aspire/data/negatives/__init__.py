"""Negatives for training, written as the file the trainer reads (`data.hard_negatives`).

    python -m aspire.data hard-negatives --examples runs/cocite-acl/5_examples --out runs/neg/citation
    python -m aspire.data hard-negatives --examples runs/cocite-acl/5_examples --out runs/neg/nearest \
        method=nearest model=minilm margin=0.05
    python -m aspire.data hard-negatives --examples runs/cocite-acl/5_examples --out runs/neg/svd method=svd

Five samplers over the papers of an examples directory (`abstracts.jsonl`, `groups.{train,dev}.jsonl`):
- `citation` (SPECTER-style citation-graph negatives): the papers that a paper citing the anchor
  also cites, but never in one sentence with the anchor, nor citing it or cited by it (a citing paper can be one of
  the papers: `dropped["citation"]` counts those left out); most shared citing papers first. The
  citing paper of a context is the part of its id before the last `#` (`W03-0407#L271`).
- `nearest`: the anchor's nearest papers by an encoder's whole-abstract vector (cosine), after the
  false-negative guards of `aspire.data.negatives.rank` (partners; citation neighbours; with `margin`, candidates
  scoring above the anchor's partner similarity less `margin`) and the `skip` nearest survivors.
- `random`: `k` papers drawn uniformly (`seed`).
- `coverage`: one paper from each of `k` k-means clusters (`clusters`, over the encoder's
  whole-abstract vectors) other than the anchor's, so the negatives spread over the corpus (`seed`).
- `svd` (bibliographic IR): the nearest papers in the space of a truncated SVD (`dim`) of the
  co-citation matrix, never linked to the anchor (a partner or a citation neighbour); `margin` and `skip` as for
  `nearest`.
An anchor's co-citation partners (every paper sharing a co-cited set with it, in either split) are never its
negatives, nor are its other versions (`same_work_groups`: its normalised title or abstract under another id, such
as its journal version): one work is read as one paper, whose versions share their partners. Nor, for the ranked
methods (citation, nearest, svd), are its citation neighbours (`citation_links`: a paper citing it or cited by it,
which they rank near it; the sampled ones draw it no likelier than any other paper). Every paper gets a
line `{"paper_id", "negatives": [...]}`, at most `k` negatives, best first (for the sampled methods, in draw order);
`report.json` counts the papers left with none and lists them, counts what each guard dropped (`dropped`; the
partner guard's count takes in the versions, `citation` counts the neighbours) and lists the groups of versions
(`same_work`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal

from aspire.config import check_ranges, ranged, to_dict
from aspire.data.acl import same_work_groups
from aspire.data.cocite.config import REPORT
from aspire.data.cocite.stages import begin_stage, end_stage
from aspire.data.negatives.graph import (
    citation_links,
    citation_negatives,
    cocitation_matrix,
    cocitation_partners,
    read_groups,
    svd_vectors,
)
from aspire.data.negatives.rank import Mined, as_matrix, check_vectors, nearest_negatives
from aspire.data.negatives.sampled import coverage_negatives, kmeans_clusters, random_negatives
from aspire.data.papers import read_paper_map
from aspire.io import AtomicJsonl, write_json

if TYPE_CHECKING:
    from torch import Tensor

    from aspire.data.papers import Paper

__all__ = [
    "METHODS", "OUT_FILE", "HardNegativesConfig", "Mined", "citation_links", "citation_negatives", "cocitation_matrix",
    "cocitation_partners", "coverage_negatives", "kmeans_clusters", "mine_hard_negatives", "nearest_negatives",
    "random_negatives", "read_groups", "same_work_groups", "svd_vectors",
]

OUT_FILE = "hard_negatives.jsonl"
METHODS = ("citation", "nearest", "random", "coverage", "svd")
ENCODED = ("nearest", "coverage")  # the methods that need whole-abstract vectors


@dataclass
class HardNegativesConfig:
    method: Literal["citation", "nearest", "random", "coverage", "svd"] = "citation"
    k: int = ranged(10, ge=1)  # negatives kept per paper
    seed: int = ranged(0, ge=0)  # random, coverage (k-means and draws), svd: any int >= 0
    skip: int = ranged(0, ge=0)  # nearest, svd: the nearest guarded candidates left out first
    margin: float | None = ranged(None)  # nearest, svd: the margin guard (None: off; finite: NaN turned it off unsaid)
    margin_reference: Literal["min", "max"] = "max"  # nearest, svd: the most (or least) similar partner
    clusters: int = ranged(16, ge=2)  # coverage: k-means clusters
    dim: int = ranged(64, ge=1)  # svd: components
    model: str = "minilm"  # nearest, coverage: the encoder of the whole-abstract vectors
    max_length: int | None = ranged(None, ge=1)  # nearest, coverage: word pieces per abstract (None: the model's limit)
    batch_size: int = ranged(32, ge=1)  # nearest, coverage


# the options that only some methods read; setting one for another method is an error, not ignored
METHOD_OPTIONS = {
    "seed": ("random", "coverage", "svd"), "skip": ("nearest", "svd"), "margin": ("nearest", "svd"),
    "margin_reference": ("nearest", "svd"), "clusters": ("coverage",), "dim": ("svd",),
    "model": ENCODED, "max_length": ENCODED, "batch_size": ENCODED,
}


def check_config(cfg: HardNegativesConfig) -> None:
    """ValueError for an unknown method or `margin_reference`, k < 1, skip or seed < 0, a field outside its `ranged` bounds (`ConfigError`
    naming it: a NaN or infinite `margin`, a fractional `k`), or an option set away from its default that the method
    does not read."""
    if cfg.method not in METHODS:
        raise ValueError(f"unknown hard-negative method {cfg.method!r}; valid: {list(METHODS)}")
    for name in ("k", "skip", "seed"):  # None or a string was a TypeError from `<` below
        if isinstance(getattr(cfg, name), bool) or not isinstance(getattr(cfg, name), (int, float)):
            raise ValueError(f"{name} must be an integer, got {getattr(cfg, name)!r}")
    if cfg.margin_reference not in ("min", "max"):  # refused before any paper is encoded (rank's error came after)
        raise ValueError(f"margin_reference must be 'min' or 'max', got {cfg.margin_reference!r}")
    if cfg.k < 1 or cfg.skip < 0:
        raise ValueError(f"k must be at least 1 and skip at least 0, got k={cfg.k}, skip={cfg.skip}")
    if cfg.seed < 0:  # refused before any paper is encoded (numpy's and scikit-learn's errors came after)
        raise ValueError(f"seed must be at least 0, got seed={cfg.seed}")
    check_ranges(cfg)  # as `load_config` does: a config built in Python (margin=nan switched the guard off unsaid)
    default = HardNegativesConfig()
    unused = [name for name, methods in METHOD_OPTIONS.items()
              if cfg.method not in methods and getattr(cfg, name) != getattr(default, name)]
    if unused:
        raise ValueError(f"method {cfg.method!r} does not use the option(s) {unused}")


def _mine(cfg: HardNegativesConfig, groups: list[dict], order: list[str], vectors,
          same_work: list[list[str]]) -> Mined:
    partners = cocitation_partners(groups, same_work)
    if cfg.method == "citation":
        return citation_negatives(groups, order, cfg.k, same_work)
    if cfg.method == "random":
        return random_negatives(partners, order, cfg.k, cfg.seed)
    if cfg.method == "coverage":
        return coverage_negatives(kmeans_clusters(vectors, cfg.clusters, cfg.seed), partners, order, cfg.k, cfg.seed)
    notes = {}
    if cfg.method == "svd":
        vectors, notes = svd_vectors(cocitation_matrix(groups, order), cfg.dim, cfg.seed)
    # the ranked methods rank a paper citing the anchor (or cited by it) near it: never its negative either; the
    # sampled ones draw uniformly, such a paper no likelier than any other
    mined = nearest_negatives(vectors, partners, order, cfg.k, cfg.skip, cfg.margin, cfg.margin_reference,
                              linked=citation_links(groups, same_work))
    mined.notes.update(notes)
    return mined


def mine_hard_negatives(examples_dir: str | Path, out_dir: str | Path,
                        cfg: HardNegativesConfig = HardNegativesConfig(),
                        encode: Callable[[list[Paper]], Tensor] | None = None) -> dict:
    """Write `out_dir/hard_negatives.jsonl` and `report.json` for the papers of `examples_dir`.

    `encode` (needed by the methods `nearest` and `coverage` only) maps papers to their
    whole-abstract vectors (N, D); `python -m aspire.data hard-negatives` builds it from `cfg.model`
    (cosine-ready: normalised, `cfg.max_length`, `cfg.batch_size`). It is passed in so that this
    module loads no model code. As the co-citation stages do, it writes `STAGE_MARKER` before its first file and
    removes it after its report (`aspire.data.cocite.stages.begin_stage`).
    """
    check_config(cfg)
    examples_dir, out_dir = Path(examples_dir), Path(out_dir)
    papers = read_paper_map(examples_dir / "abstracts.jsonl", split_strings=False)
    groups = read_groups(examples_dir)
    unknown = sorted({pid for g in groups for pid in g["paper_ids"]} - set(papers))
    if unknown:
        raise ValueError(f"{examples_dir}: co-cited papers without an abstract in abstracts.jsonl: {unknown[:10]}")
    if not papers:  # only sets without papers (a ZeroDivisionError in the report's mean before)
        raise ValueError(f"{examples_dir / 'abstracts.jsonl'}: no papers")
    order = sorted(papers, key=str)
    vectors = None
    if cfg.method in ENCODED:
        if encode is None:
            raise ValueError(f"hard negatives by method {cfg.method!r} need an `encode` function (papers -> "
                             "vectors); the CLI builds one from `model`")
        vectors = as_matrix(encode([papers[pid] for pid in order]))
        check_vectors(vectors, order)
    same_work = same_work_groups(papers)
    mined = _mine(cfg, groups, order, vectors, same_work)
    negatives = mined.negatives
    begin_stage(out_dir, "hard-negatives")
    with AtomicJsonl(out_dir / OUT_FILE) as out:
        for pid in order:
            out.write({"paper_id": pid, "negatives": negatives[pid]})
    counts = [len(negatives[pid]) for pid in order]
    none = [pid for pid in order if not negatives[pid]]
    report = {
        "stage": "hard-negatives",
        "input": str(examples_dir),
        "config": to_dict(cfg),
        "papers": len(order),
        "papers_with_negatives": len(order) - len(none),
        "papers_without_negatives": none,
        "negatives_per_paper_mean": sum(counts) / len(order),
        "negatives_per_paper_histogram": {str(n): c for n, c in sorted(Counter(counts).items())},
        "dropped": mined.dropped,
        "same_work": same_work,
        **mined.notes,
    }
    write_json(out_dir / REPORT, report)
    end_stage(out_dir)
    return report
